"""What a local run gives back once the job has ended: the typed result (``LocalRun``), the summary line (limits,
attempts, clean-up), how it ended, the transfers per training step the job's process measured, and the JSON summary
(``local run --summary-json``). Lines are told, never printed: the caller decides where they go."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pwdeploy.config import JobConfig
    from pwdeploy.local.limits import Usage
    from pwdeploy.local.runner import Ended
    from pwdeploy.local.transfers import Transfers

Say = Callable[[str], None]  # one line for the user (the CLI writes it on stderr)

# The transfer keys of the JSON summary, null when the program never reported a step (runtime.step_done).
UNMEASURED = ("host_to_device_bytes_per_step", "device_to_host_bytes_per_step", "host_syncs_per_step")


@dataclass(frozen=True)
class LocalRun:
    """How a local run went: the facts its summary line and ``--summary-json`` give, and where its outputs are."""

    exit_status: int  # the last attempt's, as the command exits (128 + N when pwdeploy was stopped by signal N)
    attempts: int
    restarts: int  # JobSet restarts: a slice lost and restored in the job's process is not one, nor a requeue
    command: tuple[str, ...]
    cwd: Path
    devices: int  # emulated CPU devices
    outputs: Mapping[str, Path]  # "checkpoints", "profiles" (storage.<name>'s local stand-in), where the job has one
    hlo_dir: Path | None  # where the HLO dumps went (None: the job dumps none)
    compile_cache: str | None  # the compile cache the run used (a folder or gs:// URI; None: off)
    stopped_by: int | None = None  # the signal that stopped pwdeploy (SIGINT, SIGTERM, SIGHUP), else None
    ending: str | None = None  # how it ended, when that is worth a line (a failure, a stop), as the CLI says it
    peaks: Usage | None = None  # memory, /dev/shm and processes at their highest (None: limits not sampled)
    limits_exceeded: tuple[str, ...] = ()  # main.memory or main.shm_size overrun (the cluster would kill it)
    transfers: Transfers | None = None  # per training step, as the job's process measured (runtime.step_done)
    elastic_events: tuple[dict[str, Any], ...] = field(default=())  # slice losses and returns the job reported
    requeues: int = 0  # runs Kueue started again after an eviction (--evict-by kueue): not restarts
    replaced: int = 0  # runs the head Job started again in a new pod (an eviction with DisruptionTarget)

    @property
    def ok(self) -> bool:
        return self.exit_status == 0 and not self.limits_exceeded

    @property
    def checkpoints(self) -> Path | None:
        """The folder standing in for storage.checkpoints (None: the job has no checkpoints)."""
        return self.outputs.get("checkpoints")

    @property
    def profiles(self) -> Path | None:
        """The folder standing in for storage.profiles (None: the job writes no profiles)."""
        return self.outputs.get("profiles")

    def summary(self) -> dict[str, Any]:
        """The JSON summary (``--summary-json``): attempts, restarts, requeues and replaced pods, exit status,
        elastic events, the peaks when sampled, and the per-step transfers (null when unmeasured)."""
        from pwdeploy.local.elastic import run_summary
        from pwdeploy.local.transfers import warning

        summary = run_summary(self.attempts, self.exit_status, list(self.elastic_events), restarts=self.restarts)
        summary |= {"requeues": self.requeues, "replaced": self.replaced}
        if self.peaks is not None:
            summary |= {"peak_memory_bytes": self.peaks.memory_bytes, "peak_shm_bytes": self.peaks.shm_bytes}
            summary["peak_children"] = self.peaks.children
        found = self.transfers
        summary |= found.as_json() if found is not None else dict.fromkeys(UNMEASURED)
        summary["transfer_warning"] = warning(found) if found is not None else None
        return summary


def report_transfers(found: Transfers | None, say: Say) -> None:
    """The per-step transfers the job's process measured (and a warning over the limit)."""
    from pwdeploy.local.limits import human
    from pwdeploy.local.transfers import warning

    if found is None:  # measured only in a program that calls runtime.step_done
        return
    say(
        f"pwdeploy local: per training step ({found.steps} measured): "
        f"{human(found.host_to_device_bytes_per_step)} host-to-device, "
        f"{human(found.device_to_host_bytes_per_step)} device-to-host, {found.host_syncs_per_step:.2f} host syncs"
    )
    if (text := warning(found)) is not None:
        say(f"warning: {text}")


def write_summary(path: Path, run: LocalRun, say: Say) -> None:
    """The JSON summary in ``path``; a file that cannot be written is a warning, not a failed run."""
    try:
        path.write_text(json.dumps(run.summary(), indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        say(f"warning: cannot write --summary-json {path}: {exc.strerror or exc}")


def how_it_ended(last: Ended, hint: str | None) -> str | None:
    if last.stopped_by == signal.SIGINT:
        return "the job was interrupted"
    if last.stopped_by is not None:
        return f"the job was stopped ({signal.Signals(last.stopped_by).name} to pwdeploy)"
    if hint is not None:
        return hint
    return f"the job exited with status {last.status}" if last.status != 0 else None


def summary_line(usage: Usage | None, attempts: list[Ended], job: JobConfig, *, cores: int) -> str:
    """The one line after a run: the limits (when sampled), then the attempts and what was cleaned up."""
    from pwdeploy.local.limits import summary
    from pwdeploy.runtime import cgroup_cpus

    removed = sum(len(ended.shm_removed) for ended in attempts)
    left_alone = sum(ended.shm_left_alone for ended in attempts)
    leftovers = sum(ended.leftovers for ended in attempts)
    shm = (
        "its private /dev/shm went with it"
        if all(ended.private_shm for ended in attempts)
        else f"removed {removed} file{'' if removed == 1 else 's'} it left in /dev/shm"
    )
    tail = (
        f"{len(attempts)} attempt{'' if len(attempts) == 1 else 's'}; ended {leftovers} "
        f"process{'' if leftovers == 1 else 'es'} the job left running; {shm}"
    )
    if left_alone:
        tail += f" ({left_alone} more new there that nobody holds left alone: other programs use /dev/shm too)"
    if usage is None:
        return f"pwdeploy local: {tail}"
    if not usage.samples:  # never "peak memory 0 B" for a job nobody measured
        return f"pwdeploy local: memory and /dev/shm not sampled (the job's namespace could not be read); {tail}"
    return f"{summary(usage, job, cpus=cgroup_cpus() or cores)}; {tail}"
