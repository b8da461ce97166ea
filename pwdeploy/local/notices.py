"""What `local run` says when something asked for did not happen: a fault that was never injected, a --resume
with nothing to resume. Each is one line naming the flag and what to do; the run's exit status is unchanged."""

from __future__ import annotations

import signal
from pathlib import Path

from pwdeploy.local.restarts import Faults
from pwdeploy.local.runner import Ended


def unfired_faults(attempts: list[Ended], faults: Faults) -> list[str]:
    """A line per fault of ``faults`` that did not end attempt 0 (the only attempt that gets one)."""
    first = attempts[0]
    if first.stopped_by is not None:  # stopped on request (Ctrl-C): whether a fault would have fired is unknown
        return []
    lines = []
    how = first.cause()
    if faults.kill_after is not None and first.killed_after is None:
        lines.append(
            f"--kill-after {faults.kill_after:g} never fired: attempt 0 {how} before {faults.kill_after:g} s, so "
            "no restart was tested; pass a shorter --kill-after"
        )
    fired_by_step = first.returncode == -signal.SIGKILL and first.killed_after is None
    if faults.fail_at_step is not None and not fired_by_step:
        lines.append(
            f"--fail-at-step {faults.fail_at_step} never fired: attempt 0 {how} without reaching "
            f"runtime.step_done({faults.fail_at_step}), so no restart was tested; the job runs fewer steps, or "
            "never calls pwdeploy.runtime.step_done(step) after each step"
        )
    return lines


def nothing_to_resume(checkpoints: Path | None) -> str | None:
    """Why --resume keeps nothing, or None when there are checkpoints of an earlier run to keep."""
    if checkpoints is None:
        return "--resume has nothing to resume: the job sets no storage.checkpoints (--checkpoint-dir)"
    if not checkpoints.is_dir() or not any(checkpoints.iterdir()):
        return f"--resume has nothing to resume: no earlier run left checkpoints in {checkpoints}; this run starts at 0"
    return None
