"""The one line that says where a job is: waiting for admission, scheduling, pulling, running N of M pods,
succeeded, failed."""

from __future__ import annotations

from pwdeploy.cluster.diagnose import pods as p
from pwdeploy.cluster.diagnose.read import Snapshot
from pwdeploy.cluster.progress import job_state


def summary(snap: Snapshot) -> str:
    state = job_state(snap.jobset)
    if state.phase == "Completed":
        return "succeeded"
    if state.phase == "Failed":
        return f"failed ({state.reason})" if state.reason else "failed"
    if state.phase == "Deleting":
        return "being deleted"
    expected = sum(p.expected_pods(snap.jobset).values())
    if _waiting_for_admission(snap):
        return f"waiting for admission (Kueue) of {expected} pods"
    live = [pod for pod in snap.pods if not pod.get("metadata", {}).get("deletionTimestamp")]
    running = sum((pod.get("status") or {}).get("phase") == "Running" for pod in live)
    scheduled = sum(_scheduled(pod) for pod in live)
    pulling = sum(_pulling(pod) for pod in live)
    restarts = f", {state.restarts} restarts" if state.restarts else ""
    if running >= expected > 0:
        return f"running {running} of {expected} pods{restarts}"
    if scheduled < expected:
        return f"scheduling: {scheduled} of {expected} pods scheduled, running {running} of {expected} pods{restarts}"
    if pulling:
        return f"pulling images for {pulling} of {expected} pods, running {running} of {expected} pods{restarts}"
    return f"starting: running {running} of {expected} pods{restarts}"


def _waiting_for_admission(snap: Snapshot) -> bool:
    if snap.workload is not None:
        admitted = p.condition(snap.workload, "Admitted")
        return admitted is None or admitted.get("status") != "True"
    return bool((snap.jobset.get("spec") or {}).get("suspend"))


def _scheduled(pod: p.Object) -> bool:
    cond = p.condition(pod, "PodScheduled")
    return bool((pod.get("spec") or {}).get("nodeName")) or (cond is not None and cond.get("status") == "True")


def _pulling(pod: p.Object) -> bool:
    return any(
        ((c.status.get("state") or {}).get("waiting") or {}).get("reason")
        in ("ContainerCreating", "ErrImagePull", "ImagePullBackOff")
        for c in p.containers(pod)
    )
