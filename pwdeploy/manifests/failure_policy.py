"""What JobSet does when pods of its Jobs fail, decided over a rendered JobSet by the controllers' own rules.

Two controllers decide, and this module follows both:

- the batch Job controller takes each failed pod through the Job's ``podFailurePolicy`` (Kubernetes
  pkg/controller/job/pod_failure_policy.go, ``matchPodFailurePolicy``; the batch/v1 API, GA since 1.31): rules in
  order, the first that matches decides; ``onExitCodes`` looks at the terminated containers (``containerName``:
  only that one) whose exit code is not 0; ``onPodConditions`` at the pod's conditions. FailJob fails the Job
  (reason PodFailurePolicy), Ignore replaces the pod without counting it, Count (and no match) counts it, and
  a Job that counted more failures than its ``backoffLimit`` (default 6) fails with BackoffLimitExceeded. With
  ``backoffLimitPerIndex`` (an Indexed Job; pkg/controller/job/indexed_job_utils.go ``isIndexFailed``) the failures
  are counted per completion index (per host of a slice): an index that counted more than that fails (FailIndex
  fails it at once), and more failed indexes than ``maxFailedIndexes`` fail the Job (MaxFailedIndexesExceeded;
  without it the Job runs its other indexes to their end, then fails with FailedIndexes); ``backoffLimit`` then
  defaults to 2147483647. A container of a ``restartPolicy: OnFailure`` pod that exits is restarted in its pod,
  and the Job fails once the restarts of its pods reach ``backoffLimit`` (``pastBackoffLimitOnFailure``:
  restarts >= backoffLimit, or any restart when it is 0);
- the JobSet controller, at the first reconcile that sees a failed child Job (kubernetes-sigs/jobset
  pkg/controllers/failure_policy.go, read at v0.11.0 and at 08dfbdfd: ``executeFailurePolicy``,
  ``findFirstFailedPolicyRuleAndJob``, ``ruleIsApplicable``, ``restartJobSetActionApplier``): no failurePolicy
  fails the JobSet; else its rules are tried in order, each against every failed Job (earliest first), on
  ``onJobFailureReasons``, ``onJobFailureMessagePatterns`` (a regular expression searched in the Job's failure
  message) and ``targetReplicatedJobs`` (empty: any); the first rule that matches any failed Job decides, and with
  none the action is RestartJobSet. RestartJobSet fails the JobSet instead (ReachedMaxRestarts) once
  ``status.restartsCountTowardsMax`` has reached ``maxRestarts``; RestartJobSetAndIgnoreMaxRestarts never counts.

A suspended Job (Kueue evicting or preempting the JobSet suspends it, and the JobSet controller its Jobs) is one
the Job controller deletes the pods of, taking its tracking finalizer off each first (``deleteJobPods``): such a pod
is never counted against backoffLimit, but a FailJob rule still fails the Job on it while it is listed
(``getFailJobMessage`` reads every failed pod; the counting, only those holding the finalizer; kubernetes
pkg/controller/job/job_controller.go at v1.35). With no Job failed, the JobSet waits suspended and Kueue requeues
it (``Action.REQUEUE``).

Not modelled (ValueError where a JobSet uses them): RestartJob and RestartJobAndIgnoreMaxRestarts (v0.12, alpha,
behind a feature gate); nor activeDeadlineSeconds, nor the wait before a replacement (pwdeploy.manifests.lost_slice).
``onJobFailureMessagePatterns`` match the Job controller's formats with ``<pod>`` for the pod's name.
"""

from __future__ import annotations

import dataclasses
import re
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

DEFAULT_BACKOFF_LIMIT = 6  # batch/v1 Job.spec.backoffLimit when unset
PER_INDEX_BACKOFF_LIMIT = 2**31 - 1  # its default when backoffLimitPerIndex is set (batch/v1 defaults)
BACKOFF_LIMIT_MESSAGE = "Job has reached the specified backoff limit"  # the Job controller's
MAX_FAILED_INDEXES_MESSAGE = "Job has exceeded the specified maximal number of failed indexes"


class Action(Enum):
    NOTHING = "nothing"  # no child Job failed: the Job replaced the pod (or restarted it) and the JobSet runs on
    REQUEUE = "requeue"  # no child Job failed, its Jobs suspended: Kueue admits the JobSet again and it resumes
    RESTART = "RestartJobSet"
    RESTART_UNCOUNTED = "RestartJobSetAndIgnoreMaxRestarts"
    FAIL = "FailJobSet"


