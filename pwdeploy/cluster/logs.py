"""Which pod and container hold a component's logs, and reading them (optionally following)."""

from __future__ import annotations

from collections.abc import Iterator

from pwdeploy import identifiers as ids
from pwdeploy.cluster import jobsets as js
from pwdeploy.errors import ClusterError
from pwdeploy.kube.api import POD_LOGS, Action, Kube

# component -> (replicatedJob, container)
COMPONENTS = {
    "main": (ids.HEAD_JOB, ids.MAIN_CONTAINER),
    "proxy": (ids.HEAD_JOB, ids.PROXY_CONTAINER),
    "rm": (ids.HEAD_JOB, ids.RM_CONTAINER),
    "worker": (ids.WORKER_JOB, ids.WORKER_CONTAINER),
    "sidecar": (ids.WORKER_JOB, ids.SIDECAR_CONTAINER),
}


def find_pod(kube: Kube, namespace: str, name: str, component: str, slice_index: int, host: int) -> str:
    """The name of the pod running ``component`` (for workers: of that slice and host), newest first."""
    replicated_job, container = COMPONENTS[component]
    labels = {ids.REPLICATED_JOB_LABEL: replicated_job}
    if replicated_job == ids.WORKER_JOB:
        labels |= {ids.JOB_INDEX_LABEL: str(slice_index), ids.COMPLETION_INDEX_LABEL: str(host)}
    pods = js.list_pods(kube, namespace, name, **labels)
    where = f"slice {slice_index} host {host} of " if replicated_job == ids.WORKER_JOB else ""
    if not pods:
        if js.get_jobset(kube, namespace, name) is None:
            raise ClusterError(f"jobset {name} not found in namespace {namespace}", hint="list jobs: pwdeploy list")
        raise ClusterError(
            f"no {replicated_job} pod yet for {where}job {name}",
            hint=f"it may still be scheduling: pwdeploy status {name} -n {namespace}",
        )
    pods.sort(key=lambda p: (not p["metadata"].get("deletionTimestamp"), p["metadata"].get("creationTimestamp", "")))
    pod = pods[-1]
    spec = pod.get("spec") or {}
    names = [c.get("name") for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]]
    if container not in names:
        if component == "main":
            raise ClusterError(
                f"job {name} runs headless: it has no main container",
                hint="read the IFRT proxy's logs with --component proxy",
            )
        raise ClusterError(
            f"pod {pod['metadata']['name']} has no {container} container (containers: "
            f"{', '.join(str(n) for n in names)})"
        )
    return str(pod["metadata"]["name"])


def log_bytes(
    kube: Kube, namespace: str, pod: str, container: str, *, follow: bool, tail: int | None, previous: bool
) -> Iterator[bytes]:
    """The container's log as the API server sends it, byte for byte (as ``kubectl logs`` prints it: the program's
    own output, invalid UTF-8 and all, with no line held back or rewritten)."""
    query = [("container", container)]
    if follow:
        query.append(("follow", "true"))
    if tail is not None:
        query.append(("tailLines", str(tail)))
    if previous:
        query.append(("previous", "true"))
    action = Action("get", POD_LOGS, namespace, pod)
    return kube.stream_bytes(action, POD_LOGS.path(namespace, pod), query)
