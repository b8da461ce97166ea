"""The timeline's reads of its containers' logs, bounded in concurrency and in requests.

One pass (``logs --all``): ``max_streams`` readers take the containers in turn, the head's first, then the
workers by slice and host, and read each log once (at most ``READ_LIMIT_BYTES``; a longer one is said to be cut).
Lines go out as they are read, so the first lines come within moments whatever the job's size.

Following (``logs --all -f``): ``max_streams`` readers each follow one container at a time (a stream that drops is
opened again from where it got, ``log_reads.Position``), the head's first; the containers beyond them are read in
turn by one poller, each at most every ``poll`` seconds and ``POLLS_PER_S`` reads a second in all (a container whose
pod ended is read first), so a 1,024-pod job costs ``max_streams`` streams and at most ``POLLS_PER_S`` requests a
second, not a request per container every few seconds. When the job ends, every container not yet read to its end
is read once more.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pwdeploy.cluster.log_reads import LogRead, Position, Read
from pwdeploy.kube.seam import ApiError, Kube, SystemClock
from pwdeploy.kube.throttle import Limit, Throttle

READ_LIMIT_BYTES = 16 * 2**20  # of one container's log in one pass
POLL_LIMIT_BYTES = 4 * 2**20  # of one poll; a poll cut there that gave nothing asks for more, up to:
POLL_MAX_BYTES = 64 * 2**20  # beyond this a second's lines are skipped, and said
POLLS_PER_S = 10.0  # the poller's own budget, within the connection's rate limit
MAX_DROPS = 5  # streams opened in a row that gave nothing before a container is left to the poller
SystemTime = time.monotonic


def size_text(size: int) -> str:
    return f"{size // 2**20} MiB" if size >= 2**20 else f"{size} bytes"


@dataclass
class Source:
    """One container of one pod, and where its reading got to."""

    namespace: str
    pod: str
    uid: str
    container: str
    origin: str
    rank: tuple[int, int, int, int]  # the head first, then by slice and host, then the containers' order
    position: Position = field(default_factory=Position)
    finished: bool = False  # its pod ended or is gone: its next read to the end is its last
    done: bool = False  # read to its end (or gone)
    streaming: bool = False
    urgent: bool = False  # read next (its pod ended)
    read_at: float = -1e9  # when it was last read (monotonic)
    last: str = ""  # the stamp of the last line given
    limit: int = 0  # the next poll's limitBytes (0: the readers' poll_limit)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    current: LogRead | None = field(default=None, repr=False)


Give = Callable[[Source, str, str], None]  # (source, stamp, text) of a line read
Say = Callable[[str], None]  # a milestone of pwdeploy's own (a log cut, a second skipped)


class Readers:
    """The reads of one timeline; ``add`` sources as they are found, from any thread."""

    def __init__(self, kube: Kube, give: Give, say: Say, *, follow: bool, max_streams: int, poll: float) -> None:
        self.kube, self.give, self.say = kube, give, say
        self.following, self.max_streams, self.poll = follow, max_streams, poll
        self.sources: list[Source] = []
        self._queue: list[tuple[tuple[int, int, int, int], int, Source]] = []  # waiting for a reader, by rank
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._complete = False  # every source was added (one pass: readers end once none is left)
        self._threads: list[threading.Thread] = []
        self._polls = Throttle(Limit(POLLS_PER_S, 1), SystemClock())  # real time: its readers' own pace
        self.poll_limit = POLL_LIMIT_BYTES

    # ---------------------------------------------------------------------------------------- the caller's side

    def start(self) -> None:
        for _ in range(self.max_streams):
            self._spawn(self._stream_loop if self.following else self._pass_loop)
        if self.following:
            self._spawn(self._poll_loop)

    def add(self, source: Source) -> None:
        with self._changed:
            self.sources.append(source)
            heapq.heappush(self._queue, (source.rank, len(self.sources), source))
            self._changed.notify_all()

    def complete(self) -> None:
        """Every source was added: in one pass, the readers end once each is read."""
        with self._changed:
            self._complete = True
            self._changed.notify_all()

    def finished(self, source: Source) -> None:
        """Its pod ended or is gone: read it to its end next."""
        with self._changed:
            if not source.finished:
                source.finished = source.urgent = True
                self._changed.notify_all()

    def unread_pods(self) -> tuple[int, int]:
        """(pods with a container not read yet, pods): in one pass, not read to its end; following, never read."""
        with self._changed:
            pods: dict[str, bool] = {}
            for s in self.sources:
                unread = not s.done if not self.following else s.read_at < 0 and not s.done
                pods[s.uid] = pods.get(s.uid, False) or unread
        return sum(pods.values()), len(pods)

    def idle(self) -> bool:
        with self._changed:
            return all(s.done for s in self.sources)

    def last_reads(self, grace: float) -> None:
        """The job ended: streams get ``grace`` seconds to end by themselves, then every container not read to its
        end is read once more (``max_streams`` at a time), and the readers stop."""
        with self._changed:
            for s in self.sources:
                s.finished = True
            self._changed.notify_all()
        deadline = SystemTime() + grace
        while SystemTime() < deadline and any(s.streaming for s in self.sources):
            time.sleep(0.05)
        self.stop()
        self._stop.clear()
        self.following, self._complete = False, True
        with self._changed:
            self._queue = [(s.rank, i, s) for i, s in enumerate(self.sources) if not s.done]
            heapq.heapify(self._queue)
        self._threads = []
        for _ in range(max(1, self.max_streams)):
            self._spawn(self._pass_loop)
        for thread in self._threads:
            thread.join()

    def stop(self) -> None:
        self._stop.set()
        with self._changed:
            self._changed.notify_all()
            reads = [s.current for s in self.sources if s.current is not None]
        for read in reads:
            read.stop()
        for thread in self._threads:
            thread.join(5.0)

    # ---------------------------------------------------------------------------------------- the readers

    def _spawn(self, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, daemon=True, name="pwdeploy-log")
        self._threads.append(thread)
        thread.start()

    def _take(self, streaming: bool) -> Source | None:
        """The best waiting source (None once stopped, or, in one pass, once none is left)."""
        with self._changed:
            while not self._stop.is_set():
                while self._queue and (self._queue[0][2].done or self._queue[0][2].streaming):
                    heapq.heappop(self._queue)
                if self._queue:
                    source = heapq.heappop(self._queue)[2]
                    source.streaming = streaming
                    return source
                if not self.following and self._complete:
                    return None
                self._changed.wait(1.0)
        return None

    def _pass_loop(self) -> None:
        while (source := self._take(False)) is not None:
            self._read_to_end(source)

    def _read_to_end(self, source: Source) -> None:
        """One read of the whole log left (one pass, or a last read)."""
        read = self._once(source, follow=False, limit=READ_LIMIT_BYTES)
        if read is not None and read.cut:
            self.say(
                f"the log of {source.pod}/{source.container} is longer than {size_text(READ_LIMIT_BYTES)}: "
                "the rest is not shown here (read it with pwdeploy logs)"
            )
        self._tail(source, read)
        source.done = True

    def _stream_loop(self) -> None:
        while (source := self._take(True)) is not None:
            try:
                self._follow(source)
            finally:
                with self._changed:
                    source.streaming = False
                    if not source.done:  # left to the poller
                        heapq.heappush(self._queue, (source.rank, id(source), source))
                    self._changed.notify_all()

    def _follow(self, source: Source) -> None:
        """Follow one container until its pod ended and its stream gave everything, or the timeline stops."""
        drops = 0
        while not self._stop.is_set() and not source.done:
            ended = source.finished
            read = self._once(source, follow=True, limit=None)
            if read is None or self._stop.is_set():
                return
            if ended:  # the stream of a container that had ended gives its whole log and ends
                self._tail(source, read)
                source.done = True
                return
            if source.finished:  # it ended while followed: whatever came after the stream's last line, then done
                self._read_to_end(source)
                return
            drops = 0 if read.given else drops + 1
            if drops >= MAX_DROPS:
                return
            self._stop.wait(min(self.poll * drops, 30.0))

    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            source = self._next_poll()
            if source is None:
                self._stop.wait(min(0.2, self.poll))
                continue
            self._polls.take()
            if self._stop.is_set():
                return
            ended = source.finished
            read = self._once(source, follow=False, limit=source.limit or self.poll_limit)
            if read is not None:
                self._after_poll(source, read, ended)

    def _next_poll(self) -> Source | None:
        """The waiting source most due a poll: ended pods first, then the one read longest ago."""
        now = SystemTime()
        with self._changed:
            waiting = [s for s in self.sources if not s.done and not s.streaming]
        due = [s for s in waiting if s.urgent or now - s.read_at >= self.poll]
        return min(due, key=lambda s: (not s.urgent, s.read_at, s.rank), default=None)

    def _after_poll(self, source: Source, read: Read, ended: bool) -> None:
        source.urgent = False
        if read.cut and read.given == 0:  # a second holds more than a poll may read: ask for more, then skip it
            if (source.limit or self.poll_limit) < POLL_MAX_BYTES:
                source.limit = (source.limit or self.poll_limit) * 4
                source.urgent = True
                return
            source.position.skip_second()
            self.say(f"{source.pod}/{source.container}: one second's lines are over {size_text(POLL_MAX_BYTES)}, "
                     "skipped")  # fmt: skip
        source.limit = 0
        if ended and not read.cut:
            self._tail(source, read)
            source.done = True
        elif ended:
            source.urgent = True

    def _once(self, source: Source, *, follow: bool, limit: int | None) -> Read | None:
        """One read of ``source``; None when it cannot be read now (the pod is gone: done; not started yet)."""
        reader = LogRead(self.kube, source.namespace, source.pod, source.container)
        source.current = reader
        source.read_at = SystemTime()
        try:
            with source.lock:
                return reader.run(source.position, lambda stamp, text: self._given(source, stamp, text),
                                  follow=follow, limit=limit)  # fmt: skip
        except ApiError as exc:
            if exc.status == 404:  # the pod is gone, and its log with it
                source.done = True
            return None  # 400: not started yet; anything else: read again later
        finally:
            source.current = None

    def _given(self, source: Source, stamp: str, text: str) -> None:
        source.last = stamp or source.last
        self.give(source, stamp, text)

    def _tail(self, source: Source, read: Read | None) -> None:
        """A last line without a newline, given once the read was the container's last."""
        if read is not None and read.tail is not None and read.tail.text:
            self.give(source, read.tail.stamp, read.tail.text)
