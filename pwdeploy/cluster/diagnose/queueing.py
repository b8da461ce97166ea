"""Queueing: a job Kueue has not admitted, and the ProvisioningRequest an admission check waits on.

Texts matched:
- Kueue Workload conditions (kubernetes-sigs/kueue apis/kueue: QuotaReserved, Admitted, Evicted, Finished) and
  ``status.admissionChecks[].state`` (Pending, Ready, Retry, Rejected). The QuotaReserved=False message comes from
  pkg/scheduler/flavorassigner/flavorassigner.go: ``insufficient unused quota for <resource> in flavor <f>, <n>
  more needed`` (others hold the quota: it may clear) or ``insufficient quota for <resource> in flavor <f>,
  request > maximum capacity (<a> > <b>)`` (it never fits; since v0.14.4 ``insufficient quota for <resource> in
  flavor <f>, previously considered podsets requests (<a>) + current podset request (<b>) > maximum capacity
  (<c>)``, and in v1beta2 the condition's reason ``ExceedsMaxQuota``, apis/kueue/v1beta2/workload_types.go);
  ``LocalQueue <q> doesn't exist`` and ``ClusterQueue <q> is inactive`` also never clear by waiting.
- the Workload's Evicted=True reason (apis/kueue/v1beta2/workload_types.go): ``PodsReadyTimeout`` (message
  ``Exceeded the PodsReady timeout <ns/name>``, pkg/controller/core/workload_controller.go): not every pod was
  Ready within ``waitForPodsReady.timeout`` (after a restart, ``recoveryTimeout``, which defaults to the
  timeout); WaitForPodsReady is on by default with a 30-minute timeout since Kueue v0.19.0 (apis/config/v1beta2/
  defaults.go ``DefaultWaitForPodsReadyTimeout``). ``Deactivated`` and ``DeactivatedDueTo<cause>`` (e.g.
  ``DeactivatedDueToRequeuingLimitExceeded``, message ``The workload is deactivated due to exceeding the maximum
  number of re-queuing retries``, pkg/controller/core/workload_controller_eviction_test.go): spec.active is
  false, and Kueue never requeues it by itself. Any other reason (``Preempted``, ...) is requeued.
- the Workload's PodsReady=False reasons (apis/kueue/v1beta2/workload_types.go): ``WaitForStart`` (admitted, its
  pods not all Ready yet: ``timeout`` runs), ``WaitForRecovery`` (a running job lost a Ready pod:
  ``recoveryTimeout``), and from Kueue 0.20 ``WaitForScheduling`` (pods not all scheduled yet, with a
  ``PodsScheduled`` condition, reasons ``AllRequiredPodsScheduled`` / ``WaitForScheduling``; with the feature gate
  ``WaitForPodsReadyUnscheduledTimeout``, ``waitForPodsReady.unscheduledTimeout`` evicts such a job, again as
  ``PodsReadyTimeout``: kubernetes-sigs/kueue#15402, KEP-13502). A PodsReadyTimeout finding says which wait ran out.
  Kueue 0.20 no longer serves v1beta1 (kubernetes-sigs/kueue#14558): the Workload is read at v1beta2 where served.
- ProvisioningRequest conditions (kubernetes/autoscaler cluster-autoscaler/apis/provisioningrequest
  autoscaling.x-k8s.io/v1): Provisioned, Failed, BookingExpired, CapacityRevoked.
"""

from __future__ import annotations

from pwdeploy import identifiers as ids
from pwdeploy.cluster.diagnose import pods as p
from pwdeploy.cluster.diagnose.findings import Cause, Observation, quote
from pwdeploy.cluster.diagnose.lifecycle import PREEMPTED
from pwdeploy.cluster.diagnose.read import Snapshot
from pwdeploy.severity import Severity

NEVER = ("> maximum capacity", "doesn't exist", "is inactive", "does not exist")
EXCEEDS = "ExceedsMaxQuota"  # the QuotaReserved=False reason when the request never fits (Kueue v1beta2)
TIMED_OUT = "PodsReadyTimeout"  # the Workload's Evicted reason
DEACTIVATED = "Deactivated"
DEFAULT_PODS_READY_TIMEOUT = "30 minutes"  # Kueue >= v0.19.0, apis/config/v1beta2/defaults.go
# The Workload's PodsReady=False reasons: what Kueue waits for, and the waitForPodsReady setting that bounds it.
WAITS = {
    "WaitForScheduling": (
        "its pods are not all scheduled",
        "waitForPodsReady.unscheduledTimeout (Kueue 0.20, feature gate WaitForPodsReadyUnscheduledTimeout; "
        "unset: timeout)",
    ),
    "WaitForStart": ("its pods are scheduled but not all Ready", "waitForPodsReady.timeout"),
    "WaitForRecovery": ("a pod of the running job stopped being Ready", "waitForPodsReady.recoveryTimeout"),
}
SLOWEST = 3  # pods named in a PodsReadyTimeout finding

