"""The end of a local run: its summary line, the transfers per step, the typed result (and ``--summary-json``),
the faults asked for that never fired, how it ended; and what fails a run that succeeded (slice events asked for
that never happened, limits a run went over: the cluster would have killed it)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pwdeploy.config import JobConfig
from pwdeploy.errors import LocalLimitsError, LocalRunError
from pwdeploy.local.env import LOCAL_OUTPUTS, LocalPlan
from pwdeploy.local.outcome import LocalRun, Say, how_it_ended, report_transfers, summary_line, write_summary
from pwdeploy.local.restarts import Faults

if TYPE_CHECKING:
    from pwdeploy.local.limits import Usage
    from pwdeploy.local.runner import Ended
    from pwdeploy.local.transfers import Transfers
    from pwdeploy.local.unshare import Private


class Finishing(NamedTuple):
    """What the end of a run needs of its options and surroundings."""

    say: Say
    cores: int
    faults: Faults
    summary_json: Path | None
    private: Private | None  # the job's own /dev/shm, when it ran in namespaces of its own


def finish(
    job: JobConfig,
    local_plan: LocalPlan,
    attempts: list[Ended],
    usage: Usage | None,
    how: Finishing,
    reports: Path,
    elastic: tuple[Callable[[], list[dict[str, Any]]], int],
) -> LocalRun:
    """The summary line, the transfers, the JSON summary and how it ended; LimitsExceeded if a run that succeeded
    went over a limit, LocalRunError if one never lost the slices it was asked to."""
    from pwdeploy.local.limits import exceeded
    from pwdeploy.local.notices import probe_notices
    from pwdeploy.local.restarts import ending_hint
    from pwdeploy.local.transfers import measured, seen

    say = how.say
    say(summary_line(usage, attempts, job, cores=how.cores))
    read_events, asked = elastic
    found_events = read_events()
    found = measured(reports)
    report_transfers(found, say)
    for line in probe_notices(found, seen(reports), local_plan.compile_cache):
        say(f"pwdeploy local: {line}")
    ending = how_it_ended(attempts[-1], ending_hint(attempts, job.scheduling.max_restarts, how.faults))
    problems = exceeded(usage, job) if usage is not None else []
    result = _result(local_plan, attempts, usage, ending, problems, found, found_events)
    if how.summary_json is not None:
        write_summary(how.summary_json, result, say)
    unfired = _unfired_slice_events(asked, found_events, reports)
    _tell_the_end(job, attempts, usage, how, ending)
    _fail_or_tell(attempts[-1], unfired, problems, say)
    return result


def _fail_or_tell(last: Ended, unfired: str | None, problems: list[str], say: Say) -> None:
    """A run that succeeded fails when slice events asked for never happened, or it went over a limit; a run that
    failed anyway tells them."""
    if unfired is not None and last.status == 0 and last.stopped_by is None:
        raise LocalRunError(unfired, hint="pass a STEP the job reaches, in a program with an elastic loop")
    if unfired is not None and last.stopped_by is None:
        say(f"pwdeploy local: {unfired}")
    if problems and last.status == 0:
        raise LocalLimitsError("; ".join(problems))
    for line in problems:
        say(f"pwdeploy local: {line}")


def _result(
    local_plan: LocalPlan,
    attempts: list[Ended],
    usage: Usage | None,
    ending: str | None,
    problems: list[str],
    found: Transfers | None,
    found_events: list[dict[str, Any]],
) -> LocalRun:
    last = attempts[-1]
    return LocalRun(
        exit_status=last.status,
        attempts=len(attempts),
        restarts=sum(ended.next_run == "restart" for ended in attempts),
        command=local_plan.command,
        cwd=local_plan.cwd,
        devices=local_plan.devices,
        outputs={LOCAL_OUTPUTS[name]: path for name, path in local_plan.outputs.items()},
        hlo_dir=local_plan.hlo_dir,
        compile_cache=local_plan.compile_cache,
        stopped_by=last.stopped_by,
        ending=ending,
        peaks=usage,
        limits_exceeded=tuple(problems),
        transfers=found,
        elastic_events=tuple(found_events),
        requeues=sum(ended.next_run == "requeue" for ended in attempts),
        replaced=sum(ended.next_run == "replace" for ended in attempts),
    )


def _tell_the_end(
    job: JobConfig, attempts: list[Ended], usage: Usage | None, how: Finishing, ending: str | None
) -> None:
    """The faults asked for that never fired, how it ended, and a /dev/shm it filled before it failed."""
    from pwdeploy.local.limits import filled
    from pwdeploy.local.notices import unfired_faults

    last, say, private = attempts[-1], how.say, how.private
    for line in unfired_faults(attempts, how.faults):  # before how it ended: that stays the last line
        say(f"warning: {line}")
    if ending is not None:
        say(f"pwdeploy local: {ending}")
    if private is not None and usage is not None and last.failed and usage.shm_bytes >= filled(private.size):
        say(
            f"pwdeploy local: the job filled its /dev/shm (main.shm_size {job.main.shm_size}) before it failed: "
            "on the cluster it fails alike (ENOSPC on a write, SIGBUS on a mapped page); raise main.shm_size "
            "(--shm-size) or lower main.data_workers"
        )


def _unfired_slice_events(asked: int, found: list[dict[str, Any]], transfers: Path) -> str | None:
    """Why slice losses or returns asked for (--lose-slice, --restore-slice) never happened, or None."""
    from pwdeploy.local.transfers import measured

    missing = asked - len(found)
    if missing <= 0:
        return None
    if measured(transfers) is None:
        why = "the program never called pwdeploy.runtime.step_done(step) after a step, where a loss is emulated"
    else:
        why = (
            "the job ended before the step given, or the program never built runtime.elastic_manager() (a "
            "program that is not elastic: docs/elastic.md)"
        )
    asked_for = "slice losses and returns asked for (--lose-slice, --restore-slice)"
    return f"{missing} of the {asked} {asked_for} never happened: {why}"
