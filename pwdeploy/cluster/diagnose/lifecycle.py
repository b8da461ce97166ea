"""Lifecycle: a JobSet that failed (after its restarts, or by a failure policy rule) and pods that were taken
away (preemption, eviction, spot reclaim, node shutdown).

Texts matched:
- JobSet condition Failed=True with reason ``ReachedMaxRestarts`` (message ``jobset failed due to reaching max
  number of restarts``) or ``FailedJobs`` / ``FailJobSetFailurePolicyAction`` (kubernetes-sigs/jobset
  pkg/constants/constants.go).
- pod condition ``DisruptionTarget`` (reasons PreemptionByScheduler, DeletionByTaintManager,
  EvictionByEvictionAPI, TerminationByKubelet: kubernetes/kubernetes pkg/apis/core types), pod status reason
  ``Evicted``, ``Preempting`` or ``Terminated`` (node shutdown: ``Pod was terminated in response to imminent node
  shutdown.``).
"""

from __future__ import annotations

from pwdeploy.cluster.diagnose import pods as p
from pwdeploy.cluster.diagnose.findings import Observation, quote
from pwdeploy.cluster.diagnose.read import Snapshot

MAX_RESTARTS = "ReachedMaxRestarts"


def observations(snap: Snapshot) -> list[Observation]:
    return _jobset(snap) + [obs for pod in snap.pods if (obs := _disrupted(pod)) is not None]


def _jobset(snap: Snapshot) -> list[Observation]:
    cond = p.condition(snap.jobset, "Failed")
    if cond is None or cond.get("status") != "True":
        return []
    reason, message = str(cond.get("reason") or ""), str(cond.get("message") or "")
    restarts = int((snap.jobset.get("status") or {}).get("restarts") or 0)
    evidence = f"JobSet condition Failed=True reason {reason}: {quote(message)}" + (
        f"; restarts {restarts}" if restarts else ""
    )
    if reason == MAX_RESTARTS:
        fix = (
            "the job failed after its restarts (scheduling.max_restarts): the other findings say why each run "
            "failed; fix that and resubmit (pwdeploy submit -f job.yaml --replace)"
        )
        return [Observation("max-restarts", "error", "jobset", snap.name, reason, evidence, fix)]
    fix = "a Job of the JobSet failed: the other findings say why; fix it and resubmit (pwdeploy submit --replace)"
    return [Observation("job-failed", "error", "jobset", snap.name, reason, evidence, fix)]


def _disrupted(pod: p.Object) -> Observation | None:
    if not p.disrupted(pod):
        return None
    target = p.condition(pod, "DisruptionTarget")
    status = pod.get("status") or {}
    if target is not None and target.get("status") == "True":
        reason, message = str(target.get("reason") or ""), str(target.get("message") or "")
        evidence = f"condition DisruptionTarget=True reason {reason}: {quote(message)}"
    else:
        reason, message = str(status.get("reason") or ""), str(status.get("message") or "")
        evidence = f"pod {reason}: {quote(message)}"
    fix = (
        "the pod was taken away (preemption, spot reclaim, maintenance, node shutdown); the JobSet restarts the "
        "job within scheduling.max_restarts: for fewer interruptions use on-demand or reserved capacity, and save "
        "checkpoints (storage.checkpoints) to resume"
    )
    return Observation("preempted", "warning", p.role(pod), p.name(pod), reason, evidence, fix)
