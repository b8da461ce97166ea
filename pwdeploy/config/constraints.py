"""The config constraints that combine fields (or resolve a value from several), run after each field parsed.

Each constraint names the fields it reads; pwdeploy.config applies it only when all of them parsed, so one bad
value gives one error, not a cascade. A constraint sees only what it names (``Inputs``): reading another path is a
mistake in the constraint and raises at once, and every named path must be a field or a resolved value (checked on
import), so a misspelt path cannot quietly make a constraint read nothing or never apply.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pwdeploy import catalog, names
from pwdeploy.config import (
    image_constraints,
    mtc_constraints,
    sidecar_constraints,
    storage_constraints,
    storage_volumes,
)
from pwdeploy.config.capacity import DYNAMIC_SLICING_FIELDS, check_capacity, check_dynamic_slicing
from pwdeploy.config.fields import BY_PATH
from pwdeploy.config.values import check_name, parse_gcs
from pwdeploy.errors import ConfigError, raise_all
from pwdeploy.identifiers import COORDINATOR_LABEL, HEAD_JOB, RM_PORT, WORKER_JOB
from pwdeploy.quantity import amount

# GKE's node pool names: a lower-case letter, then lower-case letters, digits and hyphens, not ending in a hyphen,
# 40 characters at most (the rule GKE applies to cluster names as well; the 40 is noted where Terraform configs
# shorten pool names, e.g. https://gitlab.com/thorchain/devops/cluster-launcher/-/merge_requests/67).
NODE_POOL = re.compile(r"[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?")
# No documented limit of Pathways or JobSet was found (replicas is an int32). The largest multislice run Google
# has published spanned 50,000+ TPU v5e chips, about 200 slices of 256 (https://cloud.google.com/blog/products/
# compute/the-worlds-largest-distributed-llm-training-job-on-tpu-v5e); far beyond that is a typo (chips as slices).
MAX_SLICES = 1000

# Values the checks resolve from several fields; JobConfig holds them beside the rows (tpu.slice: TpuConfig.slice).
RESOLVED = ("tpu.slice",)

Constraint = Callable[["Inputs"], "dict[str, Any] | None"]  # may add resolved values to the parsed fields


class ConstraintMistake(Exception):
    """A check reads or returns a path it did not name: a mistake in pwdeploy itself, not in a job config."""


class Inputs(Mapping[str, Any]):
    """The parsed values of the paths one check named, and nothing else."""

    def __init__(self, parsed: Mapping[str, Any], paths: tuple[str, ...]) -> None:
        self._parsed = parsed
        self._paths = paths

    def __getitem__(self, path: str) -> Any:
        if path not in self._paths:
            raise ConstraintMistake(f"a config constraint reads {path!r} but names only {', '.join(self._paths)}")
        return self._parsed[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


def apply_constraint(paths: tuple[str, ...], check: Constraint, parsed: Mapping[str, Any]) -> dict[str, Any]:
    """What ``check`` resolves from the ``paths`` it named; ConstraintMistake for a value it resolves but may not set
    (neither a path it named nor one of RESOLVED)."""
    resolved = check(Inputs(parsed, paths)) or {}
    for path in resolved:
        if path not in paths and path not in RESOLVED:
            raise ConstraintMistake(f"a config constraint sets {path!r}, which it does not name and is not in RESOLVED")
    return resolved


def constraints(installed_jax: str | None, base_dir: Path) -> list[tuple[tuple[str, ...], Constraint]]:
    """Each check with the fields it reads; it runs only when all of them parsed."""
    return [
        (("name",), _name),
        (("namespace",), lambda p: _optional_name(p, "namespace", names.dns1123_label)),
        (image_constraints.REGISTRY_FIELDS, image_constraints.image_registry),
        (("head.node_pool",), _node_pool),
        (("tpu.slices",), _slices),
        (image_constraints.VERSION_FIELDS, lambda p: image_constraints.pathways_version(p, installed_jax)),
        (("xla_flags",), _xla_flags),
        (image_constraints.PINNED_FIELDS, image_constraints.pinned_images),
        (image_constraints.TAG_FIELDS, image_constraints.pathways_tags),
        (image_constraints.REPOSITORY_FIELDS, image_constraints.repositories),
        (("tpu.type", "tpu.family", "tpu.topology"), _resolve_slice),
        (("main.cpu", "main.data_workers"), _data_workers),
        (("scheduling.max_restarts", "storage.checkpoints", "mtc.enabled"), _max_restarts),
        (("storage.scratch",), _scratch),
        (("scheduling.queue", "scheduling.priority_class", "scheduling.service_account"), _scheduling),
        (("local.compile_cache",), lambda p: _compile_cache(p, base_dir)),
        (image_constraints.MAIN_IMAGE_FIELDS, image_constraints.main_image),
        (("headless", "main.command"), _main_command),
        (("headless", "main.shm_size", "main.memory"), _main_shm),
        (("tpu.shm_size", "tpu.worker_memory"), _worker_shm),
        (("tpu.elastic_slices", "tpu.slices"), _elastic),
        (("name", "tpu.slices", "tpu.slice"), _name_length),
        (("headless", "head.transfer_shm_size", "main.shm_size", "main.memory", "head.proxy_memory"), _transfer),
        (_CAPACITY_INPUTS, check_capacity),
        (DYNAMIC_SLICING_FIELDS, check_dynamic_slicing),
        (sidecar_constraints.SHM_FIELDS, sidecar_constraints.sidecar_shm),
        (sidecar_constraints.PYTHON_FIELDS, sidecar_constraints.same_python),
        (mtc_constraints.NEEDS_SIDECAR_FIELDS, mtc_constraints.needs_sidecar),
        (mtc_constraints.RAMDISK_FIELDS, mtc_constraints.ramdisk_dir),
        (mtc_constraints.INTERVAL_FIELDS, mtc_constraints.backup_interval),
        (mtc_constraints.BUCKET_FIELDS, mtc_constraints.backup_bucket),
        (storage_volumes.CHECK_FIELDS, storage_volumes.check_volumes),
        (storage_constraints.PLACEMENT_FIELDS, storage_constraints.checkpoints_apart),
        (("proxy_env", "rm_env", "rm_flags"), _components),
    ]


_CAPACITY_INPUTS = (
    "tpu.capacity",
    "tpu.reservation",
    "tpu.max_run_duration",
    "tpu.node_selector",
    "tpu.tolerations",
    "tpu.slices",
    "scheduling.queue",
)


def unknown_inputs(table: list[tuple[tuple[str, ...], Constraint]]) -> list[str]:
    """The paths the checks name that are neither a field nor a resolved value (a misspelt path would make its
    check never run: the loader skips checks whose inputs did not parse)."""
    return [path for paths, _ in table for path in paths if path not in BY_PATH and path not in RESOLVED]


def _name(parsed: Mapping[str, Any]) -> None:
    if parsed["name"] is None:
        raise ConfigError("name", "is required; set it in the file or with --name")
    check_name(parsed["name"], "name", names.dns1035_label)


def _optional_name(parsed: Mapping[str, Any], path: str, rule: Callable[[str], str | None]) -> None:
    if parsed[path] is not None:
        check_name(parsed[path], path, rule)


def _node_pool(parsed: Mapping[str, Any]) -> None:
    pool = parsed["head.node_pool"]
    if not NODE_POOL.fullmatch(pool):
        raise ConfigError(
            "head.node_pool",
            f"{pool!r} is not a GKE node pool name (a lower-case letter, then lower-case letters, digits or '-', "
            "not ending in '-'; at most 40 characters)",
            hint="list the cluster's pools: gcloud container node-pools list --cluster CLUSTER",
        )


def _slices(parsed: Mapping[str, Any]) -> None:
    if parsed["tpu.slices"] > MAX_SLICES:
        raise ConfigError(
            "tpu.slices",
            f"{parsed['tpu.slices']} slices is more than pwdeploy accepts ({MAX_SLICES}); it counts slices (worker "
            "replicas), not chips: a v5p-128 slice is one slice",
        )


def _resolve_slice(parsed: Mapping[str, Any]) -> dict[str, Any]:
    tpu_type, family, topology = parsed["tpu.type"], parsed["tpu.family"], parsed["tpu.topology"]
    if tpu_type and (family or topology):
        raise ConfigError("tpu.type", "set either tpu.type or tpu.family with tpu.topology, not both")
    if tpu_type:
        return {"tpu.slice": catalog.from_type(tpu_type)}
    if family and topology:
        return {"tpu.slice": catalog.from_topology(family, topology)}
    if family or topology:
        missing = "tpu.topology" if family else "tpu.family"
        raise ConfigError(missing, "is required together with " + ("tpu.family" if family else "tpu.topology"))
    raise ConfigError("tpu.type", "is required; e.g. --tpu-type v5p-8 (or tpu.family with tpu.topology)")


def _data_workers(parsed: Mapping[str, Any]) -> dict[str, Any]:
    """Each data-loader worker is a process that wants a CPU of its own: at most as many as main.cpu gives (none
    by default below one CPU, where the main process alone fills the limit)."""
    cpus = amount(parsed["main.cpu"], "main.cpu")
    workers = parsed["main.data_workers"]
    if workers is None:
        workers = max(1, int(cpus) - 1) if cpus >= 1 else 0
    elif workers > cpus:
        most = int(cpus)
        fix = f"use at most {most} or raise main.cpu" if most else "use 0 (load in the main process) or raise main.cpu"
        raise ConfigError(
            "main.data_workers",
            f"{workers} exceeds the user container's CPU limit ({parsed['main.cpu']}): each worker is a process "
            f"that needs a CPU of its own; {fix}",
        )
    return {"main.data_workers": workers}


RESTARTS_WITH_CHECKPOINTS = 3  # each restart resumes from the last checkpoint; 3 bounds what a failing pool costs
MAX_RESTARTS = 100  # JobSet takes an int32; past this a number is "for ever", which a crash loop turns into TPU bills


def _max_restarts(parsed: Mapping[str, Any]) -> dict[str, Any]:
    """Unset: 3 when the job checkpoints (storage.checkpoints, or multi-tier checkpoints: a restart costs the steps
    since the last checkpoint), else 0 (a restart would start again from step 0; docs/resuming.md says why)."""
    restarts = parsed["scheduling.max_restarts"]
    if restarts is None:
        checkpoints = parsed["storage.checkpoints"] is not None or parsed["mtc.enabled"]
        restarts = RESTARTS_WITH_CHECKPOINTS if checkpoints else 0
    if restarts > MAX_RESTARTS:
        raise ConfigError(
            "scheduling.max_restarts",
            f"{restarts} is more restarts than pwdeploy accepts ({MAX_RESTARTS}): each restart recreates every pod "
            "of the job, so a job that fails the same way each time would hold its TPUs in a crash loop for days",
            hint=f"use a bound you would wait through (the default with checkpoints is {RESTARTS_WITH_CHECKPOINTS})",
        )
    return {"scheduling.max_restarts": restarts}


def _scratch(parsed: Mapping[str, Any]) -> None:
    if parsed["storage.scratch"] is None:
        raise ConfigError(
            "storage.scratch",
            "is required: Pathways keeps its compilation cache and job state there",
            hint="pass --gcs-scratch gs://BUCKET/PREFIX (a bucket your node pool's service account can write)",
        )


def _xla_flags(parsed: Mapping[str, Any]) -> None:
    for flag in parsed["xla_flags"]:
        if flag.startswith("--megascale_"):
            raise ConfigError(
                "xla_flags",
                f"{flag.split('=', 1)[0]} is a Pathways worker flag, not an XLA flag for the proxy",
                hint=f"pass it with --worker-flag {flag} (config: worker_flags)",
            )


def dump_without_destination(xla_flags: tuple[str, ...], hlo_dump: object) -> str | None:
    """A warning for an HLO dump flag with nowhere to dump: XLA then writes every module to the standard output of
    the process that compiles ("If not specified but another dumping flag is passed, data will be written to
    stdout": xla_dump_to's help in openxla/xla, xla/debug_options_flags.cc), a log flood rather than files."""
    flags = [flag.split("=", 1)[0] for flag in xla_flags]
    dumps = [flag for flag in flags if flag.startswith("--xla_dump") and flag != "--xla_dump_to"]
    if not dumps or "--xla_dump_to" in flags or hlo_dump is not None:
        return None
    return (
        f"xla_flags: {dumps[0]} says how to dump HLO but not where, so XLA writes every module to the log of the "
        "process that compiles (the proxy's; in local run, the job's): set storage.hlo_dump (--hlo-dump "
        "gs://BUCKET/hlo), or pass --xla-flag --xla_dump_to=- if the log is meant"
    )


def _scheduling(parsed: Mapping[str, Any]) -> None:
    for path in ("scheduling.queue", "scheduling.priority_class", "scheduling.service_account"):
        _optional_name(parsed, path, names.dns1123_subdomain)
    _optional_name(parsed, "scheduling.queue", names.label_value)  # also the value of the Kueue label


def _compile_cache(parsed: Mapping[str, Any], base_dir: Path) -> dict[str, Any]:
    """A gs:// cache is checked like every GCS location; a local one resolves against the config's folder. A value
    that looks like a URI but is not a gs:// one (``gs:/bucket``, ``s3://...``) is refused: as a path it would
    make a local folder named ``gs:``."""
    cache = parsed["local.compile_cache"]
    if cache.startswith("gs://"):
        parse_gcs(cache, "local.compile_cache")
        return {}
    if not cache:
        return {}
    written, colon, rest = cache.partition(":")
    gcs = written.lower() == "gs"  # gs:/bucket, gs:bucket, GS://bucket
    if colon and (gcs or (rest.startswith("/") and written.isascii() and written.replace("-", "").isalnum())):
        fix = f"write gs://{rest.lstrip('/')}" if gcs else "use gs://BUCKET/PREFIX or a local folder"
        raise ConfigError(
            "local.compile_cache",
            f"{cache!r} is neither a gs:// location nor a local folder (as a path it would make a folder "
            f"named {written}:)",
            hint=fix,
        )
    path = Path(cache).expanduser()
    return {"local.compile_cache": str(path if path.is_absolute() else base_dir / path)}


def _main_command(parsed: Mapping[str, Any]) -> None:
    if not parsed["headless"] and not parsed["main.command"]:
        raise ConfigError("main.command", "is required (unless headless); e.g. --command 'python3 train.py'")


def _main_shm(parsed: Mapping[str, Any]) -> None:
    if not parsed["headless"]:
        _check_fits(parsed["main.shm_size"], "main.shm_size", parsed["main.memory"], "main.memory")


def _worker_shm(parsed: Mapping[str, Any]) -> None:
    if parsed["tpu.worker_memory"] is not None:
        _check_fits(parsed["tpu.shm_size"], "tpu.shm_size", parsed["tpu.worker_memory"], "tpu.worker_memory")


def _elastic(parsed: Mapping[str, Any]) -> None:
    elastic, slices = parsed["tpu.elastic_slices"], parsed["tpu.slices"]
    if elastic >= slices and elastic > 0:
        raise ConfigError(
            "tpu.elastic_slices",
            f"{elastic} must be less than tpu.slices ({slices}): at least one slice must stay",
        )


def _check_fits(size: str, size_path: str, limit: str, limit_path: str) -> None:
    if amount(size, size_path) >= amount(limit, limit_path):
        raise ConfigError(
            size_path,
            f"{size} does not fit inside {limit_path} ({limit}): /dev/shm is memory-backed and counts against "
            "the container's memory limit; lower it or raise the limit",
        )


def _name_length(parsed: Mapping[str, Any]) -> None:
    """The exact bound on the JobSet's name: see names.jobset_name_bound."""
    name = parsed["name"]
    if name is None:
        return  # the name check says it is required
    slices, vms = parsed["tpu.slices"], parsed["tpu.slice"].vms
    bound, why = names.jobset_name_bound(HEAD_JOB, WORKER_JOB, slices, vms, COORDINATOR_LABEL)
    if len(name) > bound:
        raise ConfigError(
            "name", f"{name!r} is {len(name)} characters; {why}, so the name can be at most {bound} characters"
        )


def _transfer(parsed: Mapping[str, Any]) -> None:
    """The client-proxy transfer directory is memory-backed and charged to both containers that mount it."""
    size_text = parsed["head.transfer_shm_size"]
    if size_text is None:
        return  # no cap: the pages count against main.memory and head.proxy_memory as they are written
    size = amount(size_text, "head.transfer_shm_size", allow_zero=True)
    shm = amount(parsed["main.shm_size"], "main.shm_size")
    if parsed["headless"] or size == 0 or shm >= amount(parsed["main.memory"], "main.memory"):
        return  # nothing to share, or /dev/shm alone is too big (that check says so)
    main_total = size + shm
    limits = (
        (
            main_total,
            parsed["main.memory"],
            f"main.memory ({parsed['main.memory']}) together with main.shm_size ({parsed['main.shm_size']})",
        ),
        (size, parsed["head.proxy_memory"], f"head.proxy_memory ({parsed['head.proxy_memory']})"),
    )
    for needed, limit, what in limits:
        if needed >= amount(limit, "memory"):
            raise ConfigError(
                "head.transfer_shm_size",
                f"{size_text} does not fit inside {what}: the transfer directory is memory-backed and counts "
                "against the memory limit of main and pathways-proxy",
                hint="lower --transfer-shm-size (0 turns it off) or raise the memory limit",
            )


# What render sets itself in the head's servers (pwdeploy.manifests.head), and where its value comes from: the
# proxy's and the resource manager's own env and flags (proxy_env, rm_env, rm_flags) may not give it again, since
# a second value would be ignored or replace the wiring render depends on. xpk and Cluster Toolkit
# (--pathways-server-args, v1.95.0 cmd/job/submit.go) append theirs after their own; here they are refused.
_HEAD_ADDRESS = "pwdeploy (the coordinator label: the head's address)"
_OWN = {
    "proxy_env": {"PATHWAYS_HEAD": _HEAD_ADDRESS, "XLA_FLAGS": "xla_flags (--xla-flag; HLO dump flags go there)"},
    "rm_env": {
        "HOST_ADDRESS": _HEAD_ADDRESS,
        "TPU_SKIP_MDS_QUERY": "pwdeploy (true: the head runs on a CPU node)",
        "JOBSET_NAME": "pwdeploy (the JobSet's annotation)",
        "REPLICATED_JOB_NAME": "pwdeploy (the JobSet's annotation)",
    },
    "rm_flags": {
        "--server_port": f"pwdeploy ({RM_PORT}, which the proxy and the workers dial)",
        "--gcs_scratch_location": "storage.scratch (--gcs-scratch)",
        "--node_type": "pwdeploy (resource_manager)",
        "--instance_count": "tpu.slices (--num-slices)",
        "--instance_type": "tpu.type, or tpu.family with tpu.topology",
        "--enable_gcs_olm": "storage.enable_olm (--gcs-olm/--no-gcs-olm)",
    },
}


def _components(parsed: Mapping[str, Any]) -> None:
    given = {
        "proxy_env": [name for name, _ in parsed["proxy_env"]],
        "rm_env": [name for name, _ in parsed["rm_env"]],
        "rm_flags": [flag.split("=", 1)[0] for flag in parsed["rm_flags"]],
    }
    raise_all(
        [
            ConfigError(path if path == "rm_flags" else f"{path}.{name}", f"{name} is set by {own}; remove it")
            for path, names_given in given.items()
            for name in names_given
            if (own := _OWN[path].get(name)) is not None
        ]
    )
