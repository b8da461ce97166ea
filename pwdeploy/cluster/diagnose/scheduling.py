"""Scheduling: pods the scheduler could place nowhere, and node scale-ups the cluster autoscaler did not make.

Texts matched (stable parts only, never counts or node names):
- kube-scheduler (kubernetes/kubernetes pkg/scheduler): ``0/N nodes are available: ...`` in the pod's
  PodScheduled=False condition (reason Unschedulable), with ``Insufficient <resource>`` (noderesources/fit.go),
  ``node(s) didn't match Pod's node affinity/selector`` (nodeaffinity), ``node(s) had untolerated taint``
  (tainttoleration), ``node(s) didn't have free ports for the requested pod ports`` (nodeports/node_ports.go,
  ``ErrReason``). The head and the workers use hostNetwork, so every container port is a host port: a node whose
  ports another such pod holds (another job's head or workers) fails the NodePorts filter, which runs before
  NodeResourcesFit, so a busy TPU pool says "free ports", never "Insufficient google.com/tpu".
- cluster autoscaler (kubernetes/autoscaler cluster-autoscaler): Normal event ``NotTriggerScaleUp``
  ``pod didn't trigger scale-up: ...``; Normal ``TriggeredScaleUp``; on GKE, Warning ``FailedScaleUp``
  ``Node scale up in zones ... associated with this pod failed: GCE quota exceeded|GCE out of resources|...``.
"""

from __future__ import annotations

import re

from pwdeploy.cluster.diagnose import pods as p
from pwdeploy.cluster.diagnose.findings import Cause, Observation, quote
from pwdeploy.cluster.diagnose.read import Snapshot
from pwdeploy.severity import Severity

TPU_RESOURCE = "google.com/tpu"
BUSY_PORTS = "didn't have free ports for the requested pod ports"
_FAILED_SCALE_UP = re.compile(r"associated with this pod failed: (?P<why>[^.]*)")
PREFLIGHT = "pwdeploy preflight -f job.yaml --cluster"

# What each cause's rule rests on (its findings' ``source``).
SCHEDULER = "kubernetes/kubernetes: pkg/scheduler (PodScheduled=False, reason Unschedulable)"
SCHEDULER_FIT = "kubernetes/kubernetes: pkg/scheduler/framework/plugins (noderesources/fit.go, nodeports/node_ports.go)"
SCHEDULER_AFFINITY = "kubernetes/kubernetes: pkg/scheduler/framework/plugins/nodeaffinity"
SCHEDULER_TAINTS = "kubernetes/kubernetes: pkg/scheduler/framework/plugins/tainttoleration"
AUTOSCALER = "kubernetes/autoscaler: cluster-autoscaler (FailedScaleUp, NotTriggerScaleUp, TriggeredScaleUp events)"

SCALE_UP_FAILED = Cause(
    "scale-up-failed",
    "schedule",
    "FailedScaleUp (quota, stockout, reservation); NotTriggerScaleUp is a warning",
    source=AUTOSCALER,
)
HEAD_UNSCHEDULABLE = Cause(
    "head-unschedulable",
    "schedule",
    "the head pod fits no node of `head.node_pool` (too small, or its host ports held by another job's head)",
    source=SCHEDULER_FIT,
)
TPU_CAPACITY = Cause(
    "tpu-capacity",
    "schedule",
    "`Insufficient google.com/tpu`, or `didn't have free ports` (another job's hostNetwork pods hold the TPU "
    "nodes): no free TPU node; a pod whose scale-up was triggered is a warning",
    source=SCHEDULER_FIT,
)
NODE_SELECTOR = Cause(
    "node-selector", "schedule", "no node carries the labels the pod selects", source=SCHEDULER_AFFINITY
)
UNTOLERATED_TAINT = Cause(
    "untolerated-taint",
    "schedule",
    "the nodes carry a taint the pod does not tolerate",
    fix="the nodes carry a taint the pod does not tolerate (see the message): remove the taint "
    "(kubectl taint nodes NODE KEY-) or wait for an unreachable/not-ready node to recover",
    source=SCHEDULER_TAINTS,
)
UNSCHEDULABLE = Cause(
    "unschedulable",
    "schedule",
    "another reason of the scheduler",
    fix=f"the scheduler could place the pod nowhere; see the message; check: {PREFLIGHT}",
    source=SCHEDULER,
)


def observations(snap: Snapshot) -> list[Observation]:
    events = _pod_events(snap)
    found: list[Observation] = []
    for pod in snap.pods:
        cond = p.condition(pod, "PodScheduled")
        if cond is None or cond.get("status") != "False" or pod.get("metadata", {}).get("deletionTimestamp"):
            continue
        if cond.get("reason") == "SchedulingGated":  # held on purpose (a Kueue or other gate): waiting, not stuck
            continue
        message = str(cond.get("message") or cond.get("reason") or "")
        reasons = events.get(p.name(pod)) or _siblings(pod, snap, events)
        if "FailedScaleUp" not in reasons:  # when a scale-up failed, that is why no node fits
            found.append(_unschedulable(pod, message, reasons, snap))
        found += _autoscaler(pod, reasons)
    return found


