"""The job timeline of `pwdeploy logs NAME --all -f`: every container of every pod of the job (or a selection),
each line prefixed with where it came from, interleaved with the job's events and milestones, until the job ends.

How no line is lost or repeated: every log is read with ``timestamps=true``; a source remembers the timestamp of
the last line it gave and how many lines it gave with that very timestamp. A stream that drops is opened again with
``sinceTime`` (whole seconds, so it starts at or before that line) and the lines up to the remembered one are
skipped. A replaced pod is a new source read from its start; a JobSet restart is new pods, so the same.

Bounded concurrency: at most ``max_streams`` follow streams are open at once (one thread each); the sources beyond
that are polled (``sinceTime``, not followed) every ``poll`` seconds, as are the pod and Job lists, the events and
the JobSet, from which the milestones come (pods scheduled, containers ready, native sidecars' from their
initContainerStatuses, restarts, the end). The events shown are those of the objects the job owns, told apart by
uid (pwdeploy.cluster.job_events). Lines of the program that are milestones in themselves (``N/M Pathways Slices
Now Ready``, the elastic manager's) are marked so in JSON.
"""

from __future__ import annotations

import contextlib
import queue
import re
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Literal

from pwdeploy import identifiers as ids
from pwdeploy.cluster import jobsets as js
from pwdeploy.cluster.job_events import about, event_time, owned_uids
from pwdeploy.cluster.jobsets import Object
from pwdeploy.cluster.logs import COMPONENTS, split_stamp, stamp_key
from pwdeploy.cluster.progress import TERMINAL, job_state
from pwdeploy.kube.seam import EVENTS, POD_LOGS, Action, ApiError, Kube

MAX_STREAMS = 16
POLL_S = 2.0
POLL_LIMIT_BYTES = 4 * 2**20  # bytes one poll of one container reads at most (an answer is untrusted input)
MAX_DROPS = 5  # failed opens in a row before a stream is left to the polls
FINISH_WAIT_S = 2.0
STOP_WAIT_S = (
    0.5  # seconds, in all, the streams get to end after Ctrl-C  # seconds the open streams get to end once the job did
)
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


@dataclass
class Source:
    """One container of one pod, and where its reading got to."""

    namespace: str
    pod: str
    uid: str
    container: str
    origin: str
    last_stamp: str = ""  # the last line given, as stamp_key writes it
    at_last: int = 0  # lines given with exactly ``last_stamp``
    done: bool = False
    streaming: bool = False
    unlimited: bool = False  # the next poll reads without limitBytes: a cut poll gave nothing new
    lock: threading.Lock = field(default_factory=threading.Lock)

    def resume(self) -> Resume:
        """Where the next read starts: the lines up to the last one given are skipped."""
        return Resume(self.last_stamp, self.at_last)

    def given(self, stamp: str) -> None:
        stamp = stamp_key(stamp)
        if stamp == self.last_stamp:
            self.at_last += 1
        elif stamp:
            self.last_stamp, self.at_last = stamp, 1

    def query(self, *, follow: bool) -> list[tuple[str, str]]:
        query = [("container", self.container), ("timestamps", "true")]
        if follow:
            query.append(("follow", "true"))
        elif not self.unlimited:
            query.append(("limitBytes", str(POLL_LIMIT_BYTES)))
        if self.last_stamp:
            query.append(("sinceTime", self.last_stamp[:19] + "Z"))
        return query


@dataclass
class Resume:
    """One read of a source: which of its lines were given before it began."""

    stamp: str  # the last timestamp given before this read ("" none)
    count: int  # lines given with exactly that timestamp
    seen: int = 0  # lines of this read with that timestamp so far

    def fresh(self, stamp: str) -> bool:
        """Whether a line with ``stamp`` is new (not one an earlier read gave)."""
        stamp = stamp_key(stamp)
        if not self.stamp or not stamp or stamp > self.stamp:
            return True
        if stamp < self.stamp:
            return False
        self.seen += 1
        return self.seen > self.count


