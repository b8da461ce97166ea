"""What the rules ask of a pod: its role (head or worker), its containers with their statuses, and which config
field sets a container's image, memory limit and /dev/shm size (values are read from the live pod, not derived)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from pwdeploy import identifiers as ids
from pwdeploy.cluster.jobsets import Object as Object  # re-exported: the diagnose rules read it here

# container -> the config field that sets it
IMAGE_FIELD = {
    ids.MAIN_CONTAINER: "main.image",
    ids.PROXY_CONTAINER: "images.proxy_server (or pathways_version)",
    ids.RM_CONTAINER: "images.server (or pathways_version)",
    ids.WORKER_CONTAINER: "images.server (or pathways_version)",
    ids.SIDECAR_CONTAINER: "sidecar.image",
    ids.HLO_UPLOADER_CONTAINER: "storage.hlo_uploader_image",
}
MEMORY_FIELD = {
    ids.MAIN_CONTAINER: "main.memory",
    ids.PROXY_CONTAINER: "head.proxy_memory",
    ids.RM_CONTAINER: "head.rm_memory",
    ids.WORKER_CONTAINER: "tpu.worker_memory",
}
SHM_FIELD = {  # volume -> field
    ids.SHM_VOLUME: "main.shm_size",  # on the head; tpu.shm_size on the workers (shm_field)
    ids.SIDECAR_SHM_VOLUME: "sidecar.shm_size",
    ids.TRANSFER_VOLUME: "head.transfer_shm_size",
}


class Container(NamedTuple):
    pod: Object
    spec: Object  # the container's spec in the live pod
    status: Object  # its status ({} before the kubelet reported one)
    init: bool


def name(pod: Object) -> str:
    return str(pod.get("metadata", {}).get("name", ""))


def uid(obj: Object) -> str:
    return str(obj.get("metadata", {}).get("uid") or "")


def owner(pod: Object) -> str:
    """The uid of the pod's controller (its Job), "" when it has none."""
    refs = pod.get("metadata", {}).get("ownerReferences") or []
    return next((str(r.get("uid") or "") for r in refs if isinstance(r, dict) and r.get("controller")), "")


def role(pod: Object) -> str:
    """``head pod``, ``worker pod`` or ``<replicatedJob> pod``."""
    return job_role(str((pod.get("metadata", {}).get("labels") or {}).get(ids.REPLICATED_JOB_LABEL, ""))) + " pod"


def containers(pod: Object) -> Iterator[Container]:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    for init, spec_key, status_key in (
        (True, "initContainers", "initContainerStatuses"),
        (False, "containers", "containerStatuses"),
    ):
        statuses = {str(s.get("name")): s for s in status.get(status_key) or [] if isinstance(s, dict)}
        for c in spec.get(spec_key) or []:
            yield Container(pod, c, statuses.get(str(c.get("name")), {}), init)


def condition(obj: Object, kind: str) -> Object | None:
    """The object's status condition of that type, or None."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == kind:
            return c
    return None


def disrupted(pod: Object) -> bool:
    """The pod was preempted, evicted or its node shut down (DisruptionTarget, or the kubelet's reason)."""
    target = condition(pod, "DisruptionTarget")
    reason = str((pod.get("status") or {}).get("reason") or "")
    return (target is not None and target.get("status") == "True") or reason in ("Evicted", "Preempting", "Terminated")


def memory_limit(c: Container) -> str | None:
    limit = ((c.spec.get("resources") or {}).get("limits") or {}).get("memory")
    return str(limit) if limit else None


def shm_volume(c: Container) -> tuple[str, str | None] | None:
    """(volume name, sizeLimit) of the memory-backed volume mounted at /dev/shm in this container, if any."""
    mounted = {m.get("name") for m in c.spec.get("volumeMounts") or [] if m.get("mountPath") == ids.SHM_DIR}
    for volume in (c.pod.get("spec") or {}).get("volumes") or []:
        if volume.get("name") in mounted:
            size = (volume.get("emptyDir") or {}).get("sizeLimit")
            return str(volume["name"]), (str(size) if size else None)
    return None


def shm_field(c: Container, volume: str) -> str:
    if volume == ids.SHM_VOLUME and role(c.pod) == "worker pod":
        return "tpu.shm_size"
    return SHM_FIELD.get(volume, "the /dev/shm size")


def expected_pods(jobset: Object) -> dict[str, int]:
    """role -> pods the JobSet runs at once (replicas x parallelism), from its spec."""
    totals: dict[str, int] = {}
    for rj in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        spec = (rj.get("template") or {}).get("spec") or {}
        count = int(rj.get("replicas", 1)) * int(spec.get("parallelism") or spec.get("completions") or 1)
        label = job_role(str(rj.get("name"))) + " pod"
        totals[label] = totals.get(label, 0) + count
    return totals


def expected_jobs(jobset: Object) -> dict[str, int]:
    """role -> the Jobs the JobSet makes (its replicas: the worker Jobs are one per slice), from its spec."""
    totals: dict[str, int] = {}
    for rj in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        label = job_role(str(rj.get("name"))) + " job"
        totals[label] = totals.get(label, 0) + int(rj.get("replicas", 1))
    return totals


def job_role(replicated_job: str) -> str:
    """``head``, ``worker`` or the replicatedJob's own name."""
    return {ids.HEAD_JOB: "head", ids.WORKER_JOB: "worker"}.get(replicated_job, replicated_job or "other")


def replacement(pod: Object, pods: list[Object]) -> str | None:
    """The pod that replaced ``pod`` when it has ended in phase Failed: one of the same Job (replicatedJob, job
    index, restart attempt) and completion index that is not terminal and not being deleted (the Job controller
    made it); None otherwise."""
    if (pod.get("status") or {}).get("phase") != "Failed":
        return None
    keys = (ids.REPLICATED_JOB_LABEL, ids.JOB_INDEX_LABEL, ids.RESTART_ATTEMPT_LABEL, ids.COMPLETION_INDEX_LABEL)

    def slot(q: Object) -> tuple[str, ...]:
        labels = q.get("metadata", {}).get("labels") or {}
        return tuple(str(labels.get(k, "")) for k in keys)

    for other in pods:
        if other is pod or slot(other) != slot(pod) or other.get("metadata", {}).get("deletionTimestamp"):
            continue
        if (other.get("status") or {}).get("phase") in ("Pending", "Running", "Succeeded"):
            return name(other)
    return None


def failed_run(c: Container) -> tuple[Object, bool] | None:
    """(the termination, whether it is the container's current state) of a failed run (a non-zero exit), or None."""
    current = (c.status.get("state") or {}).get("terminated") or {}
    if current.get("exitCode"):
        return current, True
    last = (c.status.get("lastState") or {}).get("terminated") or {}
    return (last, False) if last.get("exitCode") else None


def failure_kind(c: Container) -> tuple[str, str, int] | None:
    """(role, container, exit code) of a failed run: one log read of a kind stands for every container of it."""
    ended = failed_run(c)
    return (role(c.pod), str(c.spec.get("name")), int(str(ended[0].get("exitCode")))) if ended else None