def _pod_events(snap: Snapshot) -> dict[str, dict[str, str]]:
    """pod -> {event reason: latest message} for the pods' events."""
    latest: dict[str, dict[str, str]] = {}
    for e in snap.events:
        involved = e.get("involvedObject") or {}
        if involved.get("kind", "Pod") == "Pod":
            latest.setdefault(str(involved.get("name", "")), {})[str(e.get("reason", ""))] = str(e.get("message", ""))
    return latest


def _siblings(pod: p.Object, snap: Snapshot, events: dict[str, dict[str, str]]) -> dict[str, str]:
    """The autoscaler's verdicts on a pod whose events were not read (diagnose reads a bounded number of objects'):
    those on a pod of the same Job whose events were. The cluster autoscaler decides for a group of pods of one
    controller and one spec at a time (kubernetes/autoscaler cluster-autoscaler/core/scaleup/equivalence/
    groups.go, ``BuildPodGroups``), so it says the same of them."""
    if snap.events_read is None or p.uid(pod) in snap.events_read:
        return {}
    owner = p.owner(pod)
    for other in snap.pods:
        if other is not pod and p.owner(other) == owner and p.uid(other) in snap.events_read:
            return events.get(p.name(other), {})
    return {}


def _unschedulable(pod: p.Object, message: str, reasons: dict[str, str], snap: Snapshot) -> Observation:
    role, selector = p.role(pod), _selector(pod)
    scaling = "TriggeredScaleUp" in reasons
    severity: Severity = "warning" if scaling else "error"
    evidence = quote(message) + (f"; autoscaler: {quote(reasons['TriggeredScaleUp'])}" if scaling else "")
    if role == "head pod" and BUSY_PORTS in message:
        fix = (
            f"the nodes that match {selector or 'its nodeSelector'} are held by other pods on the same host ports "
            f"({_host_ports(pod)}; the head uses hostNetwork): another job's head holds them. Wait for it to end or "
            f"delete it, or add a node to that pool; check: {PREFLIGHT}"
        )
        return HEAD_UNSCHEDULABLE.observe(role, p.name(pod), "ports", evidence, severity=severity, fix=fix)
    if role == "head pod":
        kind = _kind(message)
        fix = _head_fix(kind, selector)
        return HEAD_UNSCHEDULABLE.observe(role, p.name(pod), kind.id, evidence, severity=severity, fix=fix)
    cause = _kind(message)
    if (own := _held_by_own_job(pod, message, snap)) is not None:
        return _own_pods_hold(pod, message, own, evidence, severity)
    if cause is TPU_CAPACITY and BUSY_PORTS in message and f"Insufficient {TPU_RESOURCE}" not in message:
        fix = (
            f"the TPU nodes that match {selector} are held by other pods on the same host ports ({_host_ports(pod)}; "
            "the workers use hostNetwork): another job's workers run there. Wait for them, lower tpu.slices, or add "
            f"capacity (a node pool per slice, a reservation, flex-start or queued provisioning); check: {PREFLIGHT}"
        )
        return TPU_CAPACITY.observe(role, p.name(pod), "ports", evidence, severity=severity, fix=fix)
    fixes = {  # the others' fixes are their rows'
        TPU_CAPACITY: (
            f"every TPU node that matches {selector} is taken: wait for other jobs, lower tpu.slices, or add "
            f"capacity (a larger node pool, a reservation, flex-start or queued provisioning); check: {PREFLIGHT}"
        ),
        NODE_SELECTOR: (
            f"no node (and no autoscaled node pool) has the labels {selector}: create a TPU node pool with that "
            f"accelerator and topology, or set tpu.type / tpu.topology to a pool's; check: {PREFLIGHT}"
        ),
    }
    return cause.observe(role, p.name(pod), cause.id, evidence, severity=severity, fix=fixes.get(cause))


_BUSY_COUNT = re.compile(r"(\d+) " + re.escape("node(s) " + BUSY_PORTS))


