"""Lifecycle: a JobSet that failed (after its restarts, or by a failure policy rule) and pods that were taken
away (preemption, eviction, spot reclaim, node shutdown).

Texts matched:
- JobSet condition Failed=True with reason ``ReachedMaxRestarts`` (message ``jobset failed due to reaching max
  number of restarts``) or ``FailedJobs`` / ``FailJobSetFailurePolicyAction`` (kubernetes-sigs/jobset
  pkg/constants/constants.go).
- pod condition ``DisruptionTarget`` (reasons PreemptionByScheduler, DeletionByTaintManager,
  EvictionByEvictionAPI, TerminationByKubelet: kubernetes/kubernetes pkg/apis/core types), pod status reason
  ``Evicted``, ``Preempting`` or ``Terminated`` (node shutdown: ``Pod was terminated in response to imminent node
  shutdown.``). Whether the JobSet restarts for such a pod is read from its Job's ``podFailurePolicy`` in the
  live JobSet: an ``Ignore`` rule on DisruptionTarget (what pwdeploy renders for the head) makes the Job replace
  the pod without counting a failure, so the JobSet does not restart (kubernetes/kubernetes
  pkg/controller/job/pod_failure_policy.go).
- a head Job failed on main's exit after a stop from outside (``stops``): 137 is a finding of its own
  (``sigterm-ignored``); 143, under a head policy that fails on 143, is ``job-failed`` with its fix (seen on the
  real Job, JobSet and Kueue controllers).
- a restart: ``status.restarts`` and the JobSet's Warning event ``RestartJobSetFailurePolicyAction`` (or
  ``RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction``) ``applying RestartJobSet failure policy action (first
  failed job: <job>)`` (kubernetes-sigs/jobset v0.11.1 pkg/controllers/failure_policy.go, pkg/constants).
"""

from __future__ import annotations

from pwdeploy import identifiers as ids
from pwdeploy.cluster.diagnose import pods as p
from pwdeploy.cluster.diagnose import stops
from pwdeploy.cluster.diagnose.findings import Cause, Observation, quote
from pwdeploy.cluster.diagnose.read import Snapshot

REACHED_MAX_RESTARTS = "ReachedMaxRestarts"
RESTART_EVENTS = ("RestartJobSetFailurePolicyAction", "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction")

# What each cause's rule rests on (its findings' ``source``).
DISRUPTION = (
    "kubernetes/kubernetes: pkg/apis/core/types.go (DisruptionTarget), pkg/controller/job/pod_failure_policy.go"
)
JOBSET_CONDITIONS = "kubernetes-sigs/jobset: pkg/constants/constants.go (ReachedMaxRestarts, FailedJobs)"
JOBSET_RESTART = "kubernetes-sigs/jobset: pkg/controllers/failure_policy.go (RestartJobSetFailurePolicyAction)"

PREEMPTED = Cause(  # also a Kueue eviction (queueing.py)
    "preempted",
    "run",
    "DisruptionTarget, Evicted, node shutdown, Kueue preemption (warning); a head pod is replaced by its Job "
    "without a restart",
    severity="warning",
    source=DISRUPTION,
)
MAX_RESTARTS = Cause(
    "max-restarts",
    "end",
    "the JobSet failed with ReachedMaxRestarts",
    severity="error",
    fix="the job failed after its restarts (scheduling.max_restarts): the other findings say why each run failed; "
    "fix that and resubmit (pwdeploy submit -f job.yaml --replace)",
    source=JOBSET_CONDITIONS,
)
JOB_FAILED = Cause(
    "job-failed",
    "end",
    "the JobSet failed for another reason",
    severity="error",
    fix="a Job of the JobSet failed: the other findings say why; fix it and resubmit (pwdeploy submit --replace)",
    source=JOBSET_CONDITIONS,
)
RESTARTED = Cause(
    "restarted",
    "end",
    "the JobSet restarted (`status.restarts`): its latest restart event names the first failed Job (info)",
    severity="info",
    source=JOBSET_RESTART,
)


def observations(snap: Snapshot) -> list[Observation]:
    found = _jobset(snap) or _restarted(snap)
    return found + [obs for pod in snap.pods if (obs := _disrupted(pod, snap.jobset)) is not None]


