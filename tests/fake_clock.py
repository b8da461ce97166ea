"""A clock for code that waits: its sleep only advances time."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta


class FakeClock:
    """A clock whose sleep only advances time (and can act on the world, e.g. a stub's state, via on_sleep).

    It ends: sleeping past ``limit`` simulated seconds fails the test instead of looping for ever.
    """

    START = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)  # utc_now() at t = 1000

    def __init__(self, on_sleep: Callable[[int], None] | None = None, *, limit: float = 3600.0) -> None:
        self.t = 1000.0
        self.sleeps: list[float] = []
        self.on_sleep = on_sleep
        self.limit = limit

    def now(self) -> float:
        return self.t

    def utc_now(self) -> datetime:
        return self.START + timedelta(seconds=self.t - 1000.0)

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds
        if self.t - 1000.0 > self.limit:
            raise AssertionError(f"FakeClock: slept past its limit of {self.limit} s; a loop did not stop")
        if self.on_sleep is not None:
            self.on_sleep(len(self.sleeps))
