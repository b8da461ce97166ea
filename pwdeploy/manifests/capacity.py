"""Where the TPU workers may run: the node labels they select and the taints they tolerate for the job's TPU
shape and capacity mode (tpu.capacity), plus the user's own (tpu.node_selector, tpu.tolerations), and what the
JobSet itself carries for Kueue's queued provisioning. The head pod is CPU and takes none of this: it stays on
head.node_pool and is never gated by a ProvisioningRequest.

The labels, taints and annotations, and where they come from, are listed in docs/capacity.md.
"""

from __future__ import annotations

from pwdeploy import identifiers as ids
from pwdeploy.config import JobConfig
from pwdeploy.config.capacity import FLEX_START, QUEUED, RESERVATION, SPOT, parse_reservation
from pwdeploy.manifests.common import Manifest


def capacity_selector(job: JobConfig) -> dict[str, str]:
    """The labels a node of the job's capacity mode carries (none for on-demand)."""
    tpu = job.tpu
    if tpu.capacity == SPOT:
        return {ids.SPOT_LABEL: "true"}
    if tpu.capacity == RESERVATION:
        assert tpu.reservation is not None  # the config checks require it
        project, name = parse_reservation(tpu.reservation, "tpu.reservation")
        # A label value cannot hold '/': a shared reservation is its name plus its owner project's label.
        shared = {ids.RESERVATION_PROJECT_LABEL: project} if project else {}
        return {ids.RESERVATION_NAME_LABEL: name, **shared}
    if tpu.capacity == FLEX_START:
        timed = {ids.MAX_RUN_DURATION_LABEL: str(tpu.max_run_duration)} if tpu.max_run_duration else {}
        return {ids.FLEX_START_LABEL: "true", **timed}
    if tpu.capacity == QUEUED:
        return {ids.QUEUED_LABEL: "true"}
    return {}


def worker_node_selector(job: JobConfig) -> dict[str, str]:
    """The TPU shape, then the capacity mode's labels, then the user's (the config checks keep them apart)."""
    return {
        ids.TPU_ACCELERATOR_LABEL: job.tpu.slice.accelerator,
        ids.TPU_TOPOLOGY_LABEL: job.tpu.slice.topology,
        **capacity_selector(job),
        **dict(job.tpu.node_selector),
    }


def worker_tolerations(job: JobConfig) -> list[Manifest]:
    """GKE's TPU taint, the capacity mode's taint, then the user's."""
    found = [{"key": ids.TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    if job.tpu.capacity == SPOT:
        found.append({"key": ids.SPOT_LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"})
    if job.tpu.capacity == QUEUED:
        found.append({"key": ids.QUEUED_LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"})
    for t in job.tpu.tolerations:
        if t.value is None:
            found.append({"key": t.key, "operator": "Exists", "effect": t.effect})
        else:
            found.append({"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect})
    return found


def jobset_annotations(job: JobConfig) -> dict[str, str]:
    """Kueue copies ``provreq.kueue.x-k8s.io/*`` annotations of the job object (not its pod templates) into the
    ProvisioningRequest it creates: the run duration of queued provisioning goes on the JobSet."""
    if job.tpu.capacity == QUEUED and job.tpu.max_run_duration:
        return {ids.MAX_RUN_DURATION_ANNOTATION: str(job.tpu.max_run_duration)}
    return {}


def head_pod_annotations() -> dict[str, str]:
    """The cluster autoscaler never drains the head's node: an idle-looking head node was reclaimed and the job
    died (a reported failure)."""
    return {ids.SAFE_TO_EVICT_ANNOTATION: "false"}
