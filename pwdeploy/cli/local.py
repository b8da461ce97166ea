"""`pwdeploy local run` and `pwdeploy local env`: the job on emulated CPU devices, without Pathways."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from pwdeploy.cli.options import job_from_params, job_options, pop_job_params, seams
from pwdeploy.config import JobConfig
from pwdeploy.errors import LocalLimitsError
from pwdeploy.identifiers import CHECKPOINT_DIR_ENV
from pwdeploy.local.env import LOCAL_OUTPUTS, LocalPlan, gcs_cache_supported, plan, without_compile_cache

if TYPE_CHECKING:
    from pwdeploy.local.limits import Usage
    from pwdeploy.local.restarts import Faults
    from pwdeploy.local.runner import Ended

_COMMAND = click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND...]")
_NO_INTERSPERSED = {"allow_interspersed_args": False}


@click.group()
def local() -> None:
    """Run a job locally on emulated CPU devices (no Pathways, no TPU)."""


def _cores() -> int:
    """The CPU cores this process may use; a caller may pass the count in the click context (``Seams.cores``)."""
    cores = seams().cores
    return cores if cores is not None else len(os.sched_getaffinity(0))


def _plan(params: dict[str, Any], command: tuple[str, ...]) -> tuple[JobConfig, LocalPlan]:
    job = job_from_params(pop_job_params(params), pin_images=False)  # a local run uses no image
    return job, plan(job, command, cwd=Path.cwd(), cores=_cores(), environ=os.environ)


@local.command("run", context_settings=_NO_INTERSPERSED)
@job_options
@click.option(
    "--no-limits-check",
    is_flag=True,
    help="Do not sample the job's memory and /dev/shm use, nor compare them with main.memory and main.shm_size.",
)
@click.option(
    "--fail-at-step",
    type=click.IntRange(min=1),
    metavar="N",
    help="Fault on attempt 0: runtime.step_done(N) kills the job's whole process group with SIGKILL (sets "
    "PWDEPLOY_FAIL_AT_STEP). Recovering needs scheduling.max_restarts >= 1.",
)
@click.option(
    "--kill-after",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="Fault on attempt 0: SIGKILL the job's whole process tree after SECONDS, from outside. Recovering needs "
    "scheduling.max_restarts >= 1.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Keep the checkpoints an earlier local run left (.pwdeploy/checkpoints), as a resubmitted job reads its "
    "bucket; by default each local run starts with none (its own restarts still resume).",
)
@_COMMAND
def run(
    command: tuple[str, ...],
    no_limits_check: bool,
    fail_at_step: int | None,
    kill_after: float | None,
    resume: bool,
    **params: Any,
) -> int:
    """Run the job's command with JAX on CPU, emulating the target's devices.

    The config's main.command runs in the config file's directory; a COMMAND after -- runs in the current
    directory instead. A leading python/python3 runs with the interpreter pwdeploy runs under. The job's
    stdout and stderr pass through; the exit status is the last attempt's.

    A job that dies (a non-zero exit, a signal) is restarted from scratch, as the JobSet restarts it, up to
    scheduling.max_restarts times (--max-restarts), with PWDEPLOY_RESTART_ATTEMPT = 0, 1, ... Every process the
    job starts is ended with it, and the shared-memory files it left in /dev/shm are removed. Ctrl-C and SIGTERM
    go to the job's main process; pwdeploy then exits 130 or 143.

    While the job runs, its process tree's memory and /dev/shm use are sampled; a job that used more than
    main.memory or main.shm_size (it would be killed on the cluster) exits 8, even when it succeeded.
    """
    from pwdeploy.local.restarts import Faults
    from pwdeploy.local.runner import check_startable

    job, local_plan = _plan(params, command)
    _show_plan_messages(local_plan)
    check_startable(local_plan.command, cwd=local_plan.cwd, env={**os.environ, **local_plan.env})  # before any dir
    local_plan = _usable_gcs_cache(local_plan)
    child_env = {**os.environ, **local_plan.env}
    _prepare_dirs(local_plan, fresh_checkpoints=not resume)
    click.echo(
        f"pwdeploy local: {local_plan.devices} CPU devices, in {local_plan.cwd}: {shlex.join(local_plan.command)}",
        err=True,
    )
    faults = Faults(fail_at_step=fail_at_step, kill_after=kill_after)
    return _run_attempts(local_plan, child_env, job, faults, check_limits=not no_limits_check)


@local.command("env", context_settings=_NO_INTERSPERSED)
@job_options
@_COMMAND
def env(command: tuple[str, ...], **params: Any) -> None:
    """Print the variables a local run sets, as shell `export` lines, and the command it runs."""
    _, local_plan = _plan(params, command)
    _show_plan_messages(local_plan)
    for key, value in local_plan.env.items():
        click.echo(f"export {key}={shlex.quote(value)}")
    click.echo(f"# cd {shlex.quote(str(local_plan.cwd))} && {shlex.join(local_plan.command)}")


def _show_plan_messages(local_plan: LocalPlan) -> None:
    for line in local_plan.warnings:
        click.echo(f"warning: {line}", err=True)
    for line in local_plan.notes:
        click.echo(f"note: {line}", err=True)


def _run_attempts(
    local_plan: LocalPlan, child_env: dict[str, str], job: JobConfig, faults: Faults, *, check_limits: bool
) -> int:
    """Run the job with its restarts (each attempt's tree sampled when ``check_limits``); then the summary line,
    how it ended, and LimitsExceeded if any attempt went over a limit."""
    from pwdeploy.local.limits import exceeded, merged, sampled
    from pwdeploy.local.restarts import exhausted_hint, run_attempts

    usages: list[Usage] = []

    @contextmanager
    def watch(pid: int) -> Iterator[Usage]:
        with sampled(pid) as sampling:
            usages.append(sampling)
            yield sampling

    max_restarts = job.scheduling.max_restarts
    attempts = run_attempts(
        local_plan.command,
        cwd=local_plan.cwd,
        env=child_env,
        max_restarts=max_restarts,
        faults=faults,
        watch=watch if check_limits else None,
        say=lambda line: click.echo(line, err=True),
        stop_grace=_stop_grace(job),
    )
    usage = merged(usages) if check_limits else None
    click.echo(_summary(usage, attempts, job), err=True)
    last = attempts[-1]
    ending = _how_it_ended(last, exhausted_hint(attempts, max_restarts, faults))
    if ending is not None:
        click.echo(f"pwdeploy local: {ending}", err=True)
    problems = exceeded(usage, job) if usage is not None else []
    if problems and last.status == 0:
        raise LocalLimitsError("; ".join(problems))
    for line in problems:
        click.echo(f"pwdeploy local: {line}", err=True)
    return last.status


def _stop_grace(job: JobConfig) -> float:
    """What the cluster gives a pod after SIGTERM: scheduling.termination_grace_seconds, else Kubernetes' 30 s."""
    from pwdeploy.local.runner import STOP_GRACE_SECONDS

    seconds = job.scheduling.termination_grace_seconds
    return float(seconds) if seconds is not None else STOP_GRACE_SECONDS


def _how_it_ended(last: Ended, hint: str | None) -> str | None:
    if last.stopped_by == signal.SIGINT:
        return "the job was interrupted"
    if last.stopped_by is not None:
        return f"the job was stopped ({signal.Signals(last.stopped_by).name} to pwdeploy)"
    if hint is not None:
        return hint
    return f"the job exited with status {last.status}" if last.status != 0 else None


def _summary(usage: Usage | None, attempts: list[Ended], job: JobConfig) -> str:
    """The one line after a run: the limits (when sampled), then the attempts and what was cleaned up."""
    from pwdeploy.local.limits import summary
    from pwdeploy.runtime import cgroup_cpus

    removed = sum(len(ended.shm_removed) for ended in attempts)
    left_alone = sum(ended.shm_left_alone for ended in attempts)
    leftovers = sum(ended.leftovers for ended in attempts)
    tail = (
        f"{len(attempts)} attempt{'' if len(attempts) == 1 else 's'}; ended {leftovers} "
        f"process{'' if leftovers == 1 else 'es'} the job left running; removed {removed} "
        f"file{'' if removed == 1 else 's'} it left in /dev/shm"
    )
    if left_alone:
        tail += f" ({left_alone} more new there that nobody holds left alone: other programs use /dev/shm too)"
    if usage is None:
        return f"pwdeploy local: {tail}"
    return f"{summary(usage, job, cpus=cgroup_cpus() or _cores())}; {tail}"


def _usable_gcs_cache(local_plan: LocalPlan) -> LocalPlan:
    """The plan, with a gs:// compile cache turned off (and why, in one line) when the job could not use it."""
    cache = local_plan.compile_cache
    if cache is None or not cache.startswith("gs://"):
        return local_plan
    if not gcs_cache_supported():  # the plan's warnings said so already
        return without_compile_cache(local_plan)
    from pwdeploy.local.gcs_cache import cache_problem

    problem = cache_problem(cache)
    if problem is None:
        return local_plan
    click.echo(
        f"warning: compile cache {cache} is off for this run: {problem} (--compile-cache DIR keeps a local one)",
        err=True,
    )
    return without_compile_cache(local_plan)


def _prepare_dirs(local_plan: LocalPlan, *, fresh_checkpoints: bool) -> None:
    """Create the local stand-ins; the checkpoint one is emptied first unless the run resumes an earlier one (a
    run that found the last step already saved would train nothing, and prove nothing about its restarts)."""
    shown = {"HLO dumps": local_plan.hlo_dir} if local_plan.hlo_dir is not None else {}
    shown |= {
        f"{LOCAL_OUTPUTS[name]} (instead of storage.{LOCAL_OUTPUTS[name]})": path
        for name, path in local_plan.outputs.items()
    }
    checkpoints = local_plan.outputs.get(CHECKPOINT_DIR_ENV)
    for what, path in shown.items():
        note = ""
        if path == checkpoints:
            cleared = fresh_checkpoints and path.is_dir() and any(path.iterdir())
            if cleared:
                shutil.rmtree(path)
            note = "; an earlier run's were cleared (--resume keeps them)" if cleared else ""
        path.mkdir(parents=True, exist_ok=True)
        click.echo(f"pwdeploy local: {what} go to {path}{note}", err=True)
    cache = local_plan.compile_cache
    if cache is not None and not cache.startswith("gs://"):
        Path(cache).mkdir(parents=True, exist_ok=True)
