"""The TPU capacity modes (``tpu.capacity``), one row each: how a mode's TPU VMs are bought, and everything that follows
from it for the manifests (the node labels the workers select, the taints they tolerate, the JobSet's annotations),
for the config constraints (what the mode requires or forbids), for cluster readiness (what the cluster should show) and
for the warnings (what reclaims its VMs: ``pwdeploy.advice``). ``pwdeploy.manifests.placement``,
``pwdeploy.config.capacity``, the readiness checks and the warnings read these rows and branch on none of the names:
adding a mode is one row here plus its golden manifest.

A row is a ``NamedTuple``, immutable like a frozen dataclass: ``dataclasses`` would pull ``inspect`` into
``pwdeploy render``'s start-up (about 9 ms, against a 60 ms command).

Sources, checked 2026-12 (docs/capacity.md lists them with links): spot: GKE "Use Spot VMs" (label and taint
``cloud.google.com/gke-spot``); reservations: GKE "Plan TPUs: TPU reservation" and xpk ``capacity.py`` (label
``cloud.google.com/reservation-name``), Cluster Toolkit's GKE orchestrator (``resolveReservationTolerations``:
the toleration ``cloud.google.com/reservation-name=<R>:NoSchedule`` always, since node pools that
auto-provisioning makes for a reservation carry that taint); flex-start: GKE "About flex-start provisioning"
(label ``cloud.google.com/gke-flex-start``); queued: GKE "flex-start with queued provisioning" and Cluster
Toolkit's ``dws-flex-start-queued-provisioning`` TPU example (label and taint ``cloud.google.com/gke-queued``,
``provreq.kueue.x-k8s.io/maxRunDurationSeconds`` on the job object).
"""

# No `from __future__ import annotations`: typing.NamedTuple compiles each string annotation into a ForwardRef
# (tens of microseconds a field), which evaluated annotations skip; as in pwdeploy.config.model.
from typing import Literal, NamedTuple

from pwdeploy import identifiers as ids

# Where a mode puts tpu.max_run_duration: nowhere (the field is then an error), on the workers as a node label
# they select, or on the JobSet as the annotation Kueue copies into its ProvisioningRequest.
RunDuration = Literal["", "node-label", "jobset-annotation"]


class CapacityMode(NamedTuple):
    name: str
    labels: tuple[tuple[str, str], ...] = ()  # node labels the workers select
    taints: tuple[tuple[str, str], ...] = ()  # KEY=VALUE:NoSchedule taints of the mode's nodes, tolerated
    reservation: bool = False  # consumes tpu.reservation (required): selects its name and tolerates its taint
    run_duration: RunDuration = ""
    needs_queue: bool = False  # scheduling.queue is required: the mode goes through a Kueue LocalQueue
    scales_from_zero: bool = False  # readiness: pools cannot be seen until they scale up, so too few is ok
    provisioning_request: bool = False  # readiness: the ClusterQueue must run a ProvisioningRequest check
    pool_flags: str = ""  # what `gcloud container node-pools create` needs for such a pool (docs/capacity.md)
    # What ends a job on this mode through no fault of its own (render and submit warn when nothing recovers it).
    reclaimed: str = ""


MODES: tuple[CapacityMode, ...] = (
    CapacityMode("on-demand", pool_flags="--num-nodes 1"),
    CapacityMode(
        "spot",
        labels=((ids.SPOT_LABEL, "true"),),
        taints=((ids.SPOT_LABEL, "true"),),
        pool_flags="--spot --num-nodes 1",
        reclaimed="a spot VM can be preempted at any time",
    ),
    CapacityMode(
        "reservation",
        reservation=True,
        pool_flags="--reservation-affinity specific --reservation NAME (or projects/PROJECT/reservations/NAME) "
        "--num-nodes 1",
    ),
    CapacityMode(
        "flex-start",
        labels=((ids.FLEX_START_LABEL, "true"),),
        run_duration="node-label",
        scales_from_zero=True,
        pool_flags="--flex-start --enable-autoscaling --num-nodes 0 --max-nodes 1 --location-policy ANY "
        "--reservation-affinity none --no-enable-autorepair",
        reclaimed="flex-start VMs are reclaimed at the end of their run duration (at most 7 days)",
    ),
    CapacityMode(
        "queued",
        labels=((ids.QUEUED_LABEL, "true"),),
        taints=((ids.QUEUED_LABEL, "true"),),
        run_duration="jobset-annotation",
        needs_queue=True,
        scales_from_zero=True,
        provisioning_request=True,
        pool_flags="the flex-start flags plus --enable-queued-provisioning",
        reclaimed="queued-provisioning VMs are reclaimed at the end of their run duration (at most 7 days)",
    ),
)
BY_NAME: dict[str, CapacityMode] = {mode.name: mode for mode in MODES}
NAMES: tuple[str, ...] = tuple(BY_NAME)
TIMED: tuple[str, ...] = tuple(mode.name for mode in MODES if mode.run_duration)  # VMs that live max_run_duration
# The node labels some mode selects (tpu.node_selector may not set them: tpu.capacity does).
LABELS: tuple[str, ...] = (
    *dict.fromkeys(key for mode in MODES for key, _ in mode.labels),
    ids.MAX_RUN_DURATION_LABEL,
)


def capacity_mode(name: str) -> CapacityMode:
    """The row of a mode the config accepted (tpu.capacity is one of ``NAMES``)."""
    return BY_NAME[name]
