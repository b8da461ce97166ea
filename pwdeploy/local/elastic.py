"""Slice losses in `local run` (``--lose-slice SLICE@STEP``, ``--restore-slice SLICE@STEP``): the one failure that
does not restart the job.

On Pathways with ``tpu.elastic_slices`` (the proxy's ``--num_elastic_slices``), a lost slice does not end the job:
its computations fail with a slice-down error, and a program inside pathwaysutils' ``elastic_retry`` goes on with
the slices it has left, and takes the slice back when it returns. Here the job's own process emulates that at the
steps given (``pwdeploy.slices``, reached through ``runtime.step_done``); this module checks the flags against
the config before anything starts, builds the variables that carry them, and reads back what the job reported.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pwdeploy import identifiers as ids
from pwdeploy.config import JobConfig
from pwdeploy.errors import ConfigError
from pwdeploy.slices import ScheduleError, format_schedule, parse_schedule

MAX_EVENT_LINES = 10_000  # a job reports one line per event: more is not a report of this run


@dataclass(frozen=True)
class SliceEvents:
    """The slice losses and returns to emulate, each ``(slice, step)``, checked against the job's slices."""

    losses: tuple[tuple[int, int], ...] = ()
    returns: tuple[tuple[int, int], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.losses or self.returns)

    def env(self, events_file: Path) -> dict[str, str]:
        """The variables that hand them to the job's process (``runtime.step_done`` applies them)."""
        env = {ids.LOSE_SLICE_ENV: format_schedule(self.losses), ids.ELASTIC_EVENTS_ENV: str(events_file)}
        if self.returns:
            env[ids.RESTORE_SLICE_ENV] = format_schedule(self.returns)
        return env


def slice_events(job: JobConfig, devices: int, lose: Sequence[str], restore: Sequence[str]) -> SliceEvents:
    """The ``--lose-slice`` and ``--restore-slice`` values, checked: ConfigError (exit 2) naming the flag and the fix
    when the job has no elastic slices, a SLICE is not one of its slices, or a loss would leave too few slices."""
    try:
        losses = tuple(pair for value in lose for pair in parse_schedule(value, "--lose-slice"))
        returns = tuple(pair for value in restore for pair in parse_schedule(value, "--restore-slice"))
    except ScheduleError as error:
        raise ConfigError(None, str(error)) from None
    events = SliceEvents(losses, returns)
    if not events:
        return events
    tpu = job.tpu
    if not losses:
        raise ConfigError(
            None, "--restore-slice brings back a slice --lose-slice lost: pass --lose-slice SLICE@STEP too"
        )
    if tpu.elastic_slices == 0:
        raise ConfigError(
            None,
            "--lose-slice needs a job with elastic slices: tpu.elastic_slices is 0, so on the cluster a lost slice "
            "ends the job (use --fail-at-step N to prove a restart)",
            hint="set tpu.elastic_slices (or --elastic-slices N, less than tpu.slices) and wrap the training loop in "
            "pathwaysutils' elastic_retry (docs/elastic.md)",
        )
    for flag, pairs in (("--lose-slice", losses), ("--restore-slice", returns)):
        for slice_index, step in pairs:
            if slice_index >= tpu.slices:
                raise ConfigError(
                    None,
                    f"{flag} {slice_index}@{step}: the job has slices 0 to {tpu.slices - 1} "
                    f"(tpu.slices {tpu.slices}); SLICE is one of them",
                )
    if devices % tpu.slices:
        raise ConfigError(
            None,
            f"--lose-slice: {devices} emulated devices do not split into the {tpu.slices} slices of the target",
            hint=f"pass --devices N with N a multiple of {tpu.slices} (or leave local.devices unset)",
        )
    _check_order(tpu.slices, tpu.elastic_slices, losses, returns)
    return events


def _check_order(
    slices: int, elastic: int, losses: Sequence[tuple[int, int]], returns: Sequence[tuple[int, int]]
) -> None:
    """Replay the events in step order (at one step, returns before losses): each return of a lost slice, each loss
    of an active one, never fewer than ``slices - elastic`` active (below that the manager would wait forever)."""
    timeline = sorted([(step, 0, s) for s, step in returns] + [(step, 1, s) for s, step in losses])
    lost: set[int] = set()
    for step, is_loss, slice_index in timeline:
        if not is_loss:
            if slice_index not in lost:
                raise ConfigError(
                    None, f"--restore-slice {slice_index}@{step}: slice {slice_index} is not lost by then"
                )
            lost.discard(slice_index)
            continue
        if slice_index in lost:
            raise ConfigError(None, f"--lose-slice {slice_index}@{step}: slice {slice_index} is already lost by then")
        lost.add(slice_index)
        if len(lost) > elastic:
            raise ConfigError(
                None,
                f"--lose-slice {slice_index}@{step} would leave {slices - len(lost)} of {slices} slices, fewer than "
                f"tpu.slices - tpu.elastic_slices = {slices - elastic}: the job would wait for a slice that never "
                f"comes back (slices lost then: {sorted(lost)})",
                hint="lose at most tpu.elastic_slices slices at a time (--restore-slice SLICE@STEP brings one back)",
            )


def read_events(path: Path) -> list[dict[str, Any]]:
    """The events the job reported (one JSON object a line), in order; lines that are not such an object are
    skipped: the file is the job's output, read as untrusted."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()[:MAX_EVENT_LINES]
    except OSError:
        return []
    events = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and isinstance(event.get("step"), int):
            events.append(event)
    return events


def run_summary(
    attempts: int, status: int, events: list[dict[str, Any]], *, restarts: int | None = None
) -> dict[str, Any]:
    """The JSON summary of a local run: its attempts, restarts (a slice loss is not one; default: one per attempt
    after the first) and elastic events."""
    counted = attempts - 1 if restarts is None else restarts
    return {"attempts": attempts, "restarts": counted, "exit_status": status, "elastic_events": events}
