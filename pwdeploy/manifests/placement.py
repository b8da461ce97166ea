"""Where the TPU workers may run: the node labels they select and the taints they tolerate for the job's TPU
shape and capacity mode (tpu.capacity), plus the user's own (tpu.node_selector, tpu.tolerations), and what the
JobSet itself carries for Kueue's queued provisioning. The head pod is CPU and takes none of this: it stays on
head.node_pool and is never gated by a ProvisioningRequest.

The labels, taints and annotations, and where they come from, are listed in docs/capacity.md.
"""

from __future__ import annotations

from pwdeploy import identifiers as ids
from pwdeploy.config import JobConfig
from pwdeploy.config.capacity import parse_reservation
from pwdeploy.config.capacity_modes import capacity_mode
from pwdeploy.manifests.common import Manifest


def _reservation(job: JobConfig) -> tuple[str | None, str]:
    assert job.tpu.reservation is not None  # the config constraints require it of a mode that consumes one
    return parse_reservation(job.tpu.reservation, "tpu.reservation")


def capacity_selector(job: JobConfig) -> dict[str, str]:
    """The labels a node of the job's capacity mode carries (none for on-demand)."""
    mode, tpu = capacity_mode(job.tpu.capacity), job.tpu
    found = dict(mode.labels)
    if mode.reservation:
        project, name = _reservation(job)
        # A label value cannot hold '/': a shared reservation is its name plus its owner project's label.
        found[ids.RESERVATION_NAME_LABEL] = name
        if project:
            found[ids.RESERVATION_PROJECT_LABEL] = project
    if mode.run_duration == "node-label" and tpu.max_run_duration:
        found[ids.MAX_RUN_DURATION_LABEL] = str(tpu.max_run_duration)
    return found


def shape_selector(job: JobConfig) -> dict[str, str]:
    """The TPU shape: accelerator and topology, and on multi-host tpu7/tpu7x xpk's placement policy (a pool made
    otherwise names its own: tpu.node_selector replaces it). A dynamic slice is formed from sub-block pools whose
    own topology is 4x4x4: the accelerator alone (the slice's topology is an annotation, see below)."""
    found = {ids.TPU_ACCELERATOR_LABEL: job.tpu.slice.accelerator}
    if job.tpu.dynamic_slicing:
        return found
    found[ids.TPU_TOPOLOGY_LABEL] = job.tpu.slice.topology
    if job.tpu.slice.placement_policy:
        found[ids.PLACEMENT_POLICY_LABEL] = job.tpu.slice.placement_policy
    return found


def worker_pod_annotations(job: JobConfig) -> dict[str, str]:
    """Dynamic slicing, as Cluster Toolkit renders it (pkg/orchestrator/gke/scheduling.go, GetTopologyAnnotation,
    v1.95.0): the slice's topology for GKE's slice controller, and the Kueue TAS level that keeps a slice's pods
    in one tpu7x partition of that topology, per slice (podset-slice-size: its VMs) when there are several."""
    if not job.tpu.dynamic_slicing:
        return {}
    tpu = job.tpu.slice
    level = ids.TPU_PARTITION_LABEL.format(topology=tpu.topology)
    if job.tpu.slices == 1:
        return {ids.SLICE_TOPOLOGY_ANNOTATION: tpu.topology, ids.PODSET_REQUIRED_TOPOLOGY_ANNOTATION: level}
    return {
        ids.SLICE_TOPOLOGY_ANNOTATION: tpu.topology,
        ids.PODSET_SLICE_REQUIRED_TOPOLOGY_ANNOTATION: level,
        ids.PODSET_SLICE_SIZE_ANNOTATION: str(tpu.vms),
    }


def worker_node_selector(job: JobConfig) -> dict[str, str]:
    """The TPU shape, then the capacity mode's labels, then the user's (the config constraints keep them apart)."""
    return {**shape_selector(job), **capacity_selector(job), **dict(job.tpu.node_selector)}


def _no_schedule(key: str, value: str) -> Manifest:
    return {"key": key, "operator": "Equal", "value": value, "effect": "NoSchedule"}


def worker_tolerations(job: JobConfig) -> list[Manifest]:
    """GKE's TPU taint, the capacity mode's taints (a reservation's pools made by node auto-provisioning carry
    ``cloud.google.com/reservation-name=<name>:NoSchedule``; tolerating it costs nothing where they do not), then
    the user's."""
    mode = capacity_mode(job.tpu.capacity)
    found = [{"key": ids.TPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    found += [_no_schedule(key, value) for key, value in mode.taints]
    if mode.reservation:
        found.append(_no_schedule(ids.RESERVATION_NAME_LABEL, _reservation(job)[1]))
    for t in job.tpu.tolerations:
        if t.value is None:
            found.append({"key": t.key, "operator": "Exists", "effect": t.effect})
        else:
            found.append({"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect})
    return found


def jobset_annotations(job: JobConfig) -> dict[str, str]:
    """Kueue copies ``provreq.kueue.x-k8s.io/*`` annotations of the job object (not its pod templates) into the
    ProvisioningRequest it creates: a mode whose run duration goes there puts it on the JobSet."""
    if capacity_mode(job.tpu.capacity).run_duration == "jobset-annotation" and job.tpu.max_run_duration:
        return {ids.MAX_RUN_DURATION_ANNOTATION: str(job.tpu.max_run_duration)}
    return {}


def head_pod_annotations() -> dict[str, str]:
    """The cluster autoscaler never drains the head's node: an idle-looking head node was reclaimed and the job
    died (a reported failure)."""
    return {ids.SAFE_TO_EVICT_ANNOTATION: "false"}