@dataclass(frozen=True)
class PodFailure:
    """One failed pod (or, for restartPolicy OnFailure, one container restart) of one child Job."""

    replicated_job: str
    exit_code: int | None = None  # the failed container's; None: it has none (the pod was lost with its node)
    signal: int | None = None  # the signal that killed it instead: the exit code Kubernetes reports is 128 + N
    container: str | None = None  # which container failed; default: the pod's first container
    conditions: tuple[str, ...] = ()  # the pod's conditions with status True, e.g. DisruptionTarget
    # failures counted already against the limit this one is counted against: its index's (backoffLimitPerIndex)
    # where the Job sets one, else the Job's (backoffLimit; for a container restarted in place, its restarts)
    failed_before: int = 0
    job_index: int = 0  # which Job of the replicatedJob (a worker slice)
    host: int = 0  # its completion index (the host in the slice)
    suspended: bool = False  # the Job controller deleted the pod because its Job was suspended (a Kueue eviction)

    @property
    def code(self) -> int | None:
        return 128 + self.signal if self.signal is not None else self.exit_code

    def describe(self) -> str:
        if self.signal is not None:
            how = f"killed by {signal.Signals(self.signal).name} (exit code {self.code})"
        elif self.exit_code is not None:
            how = f"exited {self.exit_code}"
        else:  # the pod went away with its node, or was stopped before its container ended
            how = ""
        conditions = f" with {', '.join(self.conditions)}" if self.conditions else ""
        who = f"{self.container or 'the pod'} {how}" if how else f"the pod ended{conditions}, no exit code"
        return who + (conditions if how else "") + (" as its suspended Job's pod was deleted" if self.suspended else "")


@dataclass(frozen=True)
class JobResult:
    """What the Job controller made of the failures of one child Job."""

    name: str  # <jobset>-<replicatedJob>-<jobIndex>, as the JobSet controller names it
    replicated_job: str
    reason: str | None  # the Job's failure reason (PodFailurePolicy, BackoffLimitExceeded); None: it did not fail
    message: str
    why: str  # which podFailurePolicy rule or backoffLimit decided, in words
    stops_pods_first: bool = False  # failed by a container restart over backoffLimit: its running pod stops first


@dataclass(frozen=True)
class Decision:
    action: Action
    rule: str | None  # the failurePolicy rule that decided; None: JobSet's default, or nothing failed
    why: str  # one line: the rule (or default) and the Job failure it matched
    jobs: tuple[JobResult, ...]

    @property
    def restarts(self) -> bool:
        return self.action in (Action.RESTART, Action.RESTART_UNCOUNTED)

    @property
    def runs_again(self) -> bool:
        """The program starts again from the top: a restart, Kueue's requeue, or the head Job replacing its pod."""
        return self.restarts or self.action in (Action.REQUEUE, Action.NOTHING)


def decide(jobset: Mapping[str, Any], failures: Sequence[PodFailure], restarts: int = 0) -> Decision:
    """What JobSet does after ``failures`` (in the order they happened) at one reconcile; ``restarts``: its
    ``status.restartsCountTowardsMax`` so far. ValueError for a replicatedJob the JobSet lacks, or an action
    this module does not model."""
    spec = _mapping(jobset.get("spec"))
    jobs = _job_results(str(_mapping(jobset.get("metadata")).get("name")), spec, failures)
    failed = [job for job in jobs if job.reason is not None]
    if not failed:
        why = "no child Job failed: " + "; ".join(j.why for j in jobs)
        if any(failure.suspended for failure in failures):
            return Decision(Action.REQUEUE, None, f"{why}; the JobSet waits suspended until Kueue admits it", jobs)
        return Decision(Action.NOTHING, None, why, jobs)
    # The JobSet acts at the first reconcile that sees a failed Job. A Job failed by a container's restarts must
    # stop its still-running pod before the Job controller marks it Failed (terminationGracePeriodSeconds on a
    # node), so a Job that failed at once (FailJob on main's exit, a pod lost with its node) is seen first.
    failed = [job for job in failed if not job.stops_pods_first] or failed
    policy = spec.get("failurePolicy")
    if not isinstance(policy, Mapping):
        return Decision(Action.FAIL, None, f"no failurePolicy: {_failed(failed[0])} fails the JobSet", jobs)
    for rule in _list(policy.get("rules")):
        matched = next((job for job in failed if _applies(rule, job)), None)
        if matched is not None:
            name = str(rule.get("name"))
            return _act(str(rule.get("action")), name, f"rule {name}", matched, policy, restarts, jobs)
    return _act("RestartJobSet", None, "no rule matched, JobSet's default", failed[0], policy, restarts, jobs)


