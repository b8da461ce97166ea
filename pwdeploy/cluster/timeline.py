"""The job timeline of `pwdeploy logs NAME --all [-f]`: every container of every pod of the job (or a selection),
each line prefixed with where it came from, interleaved with the job's events and milestones; with ``-f`` until
the job ends.

It speaks at once: the pods are listed page by page and each page's containers are read as soon as it arrives
(timeline_reads.py: ``max_streams`` at a time, the head's first); lines go out through a bounded reordering window
(interleave.py: each held at most ``window`` seconds, given in the order of their timestamps), and ``on_progress``
hears how many pods are still being read. Following, the JobSet, its Jobs, its pods and the namespace's events are
watched (a list and a watch each: pwdeploy.kube.watch), which is how new pods, ended pods and the milestones (pods
scheduled, containers ready and ended, native sidecars' from their initContainerStatuses, restarts, the end) are
found. The events shown are those of the objects the job owns, told apart by uid (pwdeploy.cluster.job_events);
events that cannot be read (throttled, a server error) are said once and the timeline goes on. Lines of the program
that are milestones in themselves (``N/M Pathways Slices Now Ready``, the elastic manager's) are marked so in JSON.
How a read resumes without losing or repeating a line, and how long lines are bounded: log_reads.py.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pwdeploy import identifiers as ids
from pwdeploy.cluster import jobsets as js
from pwdeploy.cluster.interleave import WINDOW_S, Interleave
from pwdeploy.cluster.job_events import owned_uids
from pwdeploy.cluster.jobsets import Object
from pwdeploy.cluster.log_reads import shown
from pwdeploy.cluster.logs import COMPONENTS
from pwdeploy.cluster.milestones import Milestones
from pwdeploy.cluster.progress import TERMINAL, job_state
from pwdeploy.cluster.timeline_reads import Readers, Source
from pwdeploy.kube.seam import EVENTS, JOBS, PODS, ApiError, Kube, reading_answers
from pwdeploy.kube.watch import Mirrors
from pwdeploy.kube.watch_stream import Listing, list_at

MAX_STREAMS = 16
POLL_S = 2.0
TICK_S = 0.1  # how often held lines are looked at
LOOK_S = 0.5  # how often, at most, what changed in the job is looked at
FIRST_PAGE = 32  # pods in the first answer of the pods' list (the head's come first: names sort so)
PROGRESS_S = 2.0  # how often the count of pods still being read is said, while it changes
FINISH_WAIT_S = 2.0  # the open streams' time to end by themselves once the job did
MILESTONE_LINE = re.compile(r"\d+/\d+ Pathways Slices Now Ready|[Ee]lastic|slice .* (lost|back|restored)")
Kind = Literal["log", "event", "milestone"]


@dataclass(frozen=True)
class Entry:
    """One line of the timeline."""

    kind: Kind
    time: str  # RFC 3339 as the server wrote it ("" when it gave none)
    origin: str  # "slice-0/host-1/pathways-worker", "head/jax-main", "event", "job"
    text: str

    def document(self) -> dict[str, Any]:
        return {"kind": self.kind, "time": self.time or None, "origin": self.origin, "text": self.text}


@dataclass(frozen=True)
class Selection:
    """Which containers: None is all of them."""

    component: str | None = None
    slice_index: int | None = None
    host: int | None = None

    def wants(self, pod: Object, container: str) -> bool:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if self.component is not None:
            replicated_job, name = COMPONENTS[self.component]
            if labels.get(ids.REPLICATED_JOB_LABEL) != replicated_job or container != name:
                return False
        if self.slice_index is not None and (
            labels.get(ids.REPLICATED_JOB_LABEL) != ids.WORKER_JOB
            or labels.get(ids.JOB_INDEX_LABEL) != str(self.slice_index)
        ):
            return False
        return self.host is None or (
            labels.get(ids.REPLICATED_JOB_LABEL) == ids.WORKER_JOB
            and labels.get(ids.COMPLETION_INDEX_LABEL) == str(self.host)
        )


def origin_of(pod: Object, container: str) -> str:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    attempt = labels.get(ids.RESTART_ATTEMPT_LABEL)
    again = f"@{attempt}" if attempt not in (None, "0") else ""
    if labels.get(ids.REPLICATED_JOB_LABEL) == ids.WORKER_JOB:
        where = f"slice-{labels.get(ids.JOB_INDEX_LABEL)}/host-{labels.get(ids.COMPLETION_INDEX_LABEL)}"
        return f"{where}/{container}{again}"
    return f"head/{container}{again}"


def rank_of(pod: Object, index: int) -> tuple[int, int, int, int]:
    """The order containers are read in: the head's first, then the workers by slice and host."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    worker = labels.get(ids.REPLICATED_JOB_LABEL) == ids.WORKER_JOB
    return int(worker), _number(labels.get(ids.JOB_INDEX_LABEL)), _number(labels.get(ids.COMPLETION_INDEX_LABEL)), index