class Timeline:
    """Follows one job; ``run`` calls ``emit`` with each Entry, in the order they arrive, until the job ends (or
    ``follow`` is False: what there is now, once)."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        emit: Callable[[Entry], None],
        *,
        selection: Selection = Selection(),
        follow: bool = True,
        max_streams: int = MAX_STREAMS,
        poll: float = POLL_S,
    ) -> None:
        self.kube, self.namespace, self.name, self.emit = kube, namespace, name, emit
        self.selection, self.following, self.max_streams, self.poll = selection, follow, max_streams, poll
        self.sources: dict[tuple[str, str], Source] = {}  # (pod uid, container) -> source
        self.entries: queue.Queue[Entry | None] = queue.Queue()
        self.events_seen: set[tuple[str, str]] = set()
        self.pod_facts: dict[str, set[str]] = {}
        self.restarts: int | None = None
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.pod_phases: dict[str, str] = {}  # pod uid -> phase, at the last look
        self.owned: frozenset[str] = frozenset()  # uids of the job's objects seen so far: whose events are its
        self.events_unread = False  # said that the events could not be read
        self.end_line = ""  # how the job ended, said after the last lines

    # -------------------------------------------------------------------------------------- the loop

    def run(self) -> str:
        """Follow until the job ends: its end (Completed, Failed, deleted); without ``follow``, one pass: "now"."""
        try:
            while True:
                end = self._look()
                self._drain()
                if end is not None or not self.following:
                    self._finish()
                    if self.end_line:  # last: after the lines the streams gave before the end
                        self._job_line("", self.end_line)
                        self._drain()
                    return end or "now"
                self.kube.clock.sleep(self.poll)
                self._drain()
        finally:
            self.stop.set()
            for thread in self.threads:  # a stream that ends at once closes its connection (others stay daemons)
                thread.join(STOP_WAIT_S / max(1, len(self.threads)))

    def _look(self) -> str | None:
        jobset = js.get_jobset(self.kube, self.namespace, self.name)
        if jobset is None:
            self.end_line = "the JobSet is gone"
            return "deleted"
        self._jobset_milestones(jobset)
        pods = js.list_pods(self.kube, self.namespace, self.name)
        jobs = js.list_jobs(self.kube, self.namespace, self.name)
        self.owned |= owned_uids(jobset, jobs, pods)
        for pod in sorted(pods, key=lambda p: str(p["metadata"].get("creationTimestamp") or "")):
            self._pod_milestones(pod)
            self._add_sources(pod)
        self.pod_phases = {
            str(p["metadata"].get("uid") or p["metadata"].get("name")): str((p.get("status") or {}).get("phase"))
            for p in pods
        }
        names = {str(p["metadata"].get("name")) for p in pods}
        for gone in sorted(n for n in self.pod_facts if n not in names and "gone" not in self.pod_facts[n]):
            self.pod_facts[gone].add("gone")
            self._job_line("", f"pod {gone} is gone (deleted or evicted)")
        self._events()
        for source in list(self.sources.values()):
            if not source.streaming and not source.done:
                self._start_or_poll(source)
        state = job_state(jobset)
        if state.phase in TERMINAL:
            self.end_line = f"the job is {state.phase}" + (f" ({state.reason})" if state.reason else "")
            return state.phase
        return None

    def _finish(self) -> None:
        """A last read of every source, so the lines written just before the end are not lost (the streams are
        given a moment to end first; what they gave is skipped)."""
        self.stop.set()
        deadline = self.kube.clock.now() + FINISH_WAIT_S
        for thread in self.threads:
            thread.join(max(0.0, min(FINISH_WAIT_S, deadline - self.kube.clock.now())))
        for source in list(self.sources.values()):
            if not source.done:
                with source.lock:
                    self._read_now(source)
        self._drain()

    def _drain(self) -> None:
        while True:
            try:
                entry = self.entries.get_nowait()
            except queue.Empty:
                return
            if entry is not None:
                self.emit(entry)

    # -------------------------------------------------------------------------------------- sources

    def _add_sources(self, pod: Object) -> None:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            container = str(c.get("name"))
            key = (str(meta.get("uid") or meta.get("name")), container)
            if key in self.sources or not self.selection.wants(pod, container):
                continue
            self.sources[key] = Source(
                self.namespace, str(meta.get("name")), key[0], container, origin_of(pod, container)
            )

    def _start_or_poll(self, source: Source) -> None:
        streams = sum(1 for s in self.sources.values() if s.streaming)
        if self.following and streams < self.max_streams:
            source.streaming = True
            thread = threading.Thread(target=self._stream, args=(source,), daemon=True)
            self.threads.append(thread)
            thread.start()
        else:
            with source.lock:
                self._read_now(source)

    def _read_now(self, source: Source) -> None:
        """Poll a source once (not followed): the lines since the last one given."""
        try:
            lines = list(self.kube.stream_lines(*self._request(source, follow=False)))
        except ApiError as exc:
            if exc.status == 404:
                source.done = True
            return  # 400: not started yet; anything else: tried again at the next look
        cut = not source.unlimited and sum(len(line.encode()) + 1 for line in lines) >= POLL_LIMIT_BYTES
        if cut:
            lines = lines[:-1]  # cut at limitBytes, perhaps inside its last line: the next poll reads it whole
        # sinceTime has whole seconds: a second holding more than the limit would stall a cut poll for ever, so
        # a cut poll that gave nothing new is followed by one without the limit
        given = self._take(source, [split_stamp(line) for line in lines])
        source.unlimited = cut and given == 0

    def _request(self, source: Source, *, follow: bool) -> tuple[Action, str, list[tuple[str, str]]]:
        return (
            Action("get", POD_LOGS, source.namespace, source.pod),
            POD_LOGS.path(source.namespace, source.pod),
            source.query(follow=follow),
        )

    def _take(self, source: Source, lines: list[tuple[str, str]]) -> int:
        """Give the lines not given before; how many."""
        resume, given = source.resume(), 0
        for stamp, text in lines:
            if resume.fresh(stamp):
                source.given(stamp)
                kind: Kind = "milestone" if MILESTONE_LINE.search(text) else "log"
                self.entries.put(Entry(kind, stamp, source.origin, text))
                given += 1
        return given

    def _stream(self, source: Source) -> None:
        """Follow one container, reconnecting (with sinceTime) when the stream drops, until its pod is gone or
        its container terminated for good, or the timeline stops. A stream that cannot be opened is left to the
        polls (``streaming`` False) until the next look opens it again."""
        drops = 0
        try:
            while not self.stop.is_set() and not source.done:
                try:
                    self._follow_once(source)
                    drops = 0
                except ApiError as exc:
                    if exc.status == 404:
                        source.done = True
                        break
                    drops += 1
                    if drops >= MAX_DROPS:
                        break
                if self._container_finished(source):
                    source.done = True
                    break
                self.stop.wait(min(self.poll * (1 + drops), 30.0))
        finally:
            source.streaming = False

    def _follow_once(self, source: Source) -> None:
        resume = source.resume()
        lines = self.kube.stream_lines(*self._request(source, follow=True))
        with contextlib.closing(lines) if isinstance(lines, Generator) else contextlib.nullcontext():
            for line in lines:
                stamp, text = split_stamp(line)
                with source.lock:
                    if self.stop.is_set():
                        return  # the final read (``_finish``) gives what is left
                    if resume.fresh(stamp):
                        source.given(stamp)
                        kind: Kind = "milestone" if MILESTONE_LINE.search(text) else "log"
                        self.entries.put(Entry(kind, stamp, source.origin, text))

    def _container_finished(self, source: Source) -> bool:
        """Whether the pod is gone, or ended (Succeeded, Failed), at the last look."""
        phase = self.pod_phases.get(source.uid)
        return phase is None or phase in ("Succeeded", "Failed")

    # -------------------------------------------------------------------------------------- milestones

    def _job_line(self, time: str, text: str) -> None:
        self.entries.put(Entry("milestone", time, "job", text))

    def _jobset_milestones(self, jobset: Object) -> None:
        restarts = js.restarts(jobset)
        if self.restarts is not None and restarts > self.restarts:
            self._job_line("", f"restart {restarts}: the JobSet recreates every pod (attempt {restarts})")
        self.restarts = restarts

    def _pod_milestones(self, pod: Object) -> None:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        name = str(meta.get("name"))
        facts = self.pod_facts.setdefault(name, set())
        for cond in status.get("conditions") or []:
            fact = f"{cond.get('type')}={cond.get('status')}"
            if cond.get("status") != "True" or fact in facts:
                continue
            facts.add(fact)
            kind, reason = str(cond.get("type")), str(cond.get("reason") or "")
            if kind == "PodScheduled":
                self._job_line(str(cond.get("lastTransitionTime") or ""), f"pod {name} scheduled")
            elif kind == "DisruptionTarget":
                self._job_line(str(cond.get("lastTransitionTime") or ""), f"pod {name} disrupted ({reason})")
        # native sidecars (the proxy, the resource manager) report in initContainerStatuses
        for c in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
            self._container_milestones(name, c, facts)

    def _container_milestones(self, pod: str, c: dict[str, Any], facts: set[str]) -> None:
        container, restarts = str(c.get("name")), int(c.get("restartCount") or 0)
        if c.get("ready") and f"ready:{container}:{restarts}" not in facts:
            facts.add(f"ready:{container}:{restarts}")
            what = "proxy ready" if container == ids.PROXY_CONTAINER else f"{container} ready"
            self._job_line("", f"pod {pod}: {what}")
        ended = (c.get("state") or {}).get("terminated") or (c.get("lastState") or {}).get("terminated")
        if ended and f"ended:{container}:{ended.get('finishedAt')}" not in facts:
            facts.add(f"ended:{container}:{ended.get('finishedAt')}")
            why = f"exit code {ended.get('exitCode')}" + (f", {ended.get('reason')}" if ended.get("reason") else "")
            self._job_line(str(ended.get("finishedAt") or ""), f"pod {pod}: {container} ended ({why})")

    def _events(self) -> None:
        try:
            events = self.kube.list_items(Action("list", EVENTS, self.namespace), EVENTS.path(self.namespace))
        except ApiError as exc:
            # events are context, not the timeline's core: without the permission there are none, and a list the
            # API server throttles (429 after the retries) or fails is said once and tried again at the next look
            if exc.status not in (403, 429) and (exc.status or 0) < 500:
                raise
            if exc.status != 403 and not self.events_unread:
                self.events_unread = True
                self._job_line("", f"the job's events could not be read ({exc.message}): tried again at each look")
            return
        own = [e for e in events if about(e, self.owned)]
        for event in sorted(own, key=event_time):
            key = (str((event.get("metadata") or {}).get("uid")), str(event.get("count") or ""))
            if key in self.events_seen:
                continue
            self.events_seen.add(key)
            involved = (event.get("involvedObject") or {}).get("name", "")
            text = f"{event.get('type', '')} {event.get('reason', '')} {involved}: {event.get('message', '')}"
            self.entries.put(Entry("event", event_time(event), "event", text))


def format_entry(entry: Entry, *, timestamps: bool) -> str:
    """The text line of an entry: ``[origin] text``, with the time first when asked."""
    marker = {"log": "", "event": "event ", "milestone": "== "}[entry.kind]
    stamp = f"{entry.time or '-'} " if timestamps else ""
    return f"{stamp}[{entry.origin}] {marker}{entry.text}"
