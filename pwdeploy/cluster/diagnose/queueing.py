"""Queueing: a job Kueue has not admitted, and the ProvisioningRequest an admission check waits on.

Texts matched:
- Kueue Workload conditions (kubernetes-sigs/kueue apis/kueue: QuotaReserved, Admitted, Evicted, Finished) and
  ``status.admissionChecks[].state`` (Pending, Ready, Retry, Rejected). The QuotaReserved=False message comes from
  pkg/scheduler/flavorassigner/flavorassigner.go: ``insufficient unused quota for <resource> in flavor <f>, <n>
  more needed`` (others hold the quota: it may clear) or ``insufficient quota for <resource> in flavor <f>,
  request > maximum capacity (<a> > <b>)`` (it never fits); ``LocalQueue <q> doesn't exist`` and ``ClusterQueue
  <q> is inactive`` also never clear by waiting.
- ProvisioningRequest conditions (kubernetes/autoscaler cluster-autoscaler/apis/provisioningrequest
  autoscaling.x-k8s.io/v1): Provisioned, Failed, BookingExpired, CapacityRevoked.
"""

from __future__ import annotations

from pwdeploy import identifiers as ids
from pwdeploy.cluster.diagnose import pods as p
from pwdeploy.cluster.diagnose.findings import Observation, Severity, quote
from pwdeploy.cluster.diagnose.read import Snapshot

NEVER = ("request > maximum capacity", "doesn't exist", "is inactive", "does not exist")
CAUSE = "kueue-pending"


def observations(snap: Snapshot) -> list[Observation]:
    labels = snap.jobset.get("metadata", {}).get("labels") or {}
    queue = labels.get(ids.QUEUE_LABEL)
    if snap.workload is None:
        return _no_workload(snap, queue)
    wl = snap.workload
    name = f"{wl['metadata'].get('name', '')}"
    found = _evicted(wl, name)
    if _true(wl, "Admitted") or _true(wl, "Finished"):
        return found
    reserved = p.condition(wl, "QuotaReserved")
    if reserved is None or reserved.get("status") != "True":
        found.append(_quota(reserved, name, queue))
        return found
    for check in (wl.get("status") or {}).get("admissionChecks") or []:
        found += _check(check, name)
    for request in snap.provisioning:
        found += _provisioning(request)
    return found


def _true(obj: p.Object, kind: str) -> bool:
    cond = p.condition(obj, kind)
    return cond is not None and cond.get("status") == "True"


def _no_workload(snap: Snapshot, queue: str | None) -> list[Observation]:
    suspended = bool((snap.jobset.get("spec") or {}).get("suspend"))
    if snap.kueue_installed is False and queue:
        fix = "install Kueue in the cluster, or submit without scheduling.queue"
        evidence = f"label {ids.QUEUE_LABEL}={queue} on the JobSet; the API server does not serve kueue.x-k8s.io"
        return [Observation(CAUSE, "error", "jobset", snap.name, "no-kueue", evidence, fix)]
    if suspended and not queue:  # suspended by hand (or by another tool), not held by Kueue
        evidence = "the JobSet is suspended (spec.suspend: true) and names no queue"
        fix = (
            f"resume it: kubectl patch jobset {snap.name} -n {snap.namespace} --type merge "
            """-p '{"spec":{"suspend":false}}'"""
        )
        return [Observation(CAUSE, "info", "jobset", snap.name, "suspended", evidence, fix)]
    if suspended and snap.kueue_installed:
        evidence = f"the JobSet is suspended (spec.suspend: true) and Kueue made no Workload for it (queue {queue!r})"
        fix = (
            "Kueue does not manage this JobSet: its configuration must list jobset.x-k8s.io/jobset in "
            f"integrations.frameworks, and the LocalQueue must exist (kubectl get localqueues -n {snap.namespace})"
        )
        return [Observation(CAUSE, "error", "jobset", snap.name, "no-workload", evidence, fix)]
    return []


def _quota(cond: p.Object | None, workload: str, queue: str | None) -> Observation:
    if cond is None:
        evidence = "the Workload has no QuotaReserved condition yet"
        return Observation(CAUSE, "info", "workload", workload, "new", evidence, "wait: Kueue has not looked at it yet")
    message = str(cond.get("message") or cond.get("reason") or "")
    never = any(part in message for part in NEVER)
    severity: Severity = "error" if never else "warning"
    if "request > maximum capacity" in message:
        fix = (
            "the job asks for more than the ClusterQueue can ever give (nominal quota plus borrowing): lower "
            "tpu.slices, or raise the quota (kubectl get clusterqueue -o yaml)"
        )
    elif never:
        fix = (
            f"the queue cannot admit anything: check the LocalQueue {queue!r} and its ClusterQueue "
            "(kubectl get localqueues,clusterqueues)"
        )
    else:
        fix = "other workloads hold the quota: wait, or raise scheduling.priority_class so Kueue may preempt them"
    key = "never" if never else "waiting"
    return Observation(CAUSE, severity, "workload", workload, key, f"QuotaReserved=False: {quote(message)}", fix)


def _check(check: p.Object, workload: str) -> list[Observation]:
    state = str(check.get("state", ""))
    if state == "Ready":
        return []
    name, message = str(check.get("name", "")), str(check.get("message", ""))
    severities: dict[str, Severity] = {"Rejected": "error", "Retry": "warning"}
    severity = severities.get(state, "info")
    evidence = f"admission check {name}: {state}" + (f": {quote(message)}" if message else "")
    fix = (
        "the admission check rejected the job: see the message; for queued provisioning, the node pool must "
        "enable it (--enable-queued-provisioning) and the ProvisioningRequestConfig must name its class"
        if state == "Rejected"
        else "waiting for the admission check (for queued provisioning: until the nodes are provisioned)"
    )
    return [Observation(CAUSE, severity, "workload", workload, f"check-{state}", evidence, fix)]


def _provisioning(request: p.Object) -> list[Observation]:
    name = str(request.get("metadata", {}).get("name", ""))
    for kind in ("Failed", "CapacityRevoked", "BookingExpired"):
        cond = p.condition(request, kind)
        if cond is not None and cond.get("status") == "True":
            message = str(cond.get("message") or cond.get("reason") or "")
            fix = (
                "the provisioning request cannot be met: check TPU quota and capacity in the zone, the node "
                "pool's queued provisioning setting, and the request's maxRunDurationSeconds; resubmit once fixed"
            )
            evidence = f"ProvisioningRequest {kind}=True: {quote(message)}"
            return [Observation(CAUSE, "error", "provisioningrequest", name, kind, evidence, fix)]
    cond = p.condition(request, "Provisioned")
    if cond is not None and cond.get("status") != "True":
        message = str(cond.get("message") or cond.get("reason") or "")
        evidence = f"ProvisioningRequest Provisioned={cond.get('status')}: {quote(message)}"
        fix = "waiting for the autoscaler to find the capacity (queued provisioning can take hours)"
        return [Observation(CAUSE, "info", "provisioningrequest", name, "waiting", evidence, fix)]
    return []


def _evicted(wl: p.Object, name: str) -> list[Observation]:
    cond = p.condition(wl, "Evicted")
    if cond is None or cond.get("status") != "True":
        return []
    message = str(cond.get("message") or "")
    evidence = f"Workload Evicted=True reason {cond.get('reason', '')}: {quote(message)}"
    fix = "Kueue evicted the job (preemption by a higher priority, or pods not ready in time); it is requeued"
    return [Observation("preempted", "warning", "workload", name, str(cond.get("reason", "")), evidence, fix)]