def _held_by_own_job(pod: p.Object, message: str, snap: Snapshot) -> int | None:
    """How many nodes this job's own pods hold of those the scheduler found with busy host ports, when they hold
    every one (else None: another job's pods hold some). A slice's pods go to one node pool (exclusive placement),
    each on a node of its own (hostNetwork: one pod's ports per node), so the scheduled pods of the same Job are
    the pool's nodes it holds itself."""
    busy = _BUSY_COUNT.search(message)
    owner = p.owner(pod)
    if busy is None or not owner:
        return None
    own = sum(
        1
        for other in snap.pods
        if p.owner(other) == owner
        and (other.get("spec") or {}).get("nodeName")
        and not other.get("metadata", {}).get("deletionTimestamp")
        and (other.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    )
    return own if own >= int(busy[1]) else None


def _own_pods_hold(pod: p.Object, message: str, own: int, evidence: str, severity: Severity) -> Observation:
    """Every node with busy ports is held by the pod's own slice: the cause is elsewhere, a taint on the pool's
    other nodes when the scheduler names one, else a pool with fewer nodes than the slice has VMs."""
    selector = _selector(pod)
    held = f"this job's own pods of the same slice hold {own} of the pool's nodes (their host ports)"
    if "untolerated taint" in message:
        fix = (
            f"{held}, and the node left for this pod carries a taint it does not tolerate: remove the taint (see "
            f"them: kubectl get nodes -l {selector.split(',')[0] or 'SELECTOR'} -o custom-columns=NAME:.metadata.name,"
            "TAINTS:.spec.taints; kubectl taint nodes NODE KEY-) or wait for an unreachable or not-ready node to "
            f"recover (GKE repairs it); check: {PREFLIGHT}"
        )
        return UNTOLERATED_TAINT.observe(p.role(pod), p.name(pod), "own-slice", evidence, severity=severity, fix=fix)
    fix = (
        f"{held}, and no other node of the pool takes this pod: the pool has fewer nodes than the slice has VMs "
        f"(one node per VM; a node may be missing or not ready): check the pool's nodes (kubectl get nodes -l "
        f"{selector.split(',')[0] or 'SELECTOR'}); check: {PREFLIGHT}"
    )
    return TPU_CAPACITY.observe(p.role(pod), p.name(pod), "own-slice", evidence, severity=severity, fix=fix)


def _head_fix(kind: Cause, selector: str) -> str:
    """What to do about a head pod no node takes, by what the scheduler names first. A node reports the first
    filter it fails (taints before node affinity), so a missing pool and a tainted one can read alike."""
    nodes = f"CPU node that matches {selector or 'its nodeSelector'}"
    if kind in (UNTOLERATED_TAINT, NODE_SELECTOR):
        return (
            f"no {nodes} takes the head: none exists, or those that do carry a taint it does not tolerate (the TPU "
            "nodes' google.com/tpu taint keeps it off them, as meant): create that CPU node pool or set "
            "head.node_pool to one the cluster has, or remove the taint from the pool's nodes "
            f"(kubectl taint nodes NODE KEY-); check: {PREFLIGHT}"
        )
    return (
        f"the head pod needs a {nodes} with room for its requests (main, pathways-proxy and pathways-rm "
        "together): add or grow that node pool, or lower main.memory / head.proxy_memory / head.rm_memory; "
        f"check: {PREFLIGHT}"
    )


def _kind(message: str) -> Cause:
    """The cause a scheduler message names first: capacity (chips, or host ports another pod holds), then taints,
    then selectors."""
    if f"Insufficient {TPU_RESOURCE}" in message or BUSY_PORTS in message:
        return TPU_CAPACITY
    if "untolerated taint" in message:
        return UNTOLERATED_TAINT
    if "didn't match Pod's node affinity/selector" in message:
        return NODE_SELECTOR
    return UNSCHEDULABLE


def _host_ports(pod: p.Object) -> str:
    """The pod's host ports (with hostNetwork, every container port), ``ports 8080, 29000``."""
    spec = pod.get("spec") or {}
    ports = sorted(
        {
            int(port.get("hostPort") or (port.get("containerPort") if spec.get("hostNetwork") else 0) or 0)
            for section in ("initContainers", "containers")
            for c in spec.get(section) or []
            for port in c.get("ports") or []
        }
        - {0}
    )
    return "ports " + ", ".join(map(str, ports)) if ports else "its host ports"


def _selector(pod: p.Object) -> str:
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    return ", ".join(f"{k}={v}" for k, v in sorted(selector.items()))


def _autoscaler(pod: p.Object, reasons: dict[str, str]) -> list[Observation]:
    role = p.role(pod)
    if "FailedScaleUp" in reasons:
        message = reasons["FailedScaleUp"]
        match = _FAILED_SCALE_UP.search(message)
        why = match["why"].strip() if match else message
        fix = _scale_up_fix(why)
        return [SCALE_UP_FAILED.observe(role, p.name(pod), why, quote(message), severity="error", fix=fix)]
    if "NotTriggerScaleUp" in reasons and "TriggeredScaleUp" not in reasons:
        message = reasons["NotTriggerScaleUp"]
        fix = (
            "no node pool the autoscaler may grow would fit the pod (see the message: a max node group size, a "
            "selector no pool has): raise the pool's maximum, enable node auto-provisioning, or fix the selector"
        )
        key = re.sub(r"\d+", "N", message)
        return [SCALE_UP_FAILED.observe(role, p.name(pod), key, quote(message), severity="warning", fix=fix)]
    return []


def _scale_up_fix(why: str) -> str:
    lowered = why.lower()
    if "quota" in lowered:
        return "the project's quota is spent: request more TPU (or CPU) quota in the region, or lower tpu.slices"
    if "out of resources" in lowered or "stockout" in lowered:
        return "the zone has no TPU capacity now: use a reservation, flex-start or queued provisioning, or another zone"
    if "reservation" in lowered:
        return (
            "the node pool's reservation is wrong or used up: check its name, project and zone "
            "(gcloud compute reservations describe)"
        )
    return (
        "the autoscaler could not create nodes: see the message and the node pool's operations "
        "(gcloud container operations list)"
    )