def _act(
    action: str,
    rule: str | None,
    by: str,
    job: JobResult,
    policy: Mapping[str, Any],
    restarts: int,
    jobs: tuple[JobResult, ...],
) -> Decision:
    cause = _failed(job)
    if action == Action.FAIL.value:
        return Decision(Action.FAIL, rule, f"{by} (FailJobSet): {cause}", jobs)
    if action == Action.RESTART_UNCOUNTED.value:
        return Decision(Action.RESTART_UNCOUNTED, rule, f"{by} ({action}, not counted): {cause}", jobs)
    if action != Action.RESTART.value:
        raise ValueError(f"failurePolicy action {action!r} is not modelled here")
    limit = _int(policy.get("maxRestarts"), 0)
    if restarts >= limit:
        why = f"{by} (RestartJobSet, but {restarts} of maxRestarts {limit} used: ReachedMaxRestarts): {cause}"
        return Decision(Action.FAIL, rule, why, jobs)
    return Decision(Action.RESTART, rule, f"{by} (RestartJobSet, restart {restarts + 1} of {limit}): {cause}", jobs)


def _failed(job: JobResult) -> str:
    return f"Job {job.name} failed with {job.reason} ({job.why})"


def _applies(rule: Mapping[str, Any], job: JobResult) -> bool:
    """``ruleIsApplicable``: every condition the rule sets holds for the failed Job."""
    reasons, patterns, targets = (
        _list(rule.get(key)) for key in ("onJobFailureReasons", "onJobFailureMessagePatterns", "targetReplicatedJobs")
    )
    if reasons and job.reason not in reasons:
        return False
    if patterns and not any(_searches(str(p), job.message) for p in patterns):
        return False
    return not targets or job.replicated_job in targets


def _searches(pattern: str, message: str) -> bool:
    try:
        return re.search(pattern, message) is not None
    except re.error:  # JobSet logs an invalid pattern and skips it
        return False


class _Counts:
    """What the Job controller has counted so far, per Job: failures (per Job, or per index with
    backoffLimitPerIndex) and failed indexes."""

    def __init__(self) -> None:
        self.failures: dict[tuple[str, int, int | None], int] = {}
        self.failed_indexes: dict[tuple[str, int], set[int]] = {}

    def count(self, key: tuple[str, int, int | None], before: int) -> int:
        self.failures[key] = self.failures.get(key, before) + 1
        return self.failures[key]


def _job_results(jobset_name: str, spec: Mapping[str, Any], failures: Sequence[PodFailure]) -> tuple[JobResult, ...]:
    """Each child Job that had failures, with what they made of it, in the order of its last failure (for a
    failed Job: the one that failed it)."""
    by_name = {str(rj.get("name")): rj for rj in _list(spec.get("replicatedJobs"))}
    results: dict[tuple[str, int], JobResult] = {}
    counts = _Counts()
    for failure in failures:
        rj = by_name.get(failure.replicated_job)
        if rj is None:
            raise ValueError(f"{failure.replicated_job!r} is not a replicatedJob; valid: {', '.join(by_name)}")
        key = (failure.replicated_job, failure.job_index)
        if key in results and results[key].reason is not None:
            continue  # a failed Job takes no more failures
        name = f"{jobset_name}-{failure.replicated_job}-{failure.job_index}"
        results.pop(key, None)  # moved to the end: failed Jobs come in the order they failed
        results[key] = _pod_failed(name, _job_spec(rj), failure, counts)
    return tuple(results.values())


