"""The bounds of the Kubernetes API seam (pwdeploy.kube.seam) and the clock it keeps them on: how long one
request, its attempts and a watch's silences may take, how much a list page and a stream chunk hold, and how
failed attempts are retried. Tests give shorter bounds and a fake clock."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import NamedTuple, Protocol

DEFAULT_TIMEOUT = (10.0, 20.0)  # (connect, read) seconds of one attempt
DEFAULT_DEADLINE = 45.0  # seconds one request may take, retries included: a hung server ends the run in bounded time
SLOW_AFTER = 5.0  # seconds after which the user is told what the command is waiting for
LIST_PAGE = 500  # items asked of one list answer: kubectl's --chunk-size default
MAX_PAGES = 10_000  # a server that never stops handing out continue tokens ends the list with an error
MAX_CONTINUE = 16 << 10  # bytes of a continue token (an opaque resourceVersion and key, base64)
STREAM_CHUNK = 65536  # bytes asked of a stream at once (a chunked answer, as a follow is, yields what arrives)


class Clock(Protocol):
    """Time as cluster code sees it: ``now``/``sleep`` for timeouts and polling, ``utc_now`` for ages."""

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    def utc_now(self) -> datetime: ...


class SystemClock:
    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def utc_now(self) -> datetime:
        return datetime.now(UTC)


class RequestLimits(NamedTuple):
    """The bounds of each request (``Kube``'s fields of these names): tests give shorter ones than the real."""

    timeout: tuple[float, float] = DEFAULT_TIMEOUT  # (connect, read) seconds per attempt
    deadline: float = DEFAULT_DEADLINE  # seconds for one request, retries included
    slow_after: float = SLOW_AFTER  # seconds before a request is announced as slow


class RetryPolicy(NamedTuple):
    """Bounded exponential backoff: ``attempts`` tries in all, waits of base, 2 x base, ... capped."""

    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 8.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        backoff = min(self.max_delay, self.base_delay * 2 ** min(attempt - 1, 30))  # no float overflow, ever
        return min(self.max_delay, retry_after) if retry_after is not None else backoff


class WatchBounds(NamedTuple):
    """What one watch's answer may do (pwdeploy.kube.watch): fall silent for ``silence`` seconds (a bookmark comes
    about once a minute: longer is a dead connection), take ``event_wait`` seconds to finish an event it began,
    send an event of ``event_bytes`` (an object is at most 1.5 MiB in etcd: its event a few times that)."""

    silence: float = 90.0
    event_wait: float = 60.0
    event_bytes: int = 8 * 2**20
