"""What the Kubernetes API says about nodes, and what a rendered pod asks of them: node lists by label selector
(each asked once), readiness, allocatable resources, node pools, kubelet versions, a pod's requests, and what the
pods already on the nodes hold (their requests and host ports), as the scheduler counts them."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from decimal import Decimal
from typing import NamedTuple

from pwdeploy import identifiers as ids
from pwdeploy.cluster.jobsets import Object
from pwdeploy.errors import ConfigError
from pwdeploy.kube.seam import NODES, PODS, Action, ApiError, Kube
from pwdeploy.quantity import parse_quantity

NODE_POOL_LABEL = ids.NODE_POOL_LABEL  # the workers' exclusive topology: one slice per node pool


class NodeLists:
    """Nodes by label selector, each list asked once however many checks read it (the checks run side by side);
    an ApiError is kept and raised to every reader."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._found: dict[str, list[Object] | ApiError] = {}

    def get(self, selector: dict[str, str]) -> list[Object]:
        key = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._found:
                try:
                    self._found[key] = list_nodes(self._kube, selector)
                except ApiError as exc:
                    self._found[key] = exc
            found = self._found[key]
        if isinstance(found, ApiError):
            raise found
        return found


def native_sidecar_pods(jobset: Object) -> list[tuple[str, Object]]:
    """(head or worker, pod spec) of every replicated job whose pods have native sidecars."""
    coordinator = (jobset["spec"].get("coordinator") or {}).get("replicatedJob")
    found = []
    for rj in jobset["spec"]["replicatedJobs"]:
        spec = rj["template"]["spec"]["template"]["spec"]
        if any(c.get("restartPolicy") == "Always" for c in spec.get("initContainers") or []):
            found.append(("head" if rj["name"] == coordinator else "worker", spec))
    return found


