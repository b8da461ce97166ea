"""Every cause diagnose names, in the order its stage blocks a job (findings of one severity are ranked by it), and
what each stage's rules read. Each cause is one row (``findings.Cause``) beside the rule that finds it; this module
only lists them. The reference table of ``docs/diagnose.md`` is generated from here (``pwdeploy.cli.reference``)."""

from __future__ import annotations

from typing import get_args

from pwdeploy.cluster.diagnose import (
    containers,
    creation,
    images,
    lifecycle,
    multi_tier,
    pathways,
    queueing,
    scheduling,
    stops,
)
from pwdeploy.cluster.diagnose.findings import Cause, Stage
from pwdeploy.finding import Finding
from pwdeploy.severity import SEVERITIES

# Stage by stage, in findings.Stage's order; this order ranks the findings of one severity.
ROWS: tuple[Cause, ...] = (
    queueing.KUEUE_PENDING,
    queueing.KUEUE_DEACTIVATED,
    queueing.PODS_READY_TIMEOUT,
    queueing.KUEUE_WAITING_PODS,
    creation.NO_JOBSET_CONTROLLER,
    creation.POD_CREATE_REFUSED,
    scheduling.SCALE_UP_FAILED,
    scheduling.HEAD_UNSCHEDULABLE,
    scheduling.TPU_CAPACITY,
    scheduling.NODE_SELECTOR,
    scheduling.UNTOLERATED_TAINT,
    scheduling.UNSCHEDULABLE,
    images.IMAGE_NOT_FOUND,
    images.IMAGE_UNAUTHORIZED,
    images.IMAGE_PULL,
    containers.MISSING_SECRET,
    containers.CONTAINER_CONFIG,
    containers.SIDECAR_NOT_STARTED,
    multi_tier.MTC_VOLUME,
    pathways.SCRATCH_BUCKET_MISSING,
    pathways.SCRATCH_LIFECYCLE_LIMIT,
    pathways.VERSION_MISMATCH,
    pathways.PROXY_IN_USE,
    multi_tier.MTC_REPLICATOR_FAILED,
    multi_tier.MTC_NO_DRIVER,
    pathways.SESSION_LOST,
    containers.OOM_KILLED,
    pathways.HBM_OOM,
    pathways.SHM_EXHAUSTED,
    pathways.GCS_PERMISSION,
    pathways.PROXY_BACKEND,
    pathways.HANG,
    containers.CRASH,
    lifecycle.PREEMPTED,
    stops.SIGTERM_IGNORED,
    lifecycle.MAX_RESTARTS,
    lifecycle.JOB_FAILED,
    lifecycle.RESTARTED,
)

# Per stage: the objects and fields its rules read.
READS: dict[Stage, str] = {
    "queue": "Kueue Workload conditions (QuotaReserved, Admitted, Evicted) and admission checks, ProvisioningRequest "
    "conditions",
    "create": "the JobSet's status and its Jobs; the Jobs' `FailedCreate` events",
    "schedule": "the pod's PodScheduled condition, cluster-autoscaler events",
    "image": "ErrImagePull / ImagePullBackOff and the kubelet's `Failed to pull image` event",
    "start": "container waiting reasons; `FailedMount` events of the MTC volume",
    "run": "container states, pod conditions, the last 40 lines of container logs",
    "end": "JobSet conditions, `status.restarts` and its restart events",
}

# Cause ids (a contract: tests, scripts and `-o json` readers match on them) by stage, each stage in ROWS' order.
STAGES: dict[Stage, tuple[str, ...]] = {
    stage: tuple(row.id for row in ROWS if row.stage == stage) for stage in get_args(Stage)
}
CAUSES: tuple[str, ...] = tuple(cause for causes in STAGES.values() for cause in causes)
MEANINGS: dict[str, str] = {row.id: row.meaning for row in ROWS}
RANK = {cause: rank for rank, cause in enumerate(CAUSES)}


def order(findings: list[Finding]) -> list[Finding]:
    """Errors first; within a severity, what blocks first (queueing before scheduling before images ...); then
    the finding seen on more objects."""
    return sorted(findings, key=lambda f: (SEVERITIES.index(f.severity), RANK[f.id], -f.count, f.where))