def _pod_failed(name: str, job_spec: Mapping[str, Any], failure: PodFailure, counts: _Counts) -> JobResult:
    job = (name, failure.replicated_job)
    container = failure.container or _first_container(job_spec)
    what = dataclasses.replace(failure, container=container).describe()
    rules = _list(_mapping(job_spec.get("podFailurePolicy")).get("rules"))
    matched = _first_pod_rule(rules, failure, container)
    said = f"{what}: no podFailurePolicy rule matched" if rules else what
    if matched is not None:
        index, rule = matched
        action = rule["action"]
        said = f"{what}: podFailurePolicy rule {index + 1} ({action} {_pod_rule_text(rule)})"
        if action == "FailJob":
            return JobResult(*job, "PodFailurePolicy", _fail_job_message(rule, failure, container, index), said)
        if action == "Ignore" and not failure.suspended:
            return JobResult(*job, None, "", f"{said}: not counted, the pod is replaced")
        if action == "FailIndex":
            return _index_failed(job, job_spec, failure, counts, f"{said}: index {failure.host} failed at once")
    if failure.suspended:
        return JobResult(*job, None, "", f"{said}: not counted, its Job is suspended (the Job controller took off "
                         "the pod's tracking finalizer before deleting it)")  # fmt: skip
    if _restarts_in_place(job_spec, failure):
        return _restarted(job, job_spec, failure, counts, said)
    per_index = _optional_int(job_spec.get("backoffLimitPerIndex"))
    if per_index is not None:
        counted = counts.count((failure.replicated_job, failure.job_index, failure.host), failure.failed_before)
        if counted > per_index:
            why = f"{said}: failure {counted} of index {failure.host} counted, over backoffLimitPerIndex {per_index}"
            return _index_failed(job, job_spec, failure, counts, why)
        return JobResult(
            *job, None, "", f"{said}: failure {counted} of index {failure.host} of backoffLimitPerIndex {per_index}, "
            "the pod is replaced"
        )  # fmt: skip
    counted = counts.count((failure.replicated_job, failure.job_index, None), failure.failed_before)
    limit = backoff_limit_of(job_spec)
    if counted > limit:
        why = f"{said}: failure {counted} counted, over backoffLimit {limit}"
        return JobResult(*job, "BackoffLimitExceeded", BACKOFF_LIMIT_MESSAGE, why)
    return JobResult(*job, None, "", f"{said}: failure {counted} of backoffLimit {limit}, the pod is replaced")


def _restarted(
    job: tuple[str, str], job_spec: Mapping[str, Any], failure: PodFailure, counts: _Counts, said: str
) -> JobResult:
    """A container restarted in its pod (restartPolicy OnFailure): the Job fails once its pods' restarts reach
    backoffLimit (any restart when it is 0), and the still-running pod is stopped before the Job is marked
    failed."""
    restarts = counts.count((failure.replicated_job, failure.job_index, -1), failure.failed_before)
    limit = backoff_limit_of(job_spec)
    if restarts >= max(limit, 1):
        why = f"{said}: restart {restarts} reaches backoffLimit {limit}; its pod still runs and is stopped first"
        return JobResult(*job, "BackoffLimitExceeded", BACKOFF_LIMIT_MESSAGE, why, stops_pods_first=True)
    return JobResult(*job, None, "", f"{said}: restart {restarts} of backoffLimit {limit}, restarted in its pod")


def _index_failed(
    job: tuple[str, str], job_spec: Mapping[str, Any], failure: PodFailure, counts: _Counts, why: str
) -> JobResult:
    """An index failed: the Job fails once more indexes failed than maxFailedIndexes allows."""
    failed = counts.failed_indexes.setdefault((failure.replicated_job, failure.job_index), set())
    failed.add(failure.host)
    allowed = _optional_int(job_spec.get("maxFailedIndexes"))
    if allowed is None:
        return JobResult(*job, None, "", f"{why}; the Job runs its other indexes, and fails (FailedIndexes) after")
    if len(failed) > allowed:
        why += f"; {len(failed)} failed index(es), over maxFailedIndexes {allowed}"
        return JobResult(*job, "MaxFailedIndexesExceeded", MAX_FAILED_INDEXES_MESSAGE, why)
    return JobResult(*job, None, "", f"{why}; {len(failed)} failed index(es) of maxFailedIndexes {allowed}")


def _restarts_in_place(job_spec: Mapping[str, Any], failure: PodFailure) -> bool:
    """A container of a ``restartPolicy: OnFailure`` pod that exited (not a pod ended by a disruption): the
    kubelet restarts it in the same pod, which keeps running, and the Job counts the restart."""
    pod = _mapping(_mapping(job_spec.get("template")).get("spec"))
    return pod.get("restartPolicy") == "OnFailure" and not failure.conditions and failure.code is not None


