"""Restarts in `local run`, as the JobSet does them, and the faults that prove a job survives them.

On the cluster, when a pod of the job fails the JobSet recreates every pod (``failurePolicy.maxRestarts``
times at most) and the program starts again from the top, with the attempt number in the pods' label
``jobset.sigs.k8s.io/restart-attempt`` (which the manifests pass on as ``PWDEPLOY_RESTART_ATTEMPT``). Here the
job's process tree is started again from scratch when it dies (a non-zero exit or a signal), up to
``scheduling.max_restarts`` times, with the same environment plus ``PWDEPLOY_RESTART_ATTEMPT`` = 0, 1, ...
A stop asked of pwdeploy (Ctrl-C, SIGTERM) ends the run without a restart.
"""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pwdeploy import identifiers as ids
from pwdeploy.local.runner import STOP_GRACE_SECONDS, Ended, Watch, run_child, stop_signals
from pwdeploy.local.tree import LEFTOVER_GRACE_SECONDS


@dataclass(frozen=True)
class Faults:
    """Faults injected on attempt 0 only, so that the restart that follows can be watched recovering."""

    fail_at_step: int | None = None  # PWDEPLOY_FAIL_AT_STEP: runtime.step_done(N) SIGKILLs the job's tree
    kill_after: float | None = None  # local run SIGKILLs the job's tree after this many seconds

    def flags(self) -> str:
        """The flags that set these faults, as a user typed them (empty: none)."""
        named = [("--fail-at-step", self.fail_at_step), ("--kill-after", self.kill_after)]
        return " ".join(f"{flag} {value:g}" for flag, value in named if value is not None)


def attempt_env(env: Mapping[str, str], attempt: int, faults: Faults) -> dict[str, str]:
    """The environment of attempt ``attempt``: the job's, plus the attempt number and, on attempt 0, the fault."""
    result = {k: v for k, v in env.items() if k != ids.FAIL_AT_STEP_ENV}
    result[ids.RESTART_ATTEMPT_ENV] = str(attempt)
    if attempt == 0 and faults.fail_at_step is not None:
        result[ids.FAIL_AT_STEP_ENV] = str(faults.fail_at_step)
    return result


def cause(ended: Ended, attempt: int, faults: Faults) -> str:
    """Why an attempt ended, naming --fail-at-step where it was the likely killer (SIGKILL on attempt 0)."""
    by_step = attempt == 0 and faults.fail_at_step is not None and ended.killed_after is None
    if by_step and ended.returncode == -signal.SIGKILL:
        return f"{ended.cause()} at --fail-at-step {faults.fail_at_step}"
    return ended.cause()


def restart_line(ended: Ended, attempt: int, max_restarts: int, faults: Faults = Faults()) -> str:
    """The one stderr line a restart gets: which attempt ended, why, and which one starts."""
    return (
        f"pwdeploy local: attempt {attempt} {cause(ended, attempt, faults)}; restarting from scratch as attempt "
        f"{attempt + 1} "
        f"(restart {attempt + 1} of scheduling.max_restarts {max_restarts})"
    )


def run_attempts(
    command: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    max_restarts: int,
    faults: Faults = Faults(),
    watch: Watch | None = None,
    say: Callable[[str], None] = print,
    stop_grace: float = STOP_GRACE_SECONDS,
    leftover_grace: float = LEFTOVER_GRACE_SECONDS,
) -> list[Ended]:
    """Run the job, restarting it after each death while restarts are left; how each attempt ended, in order.

    ``stop_grace``: seconds the main process gets to end after pwdeploy passed it a stop signal; ``leftover_grace``:
    seconds the rest of the tree gets after SIGTERM once the main process has ended.
    """
    attempts: list[Ended] = []
    with stop_signals() as stops:
        for attempt in range(max_restarts + 1):
            if attempt > 0 and stops.received:  # a stop between two attempts ends the run: no restart after Ctrl-C
                attempts[-1] = dataclasses.replace(attempts[-1], stopped_by=stops.received[0])
                break
            kill_after = faults.kill_after if attempt == 0 else None
            ended = run_child(command, cwd=cwd, env=attempt_env(env, attempt, faults), watch=watch, stops=stops,
                              kill_after=kill_after, stop_grace=stop_grace, leftover_grace=leftover_grace)  # fmt: skip
            attempts.append(ended)
            if not ended.failed or attempt == max_restarts:
                break
            say(restart_line(ended, attempt, max_restarts, faults))
    return attempts


def exhausted_hint(attempts: list[Ended], max_restarts: int, faults: Faults) -> str | None:
    """When the injected fault killed the job (SIGKILL on attempt 0, the only one that gets it) and no restart
    was left: what to raise (else None: a job that died of something else dies of its own cause)."""
    last = attempts[-1]
    if len(attempts) > 1 or not faults.flags() or not last.failed or last.returncode != -signal.SIGKILL:
        return None
    why = cause(attempts[-1], len(attempts) - 1, faults)
    return (
        f"the job died ({why}) after {faults.flags()} with no restart left: a run that injects a fault needs a "
        f"restart to recover; raise scheduling.max_restarts (--max-restarts N, now {max_restarts})"
    )
