"""How the TPU workers' capacity is bought (``tpu.capacity``) and the values that go with it: a reservation name,
a maximum run duration, extra node labels to select and taints to tolerate. Parsers for single values here; the
checks that combine them read each mode's row (pwdeploy.config.capacity_modes), as pwdeploy.manifests.placement
does to render it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pwdeploy import identifiers as ids
from pwdeploy import names
from pwdeploy.catalog import TpuSlice
from pwdeploy.config.capacity_modes import LABELS, TIMED, capacity_mode
from pwdeploy.config.model import Toleration
from pwdeploy.config.values import key_values, kind_name
from pwdeploy.errors import ConfigError

MAX_RUN_SECONDS = 7 * 24 * 3600  # GKE runs flex-start and queued-provisioning VMs for at most 7 days
# The Dynamic Workload Scheduler's shortest run: Compute Engine's resize requests take a requestedRunDuration "from
# 600 to 604800" seconds (the compute_resize_request resource of the Terraform google provider, 6.41.0, as generated
# in cdktf/cdktf-provider-google-go google/computeresizerequest); shorter, the VMs would go before a job starts.
MIN_RUN_SECONDS = 600
BARE_SECONDS_AT_LEAST = 3600  # a number without a unit below an hour reads like minutes or hours meant
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

# Pattern text, compiled (and cached by `re`) at its first use: a render whose config does not reach it pays nothing.
_DURATION = r"([0-9]{1,12})\s*([smhd]?)"  # 12 digits is far past 7 days
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
# A reservation as GKE's --reservation takes it: NAME, or projects/PROJECT/reservations/NAME for a shared one.
_PROJECT = r"[a-z][-a-z0-9]{4,28}[a-z0-9]"
_RESERVATION = rf"(?:projects/({_PROJECT})/reservations/)?([a-z]([-a-z0-9]{{0,61}}[a-z0-9])?)"
_TOLERATION = r"([^=:]+)(?:=([^:]*))?:([A-Za-z]+)"


def parse_duration(value: Any, path: str) -> int:
    """Seconds from ``90m``, ``24h``, ``7d``, ``3600s`` or a number of seconds; at most 7 days."""
    text = str(value).strip().lower() if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    found = re.fullmatch(_DURATION, text) if text is not None else None
    if found is None:
        raise ConfigError(path, f"{value!r} is not a duration; e.g. 90m, 24h, 7d, or a number of seconds")
    seconds = int(found[1]) * _UNIT_SECONDS[found[2]]
    if not found[2] and 0 < seconds < BARE_SECONDS_AT_LEAST:
        raise ConfigError(
            path,
            f"{value!r} has no unit, so it reads as {seconds} seconds: too short for a TPU VM's run and almost surely "
            "a unit slip",
            hint=f"write {found[1]}h for hours or {found[1]}m for minutes ({found[1]}s if you do mean seconds)",
        )
    if not MIN_RUN_SECONDS <= seconds <= MAX_RUN_SECONDS:
        raise ConfigError(
            path,
            f"{value!r} is {seconds} s; flex-start and queued VMs run for at least 10 minutes (10m, {MIN_RUN_SECONDS}) "
            f"and at most 7 days (7d, {MAX_RUN_SECONDS})",
        )
    return seconds


def parse_reservation(value: str, path: str) -> tuple[str | None, str]:
    """(project or None, reservation name) of ``NAME`` or ``projects/PROJECT/reservations/NAME``."""
    found = re.fullmatch(_RESERVATION, value)
    if found is None:
        raise ConfigError(
            path,
            f"{value!r} is not a reservation: use its name (lowercase letters, digits and '-', at most 63) or "
            "projects/PROJECT/reservations/NAME for a reservation shared from another project",
        )
    return found[1], found[2]


def parse_labels(value: Any, path: str) -> tuple[tuple[str, str], ...]:
    """Node labels to select: a mapping, or KEY=VALUE items as repeated flags give them; each a valid label."""
    value = key_values(value, path, "cloud.google.com/gke-nodepool=tpu-a")
    if not isinstance(value, dict):
        raise ConfigError(path, f"must be a mapping of label: value, not a {kind_name(value)}")
    labels = []
    for key, label in value.items():
        where = f"{path}.{key}"
        if not isinstance(key, str):
            raise ConfigError(path, f"a label key must be text, not a {kind_name(key)}")
        if isinstance(label, (dict, list)) or label is None:
            raise ConfigError(where, f"must be a string, not a {kind_name(label)}")
        if isinstance(label, bool):  # YAML 1.1 reads unquoted yes/no/on/off as booleans too: `ml: yes` is True
            raise ConfigError(
                where,
                f"is the YAML boolean {str(label).lower()} (unquoted true/false, yes/no or on/off), but a label value "
                "is text and a node's label is matched exactly",
                hint=f'quote the value as the node has it, e.g. {key}: "yes"',
            )
        text = str(label)
        for problem in (names.label_key(str(key)), names.label_value(text)):
            if problem is not None:
                raise ConfigError(where, problem)
        labels.append((str(key), text))
    return tuple(labels)


def parse_tolerations(value: Any, path: str) -> tuple[Toleration, ...]:
    """Taints to tolerate, each ``KEY[=VALUE]:EFFECT`` (no value: any value of that key)."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise ConfigError(path, f"must be a list of KEY[=VALUE]:EFFECT, not a {kind_name(value)}")
    return tuple(_toleration(item, path) for item in items)


