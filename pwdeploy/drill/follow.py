"""After `pwdeploy drill` injected its fault: follow the job until it recovers (or ends, or ``--timeout``) and
measure what the controllers did; ``drill.verdict`` turns what was seen into the report.

What is measured, on the connection's clock from the moment the fault was injected:

- detection: the first sign that a controller acted: the JobSet counted a restart or ended, a hit pod was
  replaced (a new pod in its slot), or the kubelet restarted the signalled container;
- every pod running again: every pod the JobSet expects Running, none of them being deleted, all of the current
  restart attempt (label ``jobset.sigs.k8s.io/restart-attempt``);
- the first step after the fault: the first step report (a line ``step N`` of main's log, as the examples print
  after ``runtime.step_done``) of a new head pod (a restart, or the head replaced), or, on the same head pod,
  timestamped after detection (on the real controllers a replacement pod's first steps can come before the change
  that shows detection arrives); steps lost: the last step reported before detection minus the first after it,
  plus one (the steps done again).

The JobSet and its pods are watched (pwdeploy.kube.watch: a list and a watch each, however long the recovery
takes), so a change is seen when it happens; main's log, which has no watch, is read at most every ``POLL_S``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pwdeploy import identifiers as ids
from pwdeploy.cluster import jobsets as js
from pwdeploy.cluster.jobsets import Object
from pwdeploy.cluster.logs import read_lines
from pwdeploy.cluster.progress import TERMINAL, job_state
from pwdeploy.drill.plan import Fault
from pwdeploy.errors import ClusterError
from pwdeploy.kube.seam import Kube
from pwdeploy.kube.watch import Mirrors
from pwdeploy.text import printable

STEP_LINE = re.compile(r"^step (\d{1,12})\b")
POLL_S = 2.0
TAIL_BEFORE = 200  # lines of main's log read for the last step before the fault


def step_of(line: str) -> int | None:
    m = STEP_LINE.match(line)
    return None if m is None else int(m[1])


def parse_time(stamp: str) -> datetime | None:
    """An RFC 3339 timestamp of the API server (nanoseconds cut to microseconds), or None."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", stamp)
    if m is None:
        return None
    fraction = (m[2] or "0")[:6].ljust(6, "0")
    zone = "+00:00" if m[3] == "Z" else m[3]
    try:
        return datetime.fromisoformat(f"{m[1]}.{fraction}{zone}")
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------- one look


def _meta(pod: Object) -> dict[str, Any]:
    return pod.get("metadata") or {}


def slot(pod: Object) -> tuple[str, str, str]:
    labels = _meta(pod).get("labels") or {}
    return (
        str(labels.get(ids.REPLICATED_JOB_LABEL, "")),
        str(labels.get(ids.JOB_INDEX_LABEL, "")),
        str(labels.get(ids.COMPLETION_INDEX_LABEL, "")),
    )


def container_restarts(pod: Object, container: str) -> int:
    for s in (pod.get("status") or {}).get("containerStatuses") or []:
        if s.get("name") == container:
            return int(s.get("restartCount") or 0)
    return 0


def expected_pods(jobset: Object) -> int:
    return sum(rj.replicas * rj.pods_per_job for rj in js.replicated_jobs(jobset))


def all_running(jobset: Object, pods: list[Object]) -> bool:
    """Every pod the JobSet expects is Running, of the current restart attempt, none being deleted."""
    attempt = str(js.restarts(jobset))
    live = [
        p
        for p in pods
        if not _meta(p).get("deletionTimestamp")
        and (_meta(p).get("labels") or {}).get(ids.RESTART_ATTEMPT_LABEL, attempt) == attempt
        and (p.get("status") or {}).get("phase") == "Running"
    ]
    return len({slot(p) for p in live}) >= expected_pods(jobset)


def newest_head(pods: list[Object]) -> str | None:
    heads = [p for p in pods if slot(p)[0] == ids.HEAD_JOB and not _meta(p).get("deletionTimestamp")]
    heads.sort(key=lambda p: str(_meta(p).get("creationTimestamp") or ""))
    return str(_meta(heads[-1])["name"]) if heads else None


def last_step(kube: Kube, namespace: str, pod: str | None) -> int | None:
    """The last step main reported (of its last ``TAIL_BEFORE`` lines), None when it reported none."""
    if pod is None:
        return None
    steps = [step_of(line) for _, line in read_lines(kube, namespace, pod, ids.MAIN_CONTAINER, tail=TAIL_BEFORE)]
    found = [s for s in steps if s is not None]
    return found[-1] if found else None


# The JobSet controller names the first failed child Job in its restart events and in its Failed condition:
# "applying RestartJobSet failure policy action (first failed job: NAME)", event reasons from kubernetes-sigs/jobset
# pkg/constants/constants.go, written by pkg/controllers/failure_policy.go (restartJobSetActionApplier,
# messageWithFirstFailedJob).
FAILURE_POLICY_EVENTS = ("RestartJobSetFailurePolicyAction", "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction")
FIRST_FAILED = re.compile(r"\(first failed job: ([a-z0-9][-a-z0-9.]{0,252})\)")


