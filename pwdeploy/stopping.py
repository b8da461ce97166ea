"""A job's program stopping in time when its container is stopped: a last checkpoint on SIGTERM within the grace
period, then the exit code that requeues or restarts the job instead of failing it (docs/restarts.md, "Saving on
SIGTERM"). Job-side, standard library only; ``pwdeploy.runtime.stop_on_sigterm`` is the entry point.

When the kubelet stops a container it sends SIGTERM to the container's first process and SIGKILL once
``terminationGracePeriodSeconds`` is over (kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go
``killContainer``). A program killed by that SIGKILL exits 137, which the head's podFailurePolicy fails the JobSet
on; 143 (or 75) leaves the JobSet to Kueue's requeue or to a restart. So the handler here does not save from inside
the signal handler (it may run in the middle of a step, between any two bytecodes): it notes the request, and the
training loop saves at its next step boundary and calls ``exit()``. Should the loop not get there in time, a timer
exits with the same code ``margin`` seconds before the SIGKILL would come, so that the job is still requeued or
restarted from its previous checkpoint rather than failed. A handler also makes SIGTERM reach a program that is PID 1
of its container (a JobSet rendered without ``shareProcessNamespace``): the kernel delivers a signal from outside the
namespace to its init only when init handles it (pid_namespaces(7)).

``step_faults`` is `local run`'s side of the stops it injects at a step (runtime.step_done): ``--evict-at-step``
(an eviction from outside) and ``--fail-at-step`` (a lost slice's SIGKILL).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from types import FrameType
from typing import NoReturn

from pwdeploy import identifiers as ids

DEFAULT_GRACE_SECONDS = 30.0  # Kubernetes' default terminationGracePeriodSeconds
# The timer exits this long before the kubelet's SIGKILL, by default: a tenth of the grace period, at most 3 s.
MARGIN_SECONDS = 3.0
MARGIN_SHARE = 0.1
EVICT_WAIT_SECONDS = 10.0  # how long a step waits for local run's eviction (it polls its flag every 50 ms)
SENT = ".sent"  # local run marks the eviction's SIGTERM sent: <flag>.sent
KILLED_EXIT_CODE = 128 + signal.SIGKILL  # what the SIGKILL at the end of the grace period makes of the program


class Stop:
    """The stop the kubelet asked for, once SIGTERM came: ``requested`` at a step boundary, then save and
    ``exit()``."""

    def __init__(
        self, exit_code: int, grace: float, margin: float, *, say: Callable[[str], None], clock: Callable[[], float]
    ) -> None:
        self.exit_code = exit_code
        self.grace = grace  # seconds from the SIGTERM to the SIGKILL, as the pod gives them
        self.margin = margin
        self.received_at: float | None = None  # clock() when SIGTERM came
        self._say = say
        self._clock = clock
        self._timer: threading.Timer | None = None

    @property
    def requested(self) -> bool:
        """SIGTERM came: save what must survive, then ``exit()``."""
        return self.received_at is not None

    def seconds_left(self) -> float | None:
        """Seconds until the timer exits the program by itself (None: no SIGTERM yet): a save that takes longer
        should not start."""
        if self.received_at is None:
            return None
        return max(0.0, self.received_at + self.deadline - self._clock())

    @property
    def deadline(self) -> float:
        """Seconds after the SIGTERM at which the timer exits the program: the grace period less the margin."""
        return max(0.0, self.grace - self.margin)

    def exit(self) -> NoReturn:
        """End the program with ``exit_code`` (a SystemExit: ``finally`` blocks and atexit handlers run)."""
        raise SystemExit(self.exit_code)

    def handle(self, _signum: int, _frame: FrameType | None) -> None:
        if self.received_at is not None:  # a second SIGTERM changes nothing: the timer is set
            return
        self.received_at = self._clock()
        self._say(
            f"pwdeploy.runtime: SIGTERM: the job is being stopped; saving at the next step boundary, then exiting "
            f"{self.exit_code} (at the latest in {self.deadline:g} s, before the grace period of {self.grace:g} s "
            "ends in SIGKILL)"
        )
        self._timer = threading.Timer(self.deadline, self._out_of_time)
        self._timer.daemon = True
        self._timer.start()

    def _out_of_time(self) -> None:
        self._say(
            f"pwdeploy.runtime: no step boundary reached within {self.deadline:g} s of SIGTERM: exiting "
            f"{self.exit_code} without the last checkpoint (the job resumes from the one before)"
        )
        os._exit(self.exit_code)

    def cancel(self) -> None:
        """Stop the timer (tests, or a program that restores the previous handler)."""
        if self._timer is not None:
            self._timer.cancel()


def grace_seconds(environ: Mapping[str, str] | None = None) -> float:
    """The pod's grace period: ``PWDEPLOY_TERMINATION_GRACE_SECONDS`` (scheduling.termination_grace_seconds, set
    on the cluster and by `local run`), else Kubernetes' default."""
    value = (os.environ if environ is None else environ).get(ids.TERMINATION_GRACE_ENV, "").strip()
    if not value:
        return DEFAULT_GRACE_SECONDS
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"{ids.TERMINATION_GRACE_ENV}={value!r} is not a number of seconds") from None
    if seconds < 0:
        raise ValueError(f"{ids.TERMINATION_GRACE_ENV}={value!r} must be 0 or more")
    return seconds