def _toleration(item: Any, path: str) -> Toleration:
    found = re.fullmatch(_TOLERATION, item.strip()) if isinstance(item, str) else None
    if found is None:
        raise ConfigError(path, f"{item!r} is not KEY[=VALUE]:EFFECT; e.g. dedicated=ml:NoSchedule")
    key, value, effect = found[1].strip(), found[2], found[3]
    if effect not in EFFECTS:
        raise ConfigError(path, f"{item!r}: the effect must be one of {', '.join(EFFECTS)}, not {effect!r}")
    for problem in (names.label_key(key), names.label_value(value) if value else None):
        if problem is not None:
            raise ConfigError(path, f"{item!r}: {problem}")
    return Toleration(key, value, effect)  # "KEY=:EFFECT" tolerates the empty value only, "KEY:EFFECT" any


def check_capacity(parsed: Mapping[str, Any]) -> None:
    """The capacity fields together, as the mode's row says: a reservation exactly with a mode that consumes one,
    a run duration only for the modes that have one, a queue where the mode needs one, and extra selectors that
    do not contradict the labels the TPU shape and the capacity mode select."""
    capacity, reservation = parsed["tpu.capacity"], parsed["tpu.reservation"]
    mode = capacity_mode(capacity)
    if mode.reservation and reservation is None:
        raise ConfigError(
            "tpu.reservation", f"is required with capacity {capacity}", hint="e.g. --reservation my-v5p-reservation"
        )
    if reservation is not None and not mode.reservation:
        raise ConfigError(
            "tpu.reservation",
            f"is set but tpu.capacity is {capacity}; a reservation is consumed with capacity reservation",
            hint="pass --capacity reservation, or drop the reservation",
        )
    if reservation is not None:
        parse_reservation(reservation, "tpu.reservation")
    if parsed["tpu.max_run_duration"] is not None and not mode.run_duration:
        raise ConfigError(
            "tpu.max_run_duration",
            f"applies to capacity {' and '.join(TIMED)} only, not {capacity}: those VMs are not time-limited",
        )
    if mode.needs_queue and not parsed["scheduling.queue"]:
        raise ConfigError(
            "scheduling.queue",
            f"is required with capacity {capacity}: queued provisioning goes through a Kueue LocalQueue whose "
            "ClusterQueue has a ProvisioningRequest admission check",
            hint="pass --queue LOCALQUEUE (see docs/capacity.md)",
        )
    _check_selector(dict(parsed["tpu.node_selector"]), capacity)
    if parsed["tpu.slices"] > 1 and ids.NODE_POOL_LABEL in dict(parsed["tpu.node_selector"]):
        raise ConfigError(
            f"tpu.node_selector.{ids.NODE_POOL_LABEL}",
            f"pins all {parsed['tpu.slices']} slices to one node pool, but each slice needs a node pool of its own "
            f"(the workers' exclusive topology is {ids.NODE_POOL_LABEL}): all slices but one would wait forever",
            hint="select a label every TPU pool of this job carries instead (e.g. --tpu-node-selector team=ml), or "
            "run one slice",
        )


def _check_selector(extra: dict[str, str], capacity: str) -> None:
    owned = {ids.TPU_ACCELERATOR_LABEL: "tpu.type", ids.TPU_TOPOLOGY_LABEL: "tpu.type"}
    owned |= {label: "tpu.capacity" for label in LABELS}
    owned |= {ids.RESERVATION_NAME_LABEL: "tpu.reservation", ids.RESERVATION_PROJECT_LABEL: "tpu.reservation"}
    for key in extra:
        if key in owned:
            raise ConfigError(
                f"tpu.node_selector.{key}",
                f"is set by pwdeploy from {owned[key]}; set that field instead",
            )