def first_failed_job(message: str) -> str | None:
    m = FIRST_FAILED.search(message or "")
    return None if m is None else m[1]


def restart_event_job(kube: Kube, namespace: str, name: str) -> str | None:
    """The first failed Job of the newest restart event on the JobSet (None without one, or without the
    permission to list events: it is evidence, not the measurement)."""
    from pwdeploy.kube.seam import EVENTS, Action, ApiError

    query = [("fieldSelector", f"involvedObject.name={name}")]
    try:
        events = kube.list_items(Action("list", EVENTS, namespace), EVENTS.path(namespace), query=query)
    except ApiError as exc:
        if exc.status == 403:
            return None
        raise
    ours = [e for e in events if e.get("reason") in FAILURE_POLICY_EVENTS]
    ours.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    return first_failed_job(str(ours[-1].get("message") or "")) if ours else None


# ---------------------------------------------------------------------------------------------- following


@dataclass
class Before:
    """The job as it was when the fault was injected."""

    restarts: int
    counted: int  # status.restartsCountTowardsMax
    max_restarts: int
    target_uids: dict[tuple[str, str, str], str]  # slot -> uid of the pods hit
    target_restarts: dict[str, int]  # kill_worker: pod -> its container's restartCount
    last_step: int | None
    at: float  # kube.clock.now()
    utc: datetime
    head: str | None = None  # the head pod whose main reported steps when the fault was injected


@dataclass
class Observed:
    outcome: str = "none"  # jobset_restart, elastic_recovery, pod_replaced, container_restarted, job_ended, none
    detail: str = ""
    detected_s: float | None = None
    detected_utc: datetime | None = None
    running_s: float | None = None
    first_step_s: float | None = None
    first_step: int | None = None
    last_step: int | None = None
    restarts: int = 0
    counted: int = 0
    first_failed_job: str | None = None  # the child Job the JobSet controller named when it acted
    stopped: str = "timeout"  # recovered, job_ended, timeout, interrupted, api_error
    notes: list[str] = field(default_factory=list)
    error: str | None = None  # api_error: what the API server answered when following stopped
    steps_read_at: float | None = None  # when main's log was last read (kube.clock)


RANK = {"none": 0, "container_restarted": 1, "pod_replaced": 1, "elastic_recovery": 2, "jobset_restart": 3}


def before(
    kube: Kube, namespace: str, jobset: Object, fault: Fault, pods: list[Object], hit: tuple[str, ...]
) -> Before:
    status = jobset.get("status") or {}
    policy = (jobset.get("spec") or {}).get("failurePolicy") or {}
    hit_pods = [p for p in pods if _meta(p).get("name") in hit]
    head = newest_head(pods)
    return Before(
        restarts=js.restarts(jobset),
        counted=int(status.get("restartsCountTowardsMax") or 0),
        max_restarts=int(policy.get("maxRestarts") or 0),
        target_uids={slot(p): str(_meta(p).get("uid")) for p in hit_pods},
        target_restarts={str(_meta(p)["name"]): container_restarts(p, ids.WORKER_CONTAINER) for p in hit_pods},
        last_step=last_step(kube, namespace, head),
        at=kube.clock.now(),
        utc=kube.clock.utc_now(),
        head=head,
    )


def follow(
    kube: Kube,
    namespace: str,
    name: str,
    fault: Fault,
    was: Before,
    *,
    elastic: bool,
    timeout: float,
    say: Callable[[str], None],
    poll: float = POLL_S,
) -> Observed:
    """Watch the job until every pod runs again and main reported a step (or the job ended, or ``timeout``
    seconds passed since the fault); Ctrl-C stops watching and returns what was seen (``stopped`` interrupted), and
    so does an API error (``api_error``): what was measured before it is still the report's. ``poll``: how often
    main's log is read (and the job listed, where watching is forbidden)."""
    seen = Observed(last_step=was.last_step)
    listings = [js.jobset_listing(namespace, name), js.pods_listing(namespace, name)]
    try:
        with Mirrors(kube, listings, poll=poll) as watched:
            while True:
                jobsets = watched[0]
                look = Look(jobsets[0] if jobsets else None, watched[1], poll)
                if _look(kube, namespace, name, fault, was, seen, elastic, say, look):
                    return seen
                left = timeout - (kube.clock.now() - was.at)
                if left <= 0:
                    seen.stopped = "timeout"
                    return seen
                watched.wait(min(left, poll))
    except KeyboardInterrupt:
        seen.stopped = "interrupted"
    except ClusterError as exc:
        seen.stopped, seen.error = "api_error", printable(str(exc), 500, one_line=True)
    return seen


@dataclass(frozen=True)
class Look:
    """What the watches hold at one look: the JobSet (None once it is gone) and its pods; ``poll``: how often
    main's log may be read."""

    jobset: Object | None
    pods: list[Object]
    poll: float


