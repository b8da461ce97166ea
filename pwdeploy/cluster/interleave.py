"""The timeline's bounded reordering window: entries arrive from many readers at once, each in its own log's order;
``Interleave`` holds each at most ``window`` seconds and gives them out in the order of their timestamps, so that
lines written close together on different hosts come out together, and the first lines come out within the window
of their arrival, not after every log was read.

Each release gives every entry held ``window`` seconds or longer, with every entry stamped no later than the
latest of those (already in order among themselves), in stamp order; an entry that arrives later than the window
with an earlier stamp comes out where it arrives (the window is the bound, not a promise of global order). What is
held is bounded too (``max_held`` entries, ``max_bytes`` of their text): beyond it the earliest stamps go out at
once. An entry without a timestamp (a milestone pwdeploy saw) is stamped with the time it arrived.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Generic, TypeVar

from pwdeploy.cluster.logs import stamp_key

T = TypeVar("T")
WINDOW_S = 0.5
MAX_HELD = 50_000  # entries; each holds at most one line piece (64 KiB), most a few hundred bytes
MAX_HELD_BYTES = 32 * 2**20  # of their text


class Interleave(Generic[T]):
    """A thread-safe window: ``put`` from any thread, ``release`` from the one that writes the output."""

    def __init__(
        self,
        emit: Callable[[T], None],
        *,
        window: float = WINDOW_S,
        max_held: int = MAX_HELD,
        max_bytes: int = MAX_HELD_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.emit, self.window, self.max_held, self.max_bytes, self.clock = emit, window, max_held, max_bytes, clock
        self._heap: list[tuple[str, int, int, T]] = []  # (stamp key, arrival order, size, entry): earliest on top
        self._bytes = 0
        self._arrivals: deque[tuple[float, str, int]] = deque()  # (arrived at, stamp key, order), arrival order
        self._given: set[int] = set()  # orders given out of the heap before their arrival's turn
        self._order = itertools.count()
        self._lock = threading.Lock()

    def put(self, entry: T, stamp: str, size: int = 0) -> None:
        """Hold ``entry`` (``size``: the bytes of its text, counted against ``max_bytes``)."""
        key = stamp_key(stamp) if stamp else _now_stamp()
        with self._lock:
            order = next(self._order)
            heapq.heappush(self._heap, (key, order, size, entry))
            self._arrivals.append((self.clock(), key, order))
            self._bytes += size

    def held(self) -> int:
        with self._lock:
            return len(self._heap)

    def release(self, *, everything: bool = False) -> int:
        """Give out what is due (``everything``: all that is held, at the end); how many entries."""
        with self._lock:
            due = self._due(everything)
        for entry in due:
            self.emit(entry)
        return len(due)

    def _due(self, everything: bool) -> list[T]:
        cutoff = self.clock() - self.window
        latest = ""
        while self._arrivals and (everything or self._arrivals[0][0] <= cutoff):
            _, key, order = self._arrivals.popleft()
            if order in self._given:
                self._given.discard(order)
                continue
            latest = max(latest, key)
        due: list[T] = []
        while self._heap and (everything or self._heap[0][0] <= latest or self._over()):
            key, order, size, entry = heapq.heappop(self._heap)
            self._bytes -= size
            if key > latest:  # given before its arrival's turn (the bound on what is held): skip it there
                self._given.add(order)
            due.append(entry)
        return due

    def _over(self) -> bool:
        return len(self._heap) > self.max_held or self._bytes > self.max_bytes


def _now_stamp() -> str:
    return stamp_key(datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
