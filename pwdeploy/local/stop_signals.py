"""Stop signals while a local run's job runs: SIGINT (a terminal's Ctrl-C), SIGTERM and SIGHUP sent to pwdeploy are
passed to the job's main process alone, as Kubernetes sends SIGTERM to a container's main process, which gets
``grace`` seconds to end; a second signal, or the grace running out, has the whole tree killed (the run does that:
pwdeploy.local.runner)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STOP_GRACE_SECONDS = 30.0  # Kubernetes' default terminationGracePeriodSeconds


def say_now(line: str) -> None:
    """A line on stderr, written at once: from a signal handler, whatever the main thread was printing."""
    with suppress(OSError):
        os.write(2, (line + "\n").encode("utf-8", "replace"))


@dataclass
class Stops:
    """SIGINT, SIGTERM and SIGHUP received by pwdeploy, and the main process they are passed to."""

    received: list[int] = field(default_factory=list)
    first_at: float | None = None
    child: subprocess.Popen[bytes] | None = None
    clock: Callable[[], float] = time.monotonic  # when the first stop came, and whether its grace is over
    grace: float = STOP_GRACE_SECONDS  # what the job's main process is given after the first, as it is told

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)
        if self.first_at is None:
            self.first_at = self.clock()
            say_now(  # before the job hears of it: what it prints as it stops comes after
                f"pwdeploy local: stopping: {signal.Signals(signum).name} passed to the job's main process, which "
                f"has {self.grace:g} s to end before every process of the job is killed; Ctrl-C again kills them "
                "at once"
            )
            self._pass_on(signum)
        elif len(self.received) == 2:
            say_now(f"pwdeploy local: {signal.Signals(signum).name} again: killing every process of the job")

    def started(self, child: subprocess.Popen[bytes]) -> None:
        """The job's main process started: a stop that arrived before it is passed on now (once: one that
        arrives from here on is passed on by the handler)."""
        pending = self.first_at is not None
        self.child = child
        if pending:
            self._pass_on(self.received[0])

    def ended(self) -> None:
        self.child = None

    def overdue(self, grace: float) -> bool:
        """A second stop signal came, or the first came more than ``grace`` seconds ago."""
        if self.first_at is None:
            return False
        return len(self.received) > 1 or self.clock() - self.first_at >= grace

    def _pass_on(self, signum: int) -> None:
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)


@contextmanager
def stop_signals(grace: float = STOP_GRACE_SECONDS) -> Iterator[Stops]:
    """Installed before the first attempt starts, so that no stop signal finds pwdeploy without its handlers.

    Handled rather than ignored: an ignored signal would stay ignored in the job, a handled one is reset to the
    default at exec.
    """
    stops = Stops(grace=grace)
    if threading.current_thread() is not threading.main_thread():
        # Only the main thread may handle signals (signal.signal raises ValueError elsewhere): a run started from
        # a worker thread (api.run_local under asyncio.to_thread or an executor) leaves them to the program that
        # owns that thread, and its job, in a session of its own, runs until it ends or kill_after.
        yield stops
        return
    # A signal pwdeploy was started ignoring (SIGHUP under nohup, SIGINT in a background job) stays ignored, for
    # the job too: that is what whoever started it asked for.
    handled = [signum for signum in STOP_SIGNALS if signal.getsignal(signum) is not signal.SIG_IGN]
    previous: dict[int, Any] = {signum: signal.signal(signum, stops.handle) for signum in handled}
    try:
        yield stops
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)  # None: set from C