# What each cause's rule rests on (its findings' ``source``).
KUEUE_SCHEDULER = (
    "kubernetes-sigs/kueue: pkg/scheduler/flavorassigner/flavorassigner.go (QuotaReserved messages), "
    "apis/kueue/v1beta2/workload_types.go (admission checks)"
)
KUEUE_PODS_READY = (
    "kubernetes-sigs/kueue: apis/kueue/v1beta2/workload_types.go (PodsReady reasons WaitForScheduling, WaitForRecovery)"
)
KUEUE_EVICTION = (
    "kubernetes-sigs/kueue: apis/kueue/v1beta2/workload_types.go (Evicted reasons), "
    "pkg/controller/core/workload_controller.go (PodsReadyTimeout)"
)

KUEUE_PENDING = Cause(
    "kueue-pending",
    "queue",
    "Kueue has not admitted the job: an error when it never can (a request above the ClusterQueue's maximum, a "
    "missing LocalQueue, an inactive ClusterQueue, a rejected admission check, a failed ProvisioningRequest); a "
    "warning while others hold the quota; info while an admission check or provisioning is pending",
    source=KUEUE_SCHEDULER,
)
KUEUE_WAITING_PODS = Cause(
    "kueue-waiting-pods",
    "queue",
    "Kueue admitted the job and waits for its pods (PodsReady=False `WaitForScheduling` or `WaitForRecovery`): it "
    "evicts the job if the wait outlasts its timeout",
    severity="info",
    source=KUEUE_PODS_READY,
)
KUEUE_DEACTIVATED = Cause(
    "kueue-deactivated",
    "queue",
    "Kueue deactivated the Workload (`Deactivated*` eviction, e.g. the requeuing limit): it is never requeued; "
    "reactivate it or resubmit",
    severity="error",
    source=KUEUE_EVICTION,
)
PODS_READY_TIMEOUT = Cause(
    "pods-ready-timeout",
    "queue",
    "Kueue evicted the job with `PodsReadyTimeout`: its pods were not all Ready within `waitForPodsReady.timeout` "
    "(30 minutes by default since Kueue 0.19) or `recoveryTimeout`; names the pods not ready (warning: it is "
    "requeued)",
    severity="warning",
    fix="not every pod was Ready within Kueue's waitForPodsReady.timeout (default "
    f"{DEFAULT_PODS_READY_TIMEOUT} since Kueue v0.19; after a restart recoveryTimeout, which defaults to it), so "
    "Kueue evicted and requeued the job: raise waitForPodsReady.timeout and recoveryTimeout in Kueue's "
    "Configuration (ConfigMap kueue-manager-config in kueue-system), or start faster (pinned, smaller images; "
    "capacity that is there, not flex-start); check: pwdeploy preflight -f job.yaml --cluster",
    source=KUEUE_EVICTION,
)
RAISE_OR_START_FASTER = (
    "raise it in Kueue's Configuration (ConfigMap kueue-manager-config in kueue-system), or start faster (pinned, "
    "smaller images; capacity that is there, not flex-start); check: pwdeploy preflight -f job.yaml --cluster"
)


def observations(snap: Snapshot) -> list[Observation]:
    labels = snap.jobset.get("metadata", {}).get("labels") or {}
    queue = labels.get(ids.QUEUE_LABEL)
    if snap.workload is None:
        return _no_workload(snap, queue)
    wl = snap.workload
    name = f"{wl['metadata'].get('name', '')}"
    found = _evicted(wl, name, snap)
    if _true(wl, "Finished"):
        return found
    if _true(wl, "Admitted"):
        return found + _waiting_pods(wl, name)
    if any(obs.cause != PREEMPTED.id for obs in found):  # the eviction says why it waits; QuotaReserved repeats it
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
        return [KUEUE_PENDING.observe("jobset", snap.name, "no-kueue", evidence, severity="error", fix=fix)]
    if suspended and not queue:  # suspended by hand (or by another tool), not held by Kueue
        evidence = "the JobSet is suspended (spec.suspend: true) and names no queue"
        fix = (
            f"resume it: kubectl patch jobset {snap.name} -n {snap.namespace} --type merge "
            """-p '{"spec":{"suspend":false}}'"""
        )
        return [KUEUE_PENDING.observe("jobset", snap.name, "suspended", evidence, severity="info", fix=fix)]
    if suspended and snap.kueue_installed:
        evidence = f"the JobSet is suspended (spec.suspend: true) and Kueue made no Workload for it (queue {queue!r})"
        fix = (
            "Kueue does not manage this JobSet: its configuration must list jobset.x-k8s.io/jobset in "
            f"integrations.frameworks, and the LocalQueue must exist (kubectl get localqueues -n {snap.namespace})"
        )
        return [KUEUE_PENDING.observe("jobset", snap.name, "no-workload", evidence, severity="error", fix=fix)]
    return []


