"""What `local run` says when something asked for did not happen: a fault that was never injected, a --resume
with nothing to resume. Each is one line naming the flag and what to do; the run's exit status is unchanged."""

from __future__ import annotations

import signal
from pathlib import Path

from pwdeploy.local.restarts import Faults
from pwdeploy.local.runner import Ended
from pwdeploy.local.transfers import Seen, Transfers

STEP_DONE = "runtime.step_done(step)"


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
    fired_by_step = first.status == 128 + signal.SIGKILL and first.killed_after is None and first.evicted is None
    if faults.fail_at_step is not None and not fired_by_step:
        lines.append(
            f"--fail-at-step {faults.fail_at_step} never fired: attempt 0 {how} without reaching "
            f"runtime.step_done({faults.fail_at_step}), so no restart was tested; the job runs fewer steps, or "
            "never calls pwdeploy.runtime.step_done(step) after each step"
        )
    if faults.evicts and first.evicted is None:
        when = (
            f"before {faults.evict_after:g} s"
            if faults.evict_at_step is None
            else f"without reaching runtime.step_done({faults.evict_at_step})"
        )
        lines.append(
            f"{faults.flags()} never fired: attempt 0 {how} {when}, so no eviction was tested; evict it sooner, or "
            "call pwdeploy.runtime.step_done(step) after each step"
        )
    return lines


def nothing_to_resume(checkpoints: Path | None) -> str | None:
    """Why --resume keeps nothing, or None when there are checkpoints of an earlier run to keep."""
    if checkpoints is None:
        return "--resume has nothing to resume: the job sets no storage.checkpoints (--checkpoint-dir)"
    if not checkpoints.is_dir() or not any(checkpoints.iterdir()):
        return f"--resume has nothing to resume: no earlier run left checkpoints in {checkpoints}; this run starts at 0"
    return None


def probe_notices(found: Transfers | None, seen: Seen, cache: str | None) -> list[str]:
    """What the job's processes showed that the run's figures cannot: a JAX program that never called
    ``runtime.step_done`` (no per-step figures, and why, with the one line to add), and a program whose own
    ``jax_compilation_cache_dir`` overrode the compile cache local run set. Each once per run."""
    lines = []
    if found is None and seen.jax:
        lines.append(
            f"no per-step transfer figures: the program never called pwdeploy.runtime.step_done; add `{STEP_DONE}` "
            "after each training step (`from pwdeploy import runtime`; a no-op on the cluster), which also lets "
            "--fail-at-step and --lose-slice fault the run at a step"
        )
    own = [found_dir for found_dir in seen.cache_dirs if cache is not None and found_dir != cache]
    if own:
        lines.append(
            f"the program set its own compilation cache (jax_compilation_cache_dir {', '.join(own)}), which "
            f"overrides local run's {cache} (--compile-cache): its compiled steps are cached there"
        )
    return lines