def _number(value: object) -> int:
    text = str(value or "")
    return int(text) if text.isdigit() and len(text) <= 9 else 1 << 30


class Timeline:
    """Follows one job: ``entries`` gives each Entry as it goes out, until the job ends (or, without ``follow``,
    once every container was read), and ``end`` then says how; ``run`` calls ``emit`` with each."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        emit: Callable[[Entry], None] | None = None,
        *,
        selection: Selection = Selection(),
        follow: bool = True,
        max_streams: int = MAX_STREAMS,
        poll: float = POLL_S,
        window: float = WINDOW_S,
        on_progress: Callable[[str], None] | None = None,
        jobset: Object | None = None,
    ) -> None:
        self.kube, self.namespace, self.name, self.selection = kube, namespace, name, selection
        self.following, self.on_progress = follow, on_progress
        self.emit = emit
        self.given: deque[Entry] = deque()  # released by the reordering window, not yet handed out
        self.out: Interleave[Entry] = Interleave(self.given.append, window=window)
        self.end: str | None = None  # how the job ended, once ``entries`` is exhausted
        self.readers = Readers(kube, self._line, self._job_line, follow=follow, max_streams=max_streams, poll=poll)
        self.milestones = Milestones(name, self._milestone)
        self.sources: dict[tuple[str, str], Source] = {}  # (pod uid, container) -> source
        self.poll = poll
        self.end_line = ""
        self.jobset = jobset  # the JobSet as the caller read it (None: read it first)
        self._said = ("", -PROGRESS_S)
        self._discovered = False  # every pod listed: the count of those still being read is worth saying

    def run(self) -> str:
        """Call ``emit`` with each entry until the job ends: its end (Completed, Failed, deleted); without
        ``follow``, one pass: "now". Entries held when an exception stops it (Ctrl-C) are given to ``emit`` too."""
        assert self.emit is not None, "run needs emit; entries gives them"
        try:
            for entry in self.entries():
                self.emit(entry)
        finally:
            for entry in self.held():
                self.emit(entry)
        assert self.end is not None
        return self.end

    def entries(self) -> Iterator[Entry]:
        """Each entry as the reordering window gives it out, until the job ends (then ``end`` is set: Completed,
        Failed, deleted; without ``follow``, "now"). Stopped early (Ctrl-C, a closed iterator), the reads stop
        and what the window still held is ``held()``."""
        try:
            self.readers.start()
            jobset = self.jobset or js.get_jobset(self.kube, self.namespace, self.name)
            if jobset is None:
                self.end = self._ended("deleted", "the JobSet is gone")
                yield from self._given()
                return
            self.milestones.jobset(jobset)
            self.jobset = jobset
            pods = yield from self._discover()
            jobs = self._jobs_now()
            events = self._events_now()
            if not self.following:
                self.readers.complete()
                while not self.readers.idle():
                    time.sleep(TICK_S)
                    yield from self._ticked()
                self.end = self._ended("now", "")
            else:
                self.end = yield from self._follow(pods, jobs, events)
            yield from self._given()
        finally:
            self.readers.stop()
            self.out.release(everything=True)

    def __iter__(self) -> Iterator[Entry]:
        """``entries``, where an answer of the wrong shape is the API server's ``ApiError`` (``reading_answers``)."""
        with reading_answers(self.kube):
            yield from self.entries()

    def held(self) -> list[Entry]:
        """What was released but not handed out when ``entries`` stopped early (the reads stopped, the window
        emptied), in order."""
        found = list(self.given)
        self.given.clear()
        return found

    def _given(self) -> Iterator[Entry]:
        while self.given:
            yield self.given.popleft()

    def _ticked(self) -> Iterator[Entry]:
        self._tick()
        yield from self._given()

    # ---------------------------------------------------------------------------------------------- discovery

    def _discover(self) -> Generator[Entry, None, tuple[list[Object], str]]:
        """The job's pods, page by page, each page's containers handed to the readers at once (and the lines
        their reads gave meanwhile handed out)."""
        listing = js.pods_listing(self.namespace, self.name)
        versions: list[str] = []
        pods = []
        for pod in self.kube.iter_items(  # a small first page: the readers start on it while the rest comes
            listing.action("list"),
            PODS.path(self.namespace),
            query=listing.query(),
            versions=versions,
            first_page=FIRST_PAGE,
        ):
            pods.append(pod)
            self._pod(pod)
            self.out.release()
            yield from self._given()
        self._discovered = True
        return pods, versions[-1] if versions else ""

    def _jobs_now(self) -> tuple[list[Object], str]:
        """The JobSet's Jobs (whose uids the events of a Job short of pods name)."""
        jobs, version = list_at(self.kube, self._jobs_listing())
        self.milestones.own(owned_uids(self.jobset or {}, jobs, ()))
        return jobs, version

    def _jobs_listing(self) -> Listing:
        return Listing(JOBS, self.namespace, labels=js.pods_listing(self.namespace, self.name).labels)

    def _events_now(self) -> tuple[list[Object], str] | None:
        """The namespace's events now (None without them: events are context, not the core; forbidden, they are
        left out, throttled or failed, said once)."""
        try:
            events, version = list_at(self.kube, Listing(EVENTS, self.namespace))
        except ApiError as exc:
            self._events_unread(exc)
            return None
        self.milestones.events(events)
        return events, version

    def _events_unread(self, exc: BaseException) -> None:
        """Events that cannot be read: forbidden, none; throttled (429 after the retries) or a server error, said
        once; anything else is the timeline's error."""
        status = exc.status if isinstance(exc, ApiError) else None
        if status == 403 or self.milestones.events_unread:
            return
        if not isinstance(exc, ApiError) or (status not in (429,) and (status or 0) < 500):
            raise exc
        self.milestones.events_unread = True
        self._job_line(f"the job's events could not be read ({exc.message}): the timeline goes on without them")

    def _pod(self, pod: Object) -> None:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        uid = str(meta.get("uid") or meta.get("name"))
        containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
        for index, c in enumerate(containers):
            container = str(c.get("name"))
            if (uid, container) in self.sources or not self.selection.wants(pod, container):
                continue
            source = Source(self.namespace, str(meta.get("name")), uid, container, origin_of(pod, container),
                            rank_of(pod, index))  # fmt: skip
            self.sources[(uid, container)] = source
            self.readers.add(source)
        self.milestones.pod(pod)
        self.milestones.own(owned_uids({}, (), [pod]))
        if str((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed") or meta.get("deletionTimestamp"):
            self._finished(uid)

    def _finished(self, uid: str) -> None:
        for (pod_uid, _), source in self.sources.items():
            if pod_uid == uid:
                self.readers.finished(source)

    # ---------------------------------------------------------------------------------------------- following

    def _follow(
        self, pods: tuple[list[Object], str], jobs: tuple[list[Object], str], events: tuple[list[Object], str] | None
    ) -> Generator[Entry, None, str]:
        listings = [
            js.jobset_listing(self.namespace, self.name),
            js.pods_listing(self.namespace, self.name),
            self._jobs_listing(),
        ]
        listed: list[tuple[list[Object], str] | None] = [None, pods if pods[1] else None, jobs]
        if events is not None:
            listings.append(Listing(EVENTS, self.namespace))
            listed.append(events)
        with Mirrors(self.kube, listings, poll=self.poll, listed=listed, optional={3}) as seen:
            changed, looked = False, 0.0
            while True:
                changed = seen.wait(TICK_S, settle=0) or changed
                end = None
                if changed and time.monotonic() - looked >= LOOK_S:  # a look reads every pod: at most so often
                    end, changed, looked = self._look(seen), False, time.monotonic()
                yield from self._ticked()
                if end is not None:
                    break
        self.readers.last_reads(FINISH_WAIT_S)
        yield from self._ticked()
        return self._ended(end, self.end_line)

    def _look(self, seen: Mirrors) -> str | None:
        """What changed: new and ended pods, milestones, events; the job's end, or None."""
        jobsets, pods = seen[0], seen[1]
        if not jobsets:
            self.end_line = "the JobSet is gone"
            return "deleted"
        for pod in sorted(pods, key=lambda p: str(p["metadata"].get("creationTimestamp") or "")):
            self._pod(pod)
        for uid in self.milestones.gone(pods):
            self._finished(uid)
        self.milestones.own(owned_uids(jobsets[0], seen[2], ()))
        if len(seen.mirrors) > 3:
            if seen.mirrors[3].failure is not None:
                self._events_unread(seen.mirrors[3].failure)
            else:
                self.milestones.events(seen[3])
        self.milestones.jobset(jobsets[0])
        state = job_state(jobsets[0])
        if state.phase in TERMINAL:
            self.end_line = f"the job is {state.phase}" + (f" ({state.reason})" if state.reason else "")
            return state.phase
        return None

    # ---------------------------------------------------------------------------------------------- output

    def _line(self, source: Source, stamp: str, text: str) -> None:
        kind: Kind = "milestone" if MILESTONE_LINE.search(text) else "log"
        self._put(Entry(kind, stamp, source.origin, shown(text)))

    def _milestone(self, kind: str, time: str, origin: str, text: str) -> None:  # milestones.Put
        self._put(Entry("event" if kind == "event" else "milestone", time, origin, text))

    def _job_line(self, text: str) -> None:
        self._put(Entry("milestone", "", "job", text))

    def _put(self, entry: Entry) -> None:
        self.out.put(entry, entry.time, len(entry.text))

    def _tick(self) -> None:
        self.out.release()
        if self.on_progress is None or not self._discovered:
            return
        unread, pods = self.readers.unread_pods()
        said, at = self._said
        text = f"{unread} of {pods} pods still being read" if unread else ""
        if text != said and (time.monotonic() - at >= PROGRESS_S or not text):
            if text or said:
                self.on_progress(text or f"read the logs of {pods} pods")
            self._said = (text, time.monotonic())

    def _ended(self, end: str, line: str) -> str:
        """Give out what is held, then how the job ended (after the lines the reads gave before the end)."""
        self.out.release(everything=True)
        if line:
            self._job_line(line)
            self.out.release(everything=True)
        return end


def format_entry(entry: Entry, *, timestamps: bool) -> str:
    """The text line of an entry: ``[origin] text``, with the time first when asked."""
    marker = {"log": "", "event": "event ", "milestone": "== "}[entry.kind]
    stamp = f"{entry.time or '-'} " if timestamps else ""
    return f"{stamp}[{entry.origin}] {marker}{entry.text}"