def _look(
    kube: Kube,
    namespace: str,
    name: str,
    fault: Fault,
    was: Before,
    seen: Observed,
    elastic: bool,
    say: Callable[[str], None],
    look: Look,
) -> bool:
    """One look at the job; True when following is done."""
    jobset = look.jobset
    elapsed = kube.clock.now() - was.at
    if jobset is not None:
        seen.restarts = js.restarts(jobset)
        seen.counted = int((jobset.get("status") or {}).get("restartsCountTowardsMax") or 0)
    if _ended(jobset, seen, elapsed, kube, say):
        return True
    assert jobset is not None
    if seen.restarts > was.restarts:
        if seen.first_failed_job is None:
            seen.first_failed_job = restart_event_job(kube, namespace, name)
        failed = f"; first failed job: {seen.first_failed_job}" if seen.first_failed_job else ""
        _detect(seen, "jobset_restart", f"the JobSet restarted (restart {seen.restarts}{failed})", elapsed, kube, say)
    pods = look.pods
    _pod_reactions(pods, fault, was, seen, elastic, elapsed, kube, say)
    if seen.detected_s is not None and seen.running_s is None and all_running(jobset, pods):
        seen.running_s = elapsed
        say(f"+{elapsed:.1f}s every pod runs again")
    if seen.steps_read_at is None or kube.clock.now() - seen.steps_read_at >= look.poll:
        seen.steps_read_at = kube.clock.now()
        _steps(kube, namespace, newest_head(pods), was, seen, elapsed, say)
    if seen.running_s is not None and (seen.first_step_s is not None or was.last_step is None):
        seen.stopped = "recovered"
        if was.last_step is None:
            seen.notes.append("main reported no step before the fault: steps after it are not awaited")
        return True
    return False


def _ended(jobset: Object | None, seen: Observed, elapsed: float, kube: Kube, say: Callable[[str], None]) -> bool:
    """Whether the job ended: its JobSet deleted, or Completed or Failed."""
    if jobset is None:
        _detect(seen, "job_ended", "the JobSet was deleted", elapsed, kube, say)
    else:
        state = job_state(jobset)
        if state.phase not in TERMINAL:
            return False
        seen.first_failed_job = seen.first_failed_job or first_failed_job(state.message)
        _detect(seen, "job_ended", f"the JobSet is {state.phase} ({state.reason})", elapsed, kube, say)
    seen.stopped = "job_ended"
    return True


def _pod_reactions(
    pods: list[Object],
    fault: Fault,
    was: Before,
    seen: Observed,
    elastic: bool,
    elapsed: float,
    kube: Kube,
    say: Callable[[str], None],
) -> None:
    live = {slot(p): p for p in pods if not _meta(p).get("deletionTimestamp")}
    replaced = [s for s, uid in was.target_uids.items() if s in live and str(_meta(live[s]).get("uid")) != uid]
    if replaced and seen.restarts == was.restarts:
        outcome = "elastic_recovery" if elastic and fault.kind == "lose_slice" else "pod_replaced"
        _detect(seen, outcome, f"{len(replaced)} of {len(was.target_uids)} hit pods replaced", elapsed, kube, say)
    for pod in pods:
        pod_name = str(_meta(pod).get("name"))
        if (
            pod_name in was.target_restarts
            and container_restarts(pod, ids.WORKER_CONTAINER) > was.target_restarts[pod_name]
        ):
            _detect(
                seen, "container_restarted", f"the kubelet restarted {pod_name}'s worker container", elapsed, kube, say
            )


def _detect(seen: Observed, outcome: str, detail: str, elapsed: float, kube: Kube, say: Callable[[str], None]) -> None:
    if seen.detected_s is None:
        seen.detected_s, seen.detected_utc = elapsed, kube.clock.utc_now()
        say(f"+{elapsed:.1f}s detected: {detail}")
    if outcome == "job_ended" or RANK.get(outcome, 0) > RANK.get(seen.outcome, 0):
        if seen.outcome != "none" and seen.outcome != outcome:
            say(f"+{elapsed:.1f}s then: {detail}")
        seen.outcome, seen.detail = outcome, detail


def _steps(
    kube: Kube,
    namespace: str,
    head: str | None,
    was: Before,
    seen: Observed,
    elapsed: float,
    say: Callable[[str], None],
) -> None:
    if head is None or seen.first_step is not None:
        return
    replaced = head != was.head  # a new head pod (a restart, or the head replaced): each step it reports is after
    for stamp, line in read_lines(kube, namespace, head, ids.MAIN_CONTAINER, since=was.utc):
        step, at = step_of(line), parse_time(stamp)
        if step is None or at is None or at < was.utc:
            continue
        if not replaced and (seen.detected_utc is None or at < seen.detected_utc):
            seen.last_step = max(step, seen.last_step or 0)
        elif seen.first_step is None:
            seen.first_step, seen.first_step_s = step, elapsed
            say(f"+{elapsed:.1f}s first step after the fault: step {step}")