def _quota(cond: p.Object | None, workload: str, queue: str | None) -> Observation:
    if cond is None:
        evidence = "the Workload has no QuotaReserved condition yet"
        fix = "wait: Kueue has not looked at it yet"
        return KUEUE_PENDING.observe("workload", workload, "new", evidence, severity="info", fix=fix)
    message = str(cond.get("message") or cond.get("reason") or "")
    exceeds = cond.get("reason") == EXCEEDS or "> maximum capacity" in message
    never = exceeds or any(part in message for part in NEVER)
    severity: Severity = "error" if never else "warning"
    if exceeds:
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
    evidence = f"QuotaReserved=False: {quote(message)}"
    return KUEUE_PENDING.observe("workload", workload, key, evidence, severity=severity, fix=fix)


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
    return [KUEUE_PENDING.observe("workload", workload, f"check-{state}", evidence, severity=severity, fix=fix)]


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
            return [KUEUE_PENDING.observe("provisioningrequest", name, kind, evidence, severity="error", fix=fix)]
    cond = p.condition(request, "Provisioned")
    if cond is not None and cond.get("status") != "True":
        message = str(cond.get("message") or cond.get("reason") or "")
        evidence = f"ProvisioningRequest Provisioned={cond.get('status')}: {quote(message)}"
        fix = "waiting for the autoscaler to find the capacity (queued provisioning can take hours)"
        return [KUEUE_PENDING.observe("provisioningrequest", name, "waiting", evidence, severity="info", fix=fix)]
    return []


def _evicted(wl: p.Object, name: str, snap: Snapshot) -> list[Observation]:
    cond = p.condition(wl, "Evicted")
    if cond is None or cond.get("status") != "True":
        return []
    reason, message = str(cond.get("reason", "")), str(cond.get("message") or "")
    evidence = f"Workload Evicted=True reason {reason}: {quote(message)}"
    if reason.startswith(DEACTIVATED) or reason.startswith(f"EvictedDueTo{DEACTIVATED}"):
        requeues = "RequeuingLimitExceeded" in reason
        fix = (
            "Kueue deactivated the Workload (spec.active: false) and does not requeue it"
            + (
                " (it was evicted more often than waitForPodsReady.requeuingStrategy.backoffLimitCount allows)"
                if requeues
                else ""
            )
            + f": fix what evicted it, then reactivate it (kubectl patch workload {name} -n {snap.namespace} "
            """--type merge -p '{"spec":{"active":true}}') or resubmit (pwdeploy submit -f job.yaml --replace)"""
        )
        return [KUEUE_DEACTIVATED.observe("workload", name, reason, evidence, fix=fix)]
    if reason == TIMED_OUT:
        slowest = _slowest(snap)
        evidence += f"; not ready: {slowest}" if slowest else ""
        waited = str((p.condition(wl, "PodsReady") or {}).get("reason") or "")
        if waited in WAITS:
            what, setting = WAITS[waited]
            evidence += f"; PodsReady=False reason {waited}: {what}"
            fix = f"{what} within {setting}, so Kueue evicted and requeued the job: {RAISE_OR_START_FASTER}"
            return [PODS_READY_TIMEOUT.observe("workload", name, f"{reason}/{waited}", evidence, fix=fix)]
        return [PODS_READY_TIMEOUT.observe("workload", name, reason, evidence)]
    fix = "Kueue evicted the job (preemption by a higher priority workload, a stopped queue); it is requeued"
    return [PREEMPTED.observe("workload", name, reason, evidence, fix=fix)]


def _slowest(snap: Snapshot) -> str:
    """The pods not Ready, oldest first, with what they wait on: ``pod-a (Pending, Unschedulable), ...``."""
    waiting = []
    for pod in sorted(snap.pods, key=lambda q: str(q.get("metadata", {}).get("creationTimestamp") or "")):
        ready = p.condition(pod, "Ready")
        if ready is not None and ready.get("status") == "True":
            continue
        status = pod.get("status") or {}
        why = next(
            (
                str(((c.status.get("state") or {}).get("waiting") or {}).get("reason"))
                for c in p.containers(pod)
                if ((c.status.get("state") or {}).get("waiting") or {}).get("reason")
            ),
            str((p.condition(pod, "PodScheduled") or {}).get("reason") or ""),
        )
        waiting.append(f"{p.name(pod)} ({status.get('phase', 'Pending')}{', ' + why if why else ''})")
    more = f" (+{len(waiting) - SLOWEST} more)" if len(waiting) > SLOWEST else ""
    return ", ".join(waiting[:SLOWEST]) + more


def _waiting_pods(wl: p.Object, name: str) -> list[Observation]:
    """An admitted job whose pods Kueue still waits for: not scheduled (Kueue 0.20), or one lost."""
    ready = p.condition(wl, "PodsReady")
    reason = str((ready or {}).get("reason") or "")
    if ready is None or ready.get("status") == "True" or reason not in ("WaitForScheduling", "WaitForRecovery"):
        return []
    what, setting = WAITS[reason]
    message = str(ready.get("message") or "")
    evidence = f"PodsReady=False reason {reason}" + (f": {quote(message)}" if message else "")
    fix = f"{what}: Kueue evicts and requeues the job if that lasts longer than {setting}; the other findings say why"
    return [KUEUE_WAITING_PODS.observe("workload", name, reason, evidence, fix=fix)]