# GKE dynamic slicing (GKE "Schedule dynamic slices with Kueue and TAS", use-gke-dynamic-slicing, read 2026-12):
# Ironwood (tpu7x) only, on All Capacity mode reservations, node pools of 4x4x4 sub-blocks; a slice of 4x4x4 or
# more is a super-slice (GKE 1.35.2-gke.1842000 and later), one below it a sub-slice (1.36.0-gke.3712000 and
# later). Cluster Toolkit v1.95.0 (pkg/config/hardware.go, validateDimensions) takes the same two kinds of topology.
DYNAMIC_SLICING_FAMILY = "tpu7x"
SUB_SLICES = ("2x2x1", "2x2x2", "2x2x4", "2x4x4")
SUB_BLOCK_CHIPS = 64  # a 4x4x4 sub-block: 16 VMs of 4 chips
DYNAMIC_SLICING_FIELDS = ("tpu.dynamic_slicing", "tpu.slice", "tpu.capacity", "scheduling.queue", "tpu.node_selector")


def check_dynamic_slicing(parsed: Mapping[str, Any]) -> None:
    """Dynamic slicing only where GKE offers it: the family, the capacity mode, the slice's topology, Kueue."""
    if not parsed["tpu.dynamic_slicing"]:
        return
    tpu = parsed["tpu.slice"]
    if tpu.family.name != DYNAMIC_SLICING_FAMILY:
        raise ConfigError(
            "tpu.dynamic_slicing",
            f"GKE forms dynamic slices of Ironwood (tpu7x) only, not {tpu.family.name}",
            hint="drop --dynamic-slicing, or run on tpu7x",
        )
    if tpu.topology not in SUB_SLICES and tpu.chips < SUB_BLOCK_CHIPS:
        raise ConfigError(
            "tpu.dynamic_slicing",
            f"a {tpu.topology} slice ({tpu.type_name}) is not one dynamic slicing forms: a dynamic slice is a "
            f"sub-slice ({', '.join(SUB_SLICES)}) or 4x4x4 and larger",
            hint="drop --dynamic-slicing",
        )
    if parsed["tpu.capacity"] != "reservation":
        raise ConfigError(
            "tpu.dynamic_slicing",
            f"GKE offers dynamic slicing on All Capacity mode reservations only, not capacity {parsed['tpu.capacity']}",
            hint="pass --capacity reservation --reservation NAME (an All Capacity mode reservation), or drop "
            "--dynamic-slicing",
        )
    if not parsed["scheduling.queue"]:
        raise ConfigError(
            "scheduling.queue",
            "is required with tpu.dynamic_slicing: Kueue's topology-aware scheduling places the slice and GKE's "
            "slice admission check forms it",
            hint="pass --queue LOCALQUEUE (docs/capacity.md, dynamic slicing)",
        )
    if ids.NODE_POOL_LABEL in dict(parsed["tpu.node_selector"]):
        raise ConfigError(
            f"tpu.node_selector.{ids.NODE_POOL_LABEL}",
            "pins the workers to one node pool, but a dynamic slice spans the sub-blocks' node pools",
            hint="drop it, or drop --dynamic-slicing",
        )


def flex_start_multi_host(capacity: str, tpu_slice: TpuSlice) -> str | None:
    """A warning for flex-start on a slice of several VMs. Flex-start VMs come as capacity allows, one node at a
    time; GKE's guide to flex-start with queued provisioning ("Run a large-scale workload with flex-start with
    queued provisioning", GKE how-to provisioningrequest) recommends queued provisioning for workloads that "run
    across multiple nodes simultaneously" and plain flex-start VMs for those that run on one node. A multi-host
    slice starts only with all of its VMs, and bills those it has while it waits."""
    if capacity != "flex-start" or tpu_slice.vms <= 1:
        return None
    return (
        f"tpu.capacity flex-start with a {tpu_slice.type_name} slice of {tpu_slice.vms} VMs: flex-start VMs come one "
        "by one as capacity allows, and a multi-host slice starts only with all of them (billing those it has while "
        "it waits); GKE recommends queued provisioning for work that runs on several nodes at once: --capacity queued "
        "--queue LOCALQUEUE (docs/capacity.md)"
    )
