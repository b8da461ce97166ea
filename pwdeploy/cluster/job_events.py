"""The events of one job, told apart by the objects it owns, never by their names.

A job owns its JobSet, the JobSet's Jobs, their pods and, when Kueue manages it, its Workload; an event is the
job's when its ``involvedObject.uid`` is one of theirs (``about``). Names cannot tell jobs apart: job ``train``'s
Jobs are ``train-worker-0``, ``train-pathways-head-0``, and a JobSet named ``train-worker-0`` has Jobs and pods
whose names start with ``train-worker-0-`` too; a JobSet deleted and submitted again under its name is a new
object (a new uid), so the events of the one before are not this one's.

``status`` and ``diagnose`` read the events of the objects that matter, each by ``fieldSelector=
involvedObject.uid=UID`` (a selectable field of an Event: kubernetes/kubernetes pkg/registry/core/event/
strategy.go), one request per object, concurrently: the JobSet, the Workload, the Jobs that have fewer pods than
they run at once, and the pods that do not run ready (first one object of each kind of trouble and of each Job,
then more), at most ``MAX_OBJECTS`` in all. What they cost grows with the job's troubles, never with the
namespace's events. The timeline, which follows every object, lists the namespace's events and keeps the job's.

Events are context: a list that cannot be read (throttled, 429 after the retries; forbidden; a server error) is a
note beside the rest of the answer, never its end.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from pwdeploy import identifiers as ids
from pwdeploy.cluster.jobsets import Object
from pwdeploy.kube.seam import EVENTS, Action, ApiError, Kube

MAX_OBJECTS = 16  # objects whose events status and diagnose read (one request each)
READERS = 6  # of them at once
SETTLED = ("Succeeded",)  # a pod that ended well has no trouble to tell of


class Target(NamedTuple):
    """An object whose events are read: its uid, kind and name, and the group it stands for (one of each group is
    read before a second of any)."""

    uid: str
    kind: str
    name: str
    group: str


class JobEvents(NamedTuple):
    events: list[Object]  # oldest first
    read: frozenset[str]  # the uids whose events were read
    notes: list[str]  # what could not be read, and why


def uid_of(obj: Object) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def owned_uids(
    jobset: Object, jobs: Iterable[Object] = (), pods: Iterable[Object] = (), workload: Object | None = None
) -> frozenset[str]:
    """The uids of the job's objects: the JobSet, the Jobs, the pods, and the Jobs the pods name as their owner (a
    reader that lists no Jobs still knows those), and the Workload."""
    found = {uid_of(jobset), *(uid_of(j) for j in jobs)}
    for pod in pods:
        found.add(uid_of(pod))
        found |= {str(o.get("uid") or "") for o in (pod.get("metadata") or {}).get("ownerReferences") or []}
    if workload is not None:
        found.add(uid_of(workload))
    return frozenset(found - {""})


def about(event: Object, uids: frozenset[str]) -> bool:
    """Whether the event is about one of the objects whose uids these are."""
    return str((event.get("involvedObject") or {}).get("uid") or "") in uids


def event_time(event: Object) -> str:
    """When it last happened: a core/v1 event's lastTimestamp, an events.k8s.io one's series or eventTime."""
    series = event.get("series") if isinstance(event.get("series"), dict) else {}
    return str(
        event.get("lastTimestamp")
        or (series or {}).get("lastObservedTime")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or ""
    )


# ---------------------------------------------------------------------------------------------- which objects


def targets(
    jobset: Object, jobs: Sequence[Object] | None, pods: Sequence[Object], workload: Object | None = None
) -> tuple[list[Target], int]:
    """The objects whose events are worth reading, in the order they are read, at most MAX_OBJECTS; and how many
    there were in all. ``jobs`` None: not listed (the Jobs the pods name stand in, those without pods unknown)."""
    first = [t for t in (_target(jobset, "JobSet", "jobset"), _target(workload, "Workload", "workload")) if t]
    troubled = [*_short_jobs(jobs or [], pods), *_troubled_pods(pods)]
    return first + _spread(troubled, MAX_OBJECTS - len(first)), len(first) + len(troubled)


def _target(obj: Object | None, kind: str, group: str) -> Target | None:
    if obj is None or not uid_of(obj):
        return None
    return Target(uid_of(obj), kind, str((obj.get("metadata") or {}).get("name") or ""), group)


def _short_jobs(jobs: Sequence[Object], pods: Sequence[Object]) -> list[Target]:
    """The Jobs short of pods: their events say why (the Job controller's FailedCreate)."""
    short = short_jobs(jobs, pods)
    return [
        Target(uid_of(job), "Job", str((job.get("metadata") or {}).get("name") or ""), f"job/{_replicated_job(job)}")
        for job in jobs
        if uid_of(job) in short
    ]


def short_jobs(jobs: Iterable[Object], pods: Iterable[Object]) -> set[str]:
    """The uids of the Jobs that have not ended, are not suspended, and have fewer live pods than they run at once
    (pods refused, or a backoff before a failed pod's replacement)."""
    live: dict[str, int] = {}
    for pod in pods:
        if _live(pod):
            for owner in (pod.get("metadata") or {}).get("ownerReferences") or []:
                live[str(owner.get("uid"))] = live.get(str(owner.get("uid")), 0) + 1
    found = set()
    for job in jobs:
        spec, status = job.get("spec") or {}, job.get("status") or {}
        ended = any(
            c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        parallelism = spec.get("parallelism")
        wanted = parallelism if isinstance(parallelism, int) else 1
        if not ended and not spec.get("suspend") and live.get(uid_of(job), 0) < wanted:
            found.add(uid_of(job))
    return found


def _live(pod: Object) -> bool:
    meta, phase = pod.get("metadata") or {}, (pod.get("status") or {}).get("phase")
    return not meta.get("deletionTimestamp") and phase not in ("Succeeded", "Failed")


def _replicated_job(obj: Object) -> str:
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(ids.REPLICATED_JOB_LABEL) or "")


def _troubled_pods(pods: Sequence[Object]) -> list[Target]:
    """Pods not running ready, with a group per kind of trouble and per Job, so the first read cover both."""
    found = []
    for pod in pods:
        trouble = pod_trouble(pod)
        owner: Object = next(iter((pod.get("metadata") or {}).get("ownerReferences") or []), {})
        if trouble and (t := _target(pod, "Pod", "")):
            found.append(t._replace(group=f"pod/{_replicated_job(pod)}/{trouble}/{owner.get('uid', '')}"))
    return found


def pod_trouble(pod: Object) -> str:
    """What is wrong with a pod, in a word ("" when nothing is: it runs ready, or it succeeded; a container that
    restarted and runs again tells its story in its status, and in its log)."""
    status = pod.get("status") or {}
    if status.get("phase") in SETTLED:
        return ""
    if status.get("phase") == "Failed":
        return "failed"
    conditions = {str(c.get("type")): c.get("status") for c in status.get("conditions") or [] if isinstance(c, dict)}
    if conditions.get("PodScheduled") == "False":
        return "unscheduled"
    statuses = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    for c in statuses:
        waiting = ((c.get("state") or {}).get("waiting") or {}).get("reason")
        if waiting:  # ContainerCreating too: a volume that cannot be mounted says so only in FailedMount events
            return f"waiting/{waiting}"
    return "not-ready" if conditions.get("Ready") == "False" else ""


def _spread(found: list[Target], room: int) -> list[Target]:
    """At most ``room`` of them: the first of each group, then the second of each, and so on."""
    groups: dict[str, list[Target]] = {}
    for t in found:
        groups.setdefault(t.group, []).append(t)
    picked: list[Target] = []
    depth = 0
    while len(picked) < min(room, len(found)):
        picked += [members[depth] for members in groups.values() if depth < len(members)][: room - len(picked)]
        depth += 1
    return picked


# ---------------------------------------------------------------------------------------------- reading


def read_events(
    kube: Kube, namespace: str, jobset: Object, jobs: Sequence[Object] | None, pods: Sequence[Object],
    workload: Object | None = None,
) -> JobEvents:  # fmt: skip
    """The events of the objects ``targets`` picks, oldest first; the events of an object that cannot be read are
    a note (the first such error's, with how many lists it cost)."""
    from concurrent.futures import ThreadPoolExecutor  # only here: status of a running job imports it not

    chosen, candidates = targets(jobset, jobs, pods, workload)
    with ThreadPoolExecutor(max_workers=max(1, min(READERS, len(chosen)))) as pool:
        answers = list(pool.map(lambda t: _events_of(kube, namespace, t), chosen))
    events: dict[str, Object] = {}
    failed: list[ApiError] = []
    for answer in answers:
        if isinstance(answer, ApiError):
            failed.append(answer)
            continue
        for e in answer:
            events.setdefault(uid_of(e) or str(id(e)), e)
    notes = [_unread_note(failed, len(chosen))] if failed else []
    if candidates > len(chosen):
        notes.append(
            f"the events of {len(chosen)} of the {candidates} objects that may have some were read (at most "
            f"{MAX_OBJECTS}, one of each kind of trouble first): findings from events (refused pods, the "
            "autoscaler's verdicts, image pulls) count only what those show"
        )
    read = frozenset(t.uid for t, a in zip(chosen, answers, strict=True) if not isinstance(a, ApiError))
    return JobEvents(sorted(events.values(), key=event_time), read, notes)


def _events_of(kube: Kube, namespace: str, target: Target) -> list[Object] | ApiError:
    query = [("fieldSelector", f"involvedObject.uid={target.uid}")]
    try:
        return kube.list_items(Action("list", EVENTS, namespace), EVENTS.path(namespace), query=query)
    except ApiError as exc:
        return exc


def _unread_note(failed: list[ApiError], lists: int) -> str:
    first = failed[0]
    why = "throttled by the API server (429 after the retries)" if first.status == 429 else first.message
    return (
        f"the job's events could not be read ({why}; {len(failed)} of {lists} lists): what only events show (refused "
        "pods, the autoscaler's verdicts, restart reasons) is missing"
        + (f"; {first.hint}" if first.hint and first.status != 429 else "")
    )