def kubelet_version(node: Object) -> tuple[int, int, str] | None:
    """(major, minor, text) of ``status.nodeInfo.kubeletVersion`` (``v1.31.4-gke.1256000``); None when absent."""
    text = str(((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion") or "")
    found = re.match(r"v?(\d+)\.(\d+)", text)
    return (int(found[1]), int(found[2]), text) if found else None


def node_selector(spec: Object) -> dict[str, str]:
    return {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()}


def list_nodes(kube: Kube, selector: dict[str, str]) -> list[Object]:
    query = [("labelSelector", ",".join(f"{k}={v}" for k, v in selector.items()))]
    return kube.list_items(Action("list", NODES), NODES.path(), query=query)


def schedulable(node: Object) -> bool:
    """Ready and not cordoned."""
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return ready and not (node.get("spec") or {}).get("unschedulable")


def allocatable(node: Object, resource: str) -> Decimal:
    value = ((node.get("status") or {}).get("allocatable") or {}).get(resource)
    try:
        return parse_quantity(value, resource, allow_zero=True) if value is not None else Decimal(0)
    except ConfigError:
        return Decimal(0)


def pool_sizes(nodes: Iterable[Object]) -> dict[str, int]:
    """Nodes per node pool (``cloud.google.com/gke-nodepool``); a node without the label is in no pool and can take
    no slice."""
    sizes: dict[str, int] = {}
    for node in nodes:
        pool = (node["metadata"].get("labels") or {}).get(NODE_POOL_LABEL)
        if pool is not None:
            sizes[pool] = sizes.get(pool, 0) + 1
    return sizes


def replicated_job(jobset: Object, name: str) -> Object:
    """The rendered JobSet's replicatedJob ``name`` (``ids.HEAD_JOB``, ``ids.WORKER_JOB``)."""
    (found,) = [rj for rj in jobset["spec"]["replicatedJobs"] if rj["name"] == name]
    return found  # type: ignore[no-any-return]


def rendered_pod_spec(jobset: Object, name: str) -> Object:
    """The pod spec of the rendered JobSet's replicatedJob ``name``: what the scheduler will be asked to place."""
    spec: Object = replicated_job(jobset, name)["template"]["spec"]["template"]["spec"]
    return spec


def rendered_head_pod(jobset: Object) -> Object:
    """The pod spec of the JobSet's coordinator (the Pathways head)."""
    coordinator = (jobset["spec"].get("coordinator") or {}).get("replicatedJob")
    return rendered_pod_spec(jobset, str(coordinator))


def tolerates(node: Object, tolerations: list[Object]) -> bool:
    """Whether a pod with ``tolerations`` may be scheduled on ``node``: every NoSchedule and NoExecute taint is
    tolerated (PreferNoSchedule only steers)."""
    taints = (node.get("spec") or {}).get("taints") or []
    return all(
        any(_tolerated(taint, t) for t in tolerations)
        for taint in taints
        if taint.get("effect") in ("NoSchedule", "NoExecute")
    )


def _tolerated(taint: Object, toleration: Object) -> bool:
    """The Kubernetes rule: an empty key with Exists matches every taint; an empty effect matches every effect."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if toleration.get("operator") == "Exists":
        return key in ("", taint.get("key"))
    return key == taint.get("key") and str(toleration.get("value") or "") == str(taint.get("value") or "")


def pod_requests(spec: Object, resources: Iterable[str] = ("cpu", "memory")) -> dict[str, Decimal]:
    """The pod's requests as the scheduler sums them: native sidecars (restartPolicy Always) add to the
    containers; other init containers run alone, beside the sidecars started before them."""
    totals = {}
    for resource in resources:
        sidecars = init_peak = Decimal(0)
        for container in spec.get("initContainers") or []:
            if container.get("restartPolicy") == "Always":
                sidecars += _request(container, resource)
                init_peak = max(init_peak, sidecars)
            else:
                init_peak = max(init_peak, sidecars + _request(container, resource))
        regular = sum((_request(c, resource) for c in spec.get("containers") or []), Decimal(0))
        totals[resource] = max(init_peak, sidecars + regular)
    return totals


def _request(container: Object, resource: str) -> Decimal:
    res = container.get("resources") or {}
    value = (res.get("requests") or {}).get(resource, (res.get("limits") or {}).get(resource))
    return parse_quantity(value, resource, allow_zero=True) if value is not None else Decimal(0)


def container_request(spec: Object, name: str, resource: str) -> Decimal:
    """What container ``name`` of a pod spec requests of ``resource`` (its limit when no request is set)."""
    containers = [c for section in ("initContainers", "containers") for c in spec.get(section) or []]
    (container,) = [c for c in containers if c.get("name") == name]
    return _request(container, resource)


# ---------------------------------------------------------------------------------------------- what other pods hold

# The pods the scheduler counts on a node: every pod bound to it that has not ended (kubectl describe node's
# selector; kubernetes/kubernetes pkg/scheduler/framework/types.go NodeInfo sums their requests and host ports).
ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"


class Held(NamedTuple):
    """What the pods on one node hold: their summed requests, and their host ports as (port, protocol)."""

    requests: dict[str, Decimal]
    ports: frozenset[tuple[int, str]]
    pods: int


def list_active_pods(kube: Kube) -> list[Object]:
    """Every pod of the cluster that has not ended (one list, all namespaces)."""
    return kube.list_items(Action("list", PODS), PODS.path(), query=[("fieldSelector", ACTIVE_PODS)])


def host_ports(spec: Object) -> frozenset[tuple[int, str]]:
    """(port, protocol) the pod takes on its node: its hostPorts, and with hostNetwork every container port
    (the API server defaults hostPort to containerPort there)."""
    network = bool(spec.get("hostNetwork"))
    taken = set()
    for section in ("initContainers", "containers"):
        for container in spec.get(section) or []:
            for port in container.get("ports") or []:
                number = port.get("hostPort") or (port.get("containerPort") if network else None)
                if number:
                    taken.add((int(number), str(port.get("protocol") or "TCP")))
    return frozenset(taken)


def held_by_node(
    pods: Iterable[Object], resources: Iterable[str], *, besides_jobset: str | None = None
) -> dict[str, Held]:
    """node name -> what its pods hold; pods of the JobSet ``besides_jobset`` are not counted (a resubmit of the
    same job replaces them)."""
    wanted = tuple(resources)
    found: dict[str, Held] = {}
    for pod in pods:
        labels = pod.get("metadata", {}).get("labels") or {}
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if not node or (besides_jobset and labels.get(ids.JOBSET_NAME_LABEL) == besides_jobset):
            continue
        try:
            asked = pod_requests(pod.get("spec") or {}, wanted)
        except ConfigError:  # a quantity the API server would not have accepted: count nothing for it
            asked = {r: Decimal(0) for r in wanted}
        before = found.get(node, Held({r: Decimal(0) for r in wanted}, frozenset(), 0))
        found[node] = Held(
            {r: before.requests[r] + asked[r] for r in wanted},
            before.ports | host_ports(pod.get("spec") or {}),
            before.pods + 1,
        )
    return found


def free(node: Object, resource: str, held: dict[str, Held]) -> Decimal:
    """Allocatable less what the node's pods request."""
    taken = held.get(str(node["metadata"].get("name")))
    return allocatable(node, resource) - (taken.requests.get(resource, Decimal(0)) if taken else Decimal(0))


def port_conflicts(node: Object, ports: frozenset[tuple[int, str]], held: dict[str, Held]) -> frozenset[int]:
    """The host ports ``ports`` would need that pods on the node already hold."""
    taken = held.get(str(node["metadata"].get("name")))
    return frozenset(port for port, _ in ports & taken.ports) if taken else frozenset()