def install(
    exit_code: int = ids.STOPPED_EXIT_CODE,
    *,
    margin: float | None = None,
    environ: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Stop:
    """A ``Stop`` whose handler is now SIGTERM's (from the main thread only, as signal.signal requires)."""
    if exit_code == KILLED_EXIT_CODE or not 1 <= exit_code <= 255:  # 0 completes the job, 137 fails it
        raise ValueError(
            f"exit_code {exit_code}: a stopped job must exit {ids.STOPPED_EXIT_CODE} (or {ids.RETRY_EXIT_CODE}, or a "
            "code of scheduling.retry_exit_codes), which requeues or restarts it; 0 would complete it and 137 fails it"
        )
    grace = grace_seconds(environ)
    margin = min(MARGIN_SECONDS, grace * MARGIN_SHARE) if margin is None else margin
    stop = Stop(exit_code, grace, margin, say=_say, clock=clock)
    signal.signal(signal.SIGTERM, stop.handle)
    return stop


def _say(line: str) -> None:
    """One line on stderr, written at once (from a signal handler or the timer's thread)."""
    with contextlib.suppress(OSError):
        os.write(2, (line + "\n").encode("utf-8", "replace"))


def step_faults(step: int, env: Mapping[str, str], *, first_attempt: bool) -> None:
    """`local run`'s faults at a step (runtime.step_done): ``--evict-at-step N`` tells local run, once step N is
    done, to evict the job (the flag file it watches; it then sends SIGTERM from outside as the kubelet does);
    ``--fail-at-step N`` kills the job's whole process group with SIGKILL there, as a lost slice would end it, on
    the first attempt only (no clean-up runs; `local run` starts the job in a process group of its own)."""
    evict_at = _whole(env, ids.EVICT_AT_STEP_ENV)
    flag = env.get(ids.EVICT_FLAG_ENV, "")
    if evict_at is not None and step >= evict_at and flag:
        try:
            with open(flag, "x", encoding="ascii") as made:  # once: only the first step past N makes it
                made.write(f"{step}\n")
        except FileExistsError:
            pass
        else:
            _said(f"pwdeploy.runtime: step {step} reached {ids.EVICT_AT_STEP_ENV}={evict_at}: local run evicts the job")
            _until_sent(flag)
    fail_at = _whole(env, ids.FAIL_AT_STEP_ENV)
    if fail_at is None or not first_attempt or step < fail_at:
        return
    _said(f"pwdeploy.runtime: step {step} reached {ids.FAIL_AT_STEP_ENV}={fail_at}: SIGKILL to the job")
    with contextlib.suppress(ProcessLookupError):  # a group of PID 1 alone: nothing the kernel lets it signal
        os.killpg(os.getpgrp(), signal.SIGKILL)
    # Still here: this process is PID 1 of its namespace (a head pod that does not share it), which the kernel
    # shields from a SIGKILL sent from inside (pid_namespaces(7)). Its children are gone; end it as 137.
    os._exit(KILLED_EXIT_CODE)


def _until_sent(flag: str) -> None:
    """Wait at the step until local run says it sent the SIGTERM (``<flag>.sent``; at most EVICT_WAIT_SECONDS): the
    eviction comes at the step asked for, not a few steps on, however fast the steps are. A handler has run by then;
    a program without one is gone, unless it is PID 1 of its namespace, which the kernel shields."""
    deadline = time.monotonic() + EVICT_WAIT_SECONDS
    while not os.path.exists(flag + SENT) and time.monotonic() < deadline:
        time.sleep(0.01)


def _whole(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not a whole number") from None


def _said(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
