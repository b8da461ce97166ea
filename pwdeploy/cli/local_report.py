"""What `pwdeploy local run` says when the job has ended: the summary line (limits, attempts, clean-up), how it
ended, the transfers per training step the job's process measured, and the JSON summary (--summary-json)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from pwdeploy.cli.options import seams

if TYPE_CHECKING:
    from pwdeploy.config import JobConfig
    from pwdeploy.local.limits import Usage
    from pwdeploy.local.runner import Ended
    from pwdeploy.local.transfers import Transfers

# The transfer keys of the JSON summary, null when the program never reported a step (runtime.step_done).
UNMEASURED = ("host_to_device_bytes_per_step", "device_to_host_bytes_per_step", "host_syncs_per_step")


def cores() -> int:
    """The CPU cores this process may use; a caller may pass the count in the click context (``Seams.cores``)."""
    given = seams().cores
    return given if given is not None else len(os.sched_getaffinity(0))


def report_transfers(
    reports: tuple[Path, Path | None], usage: Usage | None, attempts: list[Ended], events: list[dict[str, Any]]
) -> None:
    """The per-step transfers the job's process measured (and a warning over the limit); the JSON summary."""
    from pwdeploy.local.limits import human
    from pwdeploy.local.transfers import measured, warning

    found = measured(reports[0])
    if found is not None:  # measured only in a program that calls runtime.step_done
        click.echo(
            f"pwdeploy local: per training step ({found.steps} measured): "
            f"{human(found.host_to_device_bytes_per_step)} host-to-device, "
            f"{human(found.device_to_host_bytes_per_step)} device-to-host, {found.host_syncs_per_step:.2f} host syncs",
            err=True,
        )
        if (text := warning(found)) is not None:
            click.echo(f"warning: {text}", err=True)
    if reports[1] is not None:
        _write_summary(reports[1], found, usage, attempts, events)


def _write_summary(
    path: Path, found: Transfers | None, usage: Usage | None, attempts: list[Ended], events: list[dict[str, Any]]
) -> None:
    from pwdeploy.local.elastic import run_summary
    from pwdeploy.local.transfers import warning

    summary = run_summary(len(attempts), attempts[-1].status, events)
    if usage is not None:
        summary |= {"peak_memory_bytes": usage.memory_bytes, "peak_shm_bytes": usage.shm_bytes}
        summary["peak_children"] = usage.children
    summary |= found.as_json() if found is not None else dict.fromkeys(UNMEASURED)
    summary["transfer_warning"] = warning(found) if found is not None else None
    try:
        path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        click.echo(f"warning: cannot write --summary-json {path}: {exc.strerror or exc}", err=True)


def how_it_ended(last: Ended, hint: str | None) -> str | None:
    if last.stopped_by == signal.SIGINT:
        return "the job was interrupted"
    if last.stopped_by is not None:
        return f"the job was stopped ({signal.Signals(last.stopped_by).name} to pwdeploy)"
    if hint is not None:
        return hint
    return f"the job exited with status {last.status}" if last.status != 0 else None


def summary_line(usage: Usage | None, attempts: list[Ended], job: JobConfig) -> str:
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
    return f"{summary(usage, job, cpus=cgroup_cpus() or cores())}; {tail}"
