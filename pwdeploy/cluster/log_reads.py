"""Reading one container's log for the timeline, bounded: each line at most ``MAX_LINE_BYTES`` held (a longer one,
such as a progress bar redrawn with carriage returns and no newline, is given in pieces of that size, as it comes),
each read at most the ``limitBytes`` it asked for (a server that sends more is cut off there), and where a read
resumes known without holding what was read.

Resuming: every log is read with ``timestamps=true``, and a read that follows one that ended (a dropped stream, the
next poll) asks for ``sinceTime``, the whole second of the last line given (unless that line was stamped more than
a minute ahead of this machine's clock). The API server (the kubelet) then sends, in the log's order, every line
stamped at or after that second: those given before come first, and ``Position`` knows how many they are (it counts
the lines given in each of the last 64 seconds seen), so exactly that many are skipped. So lines stamped before
the line before them (a node clock stepped back) are kept, and so are the lines after one stamped far in the future
(a node clock ahead), which does not move the resume second. What no client can have: a line stamped before the
resume second and written while the stream was down is left out by the server itself (``kubectl logs
--since-time`` loses it too); a clock stepped back across more than 64 seconds of lines repeats some.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from pwdeploy.cluster.logs import split_stamp
from pwdeploy.kube.seam import POD_LOGS, STREAM_CHUNK, Action, Kube

MAX_LINE_BYTES = 64 * 1024  # of one line held at once: longer lines are given in pieces of this size
FUTURE_S = 60.0  # a stamp further ahead of this machine's clock does not move the resume second
MAX_SECONDS = 64  # seconds whose line counts a position keeps: a clock stepped back further repeats lines


def shown(text: str) -> str:
    """What a terminal shows of a line: the part after its last carriage return (a progress bar redrawn in place,
    a carriage return and ``42%|###`` again and again), or the line itself."""
    if "\r" not in text:
        return text
    drawn = [part for part in text.split("\r") if part.strip()]
    return drawn[-1] if drawn else ""


@dataclass
class Position:
    """Where the reading of one container got to: the resume second (that of the last line given, unless that was
    in the future), and how many lines were given in each of the last ``MAX_SECONDS`` seconds seen (a read from the
    resume second sends those at or after it again first)."""

    since: str = ""  # "2026-01-01T00:05:03Z" ("": nothing given yet, read from the start)
    counts: dict[str, int] = field(default_factory=dict)  # "2026-01-01T00:05:03" -> lines given, in order seen

    def given(self, stamp: str, now: datetime) -> None:
        """A whole line stamped ``stamp`` was given (``now``: this machine's clock, for stamps in the future)."""
        second = stamp[:19]
        if not second:
            return
        if second not in self.counts and len(self.counts) >= MAX_SECONDS:
            del self.counts[next(iter(self.counts))]  # the second seen longest ago
        self.counts[second] = self.counts.get(second, 0) + 1
        if second <= (now + timedelta(seconds=FUTURE_S)).strftime("%Y-%m-%dT%H:%M:%S"):
            self.since = second + "Z"  # back too, when the node's clock stepped back: the lines after it are kept

    def sent_again(self) -> int:
        """How many lines a read from ``since`` sends first that were given before."""
        since = self.since[:19]
        return sum(n for second, n in self.counts.items() if second >= since) if since else 0

    def skip_second(self) -> None:
        """Give up on the resume second (more lines than a read may hold): the next read starts a second later."""
        if self.since:
            after = datetime.strptime(self.since, "%Y-%m-%dT%H:%M:%SZ") + timedelta(seconds=1)
            self.since = after.strftime("%Y-%m-%dT%H:%M:%SZ")


class Piece(NamedTuple):
    """A line as read, or a part of one: ``line`` a whole line, ``part`` MAX_LINE_BYTES of a longer line (more of
    it follows), ``tail`` what came after the answer's last newline (a line not ended yet)."""

    kind: str
    stamp: str
    text: str


class Read(NamedTuple):
    """How one read ended: the lines it gave, whether it was ``cut`` at its byte limit (more may follow), and a
    line without a newline at its end (``tail``: given only when the read is the container's last)."""

    given: int
    cut: bool
    tail: Piece | None


def pieces(chunks: Iterator[bytes], limit: int | None) -> Iterator[Piece | int]:
    """The lines of a log answer as ``Piece``s of at most MAX_LINE_BYTES, then (last) the count of bytes read,
    at most ``limit``: bytes beyond it are not read."""
    pending = bytearray()
    stamp, size = "", 0
    for chunk in chunks:
        if limit is not None and size + len(chunk) > limit:
            chunk = chunk[: limit - size]
        size += len(chunk)
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            stop = len(chunk) if end == -1 else end
            room = MAX_LINE_BYTES - len(pending)
            if stop - start > room:  # longer than may be held: give what fills the room, as it comes
                pending += chunk[start : start + room]
                stamp, text = _split(pending, stamp)
                yield Piece("part", stamp, text)
                pending.clear()
                start += room
                continue
            pending += chunk[start:stop]
            start = stop
            if end != -1:
                line_stamp, text = _split(pending, stamp)
                yield Piece("line", line_stamp, text)
                pending.clear()
                stamp, start = "", end + 1
        if limit is not None and size >= limit:
            break
    if pending:
        stamp, text = _split(pending, stamp)
        yield Piece("tail", stamp, text)
    yield size


def _split(data: bytearray, stamp: str) -> tuple[str, str]:
    """(stamp, text) of what is held: the stamp split off a line's start, or the line's stamp for a later part."""
    text = data.decode("utf-8", "replace")
    return (stamp, text) if stamp else split_stamp(text)


class LogRead:
    """One request for a container's log: ``run`` gives its lines to ``give`` and says how it ended. ``stop`` (from
    another thread) shuts its connection, so a follow that waits for a line returns at once."""

    def __init__(self, kube: Kube, namespace: str, pod: str, container: str) -> None:
        self.kube, self.namespace, self.pod, self.container = kube, namespace, pod, container
        self._raw: Any = None
        self._lock = threading.Lock()
        self._stopped = False

    def run(self, position: Position, give: Callable[[str, str], None], *, follow: bool, limit: int | None) -> Read:
        """Read from ``position`` (lines given before skipped), give each new line (``give(stamp, text)``, pieces of
        a long line each), keep ``position`` up to date, and say how it ended."""
        query = [("container", self.container), ("timestamps", "true")]
        query += [("follow", "true")] if follow else []
        query += [("limitBytes", str(limit))] if limit is not None else []
        query += [("sinceTime", position.since)] if position.since else []
        action = Action("get", POD_LOGS, self.namespace, self.pod)
        raw = self.kube.request(action, "GET", POD_LOGS.path(self.namespace, self.pod), query=query, stream=True)
        with self._lock:
            self._raw = raw
            stopped = self._stopped
        if stopped:
            _shut(raw)
        try:
            return _give(raw, position, give, limit, self.kube)
        finally:
            raw.release_conn()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            raw = self._raw
        _shut(raw)


def _give(raw: Any, position: Position, give: Callable[[str, str], None], limit: int | None, kube: Kube) -> Read:
    """Give the lines of a log answer not given before (the first ``position.sent_again()`` at or after its
    resume second are); keep ``position`` up to date."""
    import urllib3

    again, since = position.sent_again(), position.since[:19]
    given, size, tail = 0, 0, None
    in_line = skip = counted = False
    try:
        for piece in pieces(raw.stream(STREAM_CHUNK, decode_content=True), limit):
            if isinstance(piece, int):
                size = piece
            elif piece.kind == "tail":
                tail = piece
            else:
                if not in_line:  # a new line: one given before while ``again`` lasts
                    skip = again > 0 and bool(piece.stamp)
                    counted = skip and piece.stamp[:19] >= since  # before it: a server that ignores sinceTime
                in_line = piece.kind == "part"
                if skip:
                    again -= int(counted and piece.kind == "line")
                    continue
                give(piece.stamp, piece.text)
                if piece.kind == "line":
                    position.given(piece.stamp, kube.clock.utc_now())
                    given += 1
    except (urllib3.exceptions.HTTPError, OSError):
        tail = None  # a stream that broke off: the caller reads again from the position
    cut = limit is not None and size >= limit
    return Read(given, cut, None if cut else tail)  # a cut read's tail is a line the limit cut, not its end


def _shut(raw: Any) -> None:
    from pwdeploy.kube.watch_stream import shut

    shut(raw)