def _restarted(snap: Snapshot) -> list[Observation]:
    """Why a job that has not failed restarted: the JobSet's latest restart event (events are oldest first)."""
    restarts = int((snap.jobset.get("status") or {}).get("restarts") or 0)
    if not restarts:
        return []
    said = [
        e
        for e in snap.events
        if e.get("reason") in RESTART_EVENTS and (e.get("involvedObject") or {}).get("kind") == "JobSet"
    ]
    evidence = f"restarts {restarts}" + (
        f"; latest: {said[-1].get('reason')}: {quote(str(said[-1].get('message') or ''))}"
        if said
        else "; the restart events have expired (the API server keeps events for an hour by default)"
    )
    fix = (
        f"a Job of the JobSet failed and the JobSet restarted every Job: the failed Job's pods are gone; read the "
        f"previous run's log (pwdeploy logs {snap.name} --previous) for why"
    )
    return [RESTARTED.observe("jobset", snap.name, RESTARTED.id, evidence, fix=fix)]


def _jobset(snap: Snapshot) -> list[Observation]:
    cond = p.condition(snap.jobset, "Failed")
    if cond is None or cond.get("status") != "True":
        return []
    reason, message = str(cond.get("reason") or ""), str(cond.get("message") or "")
    restarts = int((snap.jobset.get("status") or {}).get("restarts") or 0)
    evidence = f"JobSet condition Failed=True reason {reason}: {quote(message)}" + (
        f"; restarts {restarts}" if restarts else ""
    )
    if reason == REACHED_MAX_RESTARTS:
        return [MAX_RESTARTS.observe("jobset", snap.name, reason, evidence)]
    ignored = stops.sigterm_ignored(snap)
    if ignored is not None:
        evidence_more, fix = ignored
        return [stops.SIGTERM_IGNORED.observe("jobset", snap.name, reason, f"{evidence}; {evidence_more}", fix=fix)]
    failed_on_143 = stops.failed_on_exit(snap, ids.STOPPED_EXIT_CODE)
    if failed_on_143 is None:
        return [JOB_FAILED.observe("jobset", snap.name, reason, evidence)]
    job, message = failed_on_143
    evicted = stops.eviction(snap)
    why = f"when Kueue evicted the job ({evicted})" if evicted else "from outside (a deleted pod, a Kueue eviction)"
    fix = (
        f"main was stopped by SIGTERM (exit code 143) {why}, and this JobSet's head podFailurePolicy fails on 143, "
        "so the JobSet failed instead of being requeued or restarted: render it with this pwdeploy (143 restarts "
        "the JobSet; docs/restarts.md) and resubmit (pwdeploy submit -f job.yaml --replace)"
    )
    said = f"Job {job} failed: {quote(message)}"
    return [JOB_FAILED.observe("jobset", snap.name, reason, f"{evidence}; {said}", fix=fix)]


def _disrupted(pod: p.Object, jobset: p.Object) -> Observation | None:
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
    if _ignores_disruption(jobset, pod):
        fix = (
            "the pod was taken away (preemption, eviction, maintenance, node shutdown); its Job's podFailurePolicy "
            "ignores DisruptionTarget, so the Job replaces the pod without a JobSet restart (restarts stay as "
            "they are); the program must reconnect to the new pod (a client of the proxy: restart it)"
        )
    else:
        fix = (
            "the pod was taken away (preemption, spot reclaim, maintenance, node shutdown); the JobSet restarts "
            "the job within scheduling.max_restarts: for fewer interruptions use on-demand or reserved capacity, "
            "and save checkpoints (storage.checkpoints) to resume"
        )
    return PREEMPTED.observe(p.role(pod), p.name(pod), reason, evidence, fix=fix)


def _ignores_disruption(jobset: p.Object, pod: p.Object) -> bool:
    """The pod's Job (its replicatedJob in the live JobSet) ignores pods with DisruptionTarget=True."""
    rj = (pod.get("metadata", {}).get("labels") or {}).get(ids.REPLICATED_JOB_LABEL)
    for spec_rj in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        if spec_rj.get("name") != rj:
            continue
        policy = ((spec_rj.get("template") or {}).get("spec") or {}).get("podFailurePolicy") or {}
        for rule in policy.get("rules") or []:
            conditions = rule.get("onPodConditions") or []
            if any(c.get("type") == "DisruptionTarget" and c.get("status", "True") == "True" for c in conditions):
                return bool(rule.get("action") == "Ignore")  # the first matching rule decides
    return False