def backoff_limit_of(job_spec: Mapping[str, Any]) -> int:
    """A Job's backoffLimit: 6 where unset, 2147483647 where unset beside backoffLimitPerIndex."""
    per_index = _optional_int(job_spec.get("backoffLimitPerIndex")) is not None
    return _int(job_spec.get("backoffLimit"), PER_INDEX_BACKOFF_LIMIT if per_index else DEFAULT_BACKOFF_LIMIT)


def backoff_limit(jobset: Mapping[str, Any], replicated_job: str) -> int:
    """The limit a pod failure of the replicatedJob's Jobs is counted against: backoffLimitPerIndex (one host's
    failures) where the Job sets it, else its backoffLimit (Kubernetes' default where unset)."""
    spec = spec_of(jobset, replicated_job)
    per_index = _optional_int(spec.get("backoffLimitPerIndex"))
    return per_index if per_index is not None else backoff_limit_of(spec)


def spec_of(jobset: Mapping[str, Any], replicated_job: str) -> Mapping[str, Any]:
    """The Job spec of the JobSet's replicatedJob of that name."""
    for rj in _list(_mapping(jobset.get("spec")).get("replicatedJobs")):
        if rj.get("name") == replicated_job:
            return _job_spec(rj)
    raise ValueError(f"{replicated_job!r} is not a replicatedJob")


def _job_spec(replicated_job: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(_mapping(replicated_job.get("template")).get("spec"))


def _first_container(job_spec: Mapping[str, Any]) -> str:
    pod = _mapping(_mapping(job_spec.get("template")).get("spec"))
    containers = [c for c in _list(pod.get("containers")) if isinstance(c, Mapping)]
    return str(containers[0].get("name")) if containers else "the pod"


def _first_pod_rule(rules: list[Any], failure: PodFailure, container: str) -> tuple[int, Mapping[str, Any]] | None:
    """The first rule that matches, with its index; a rule with an unknown action is skipped, as the Job
    controller skips it."""
    for index, rule in enumerate(rules):
        action = rule.get("action")
        if action in ("FailJob", "Ignore", "Count", "FailIndex") and _pod_rule_matches(rule, failure, container):
            return index, rule
    return None


def _pod_rule_matches(rule: Mapping[str, Any], failure: PodFailure, container: str) -> bool:
    on_codes = rule.get("onExitCodes")
    if isinstance(on_codes, Mapping):
        wanted = on_codes.get("containerName")
        code = failure.code
        if code is None or code == 0 or (wanted is not None and wanted != container):
            return False
        values = {_int(v, -1) for v in _list(on_codes.get("values"))}
        operator = on_codes.get("operator")
        return (code in values) if operator == "In" else (code not in values) if operator == "NotIn" else False
    patterns = _list(rule.get("onPodConditions"))
    return any(
        p.get("type") in failure.conditions and p.get("status", "True") == "True" for p in patterns if p
    )  # only True conditions are known here


def _pod_rule_text(rule: Mapping[str, Any]) -> str:
    on_codes = rule.get("onExitCodes")
    if isinstance(on_codes, Mapping):
        values = ", ".join(str(v) for v in _list(on_codes.get("values")))
        where = f" of {on_codes['containerName']}" if on_codes.get("containerName") else ""
        return f"on exit codes{where} {on_codes.get('operator')} [{values}]"
    return "on " + ", ".join(str(p.get("type")) for p in _list(rule.get("onPodConditions")))


def _fail_job_message(rule: Mapping[str, Any], failure: PodFailure, container: str, index: int) -> str:
    """The Job controller's condition message for a FailJob rule, with <pod> for the pod's name."""
    action = rule.get("action")
    if isinstance(rule.get("onExitCodes"), Mapping):
        code = failure.code
        return (
            f"Container {container} for pod <pod> failed with exit code {code} matching {action} rule at index {index}"
        )
    matched = next(c for c in failure.conditions if any(p.get("type") == c for p in _list(rule.get("onPodConditions"))))
    return f"Pod <pod> has condition {matched} matching {action} rule at index {index}"


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return [v for v in value if v is not None] if isinstance(value, list) else []


def _int(value: object, default: int) -> int:
    found = _optional_int(value)
    return default if found is None else found


def _optional_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
