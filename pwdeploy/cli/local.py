"""`pwdeploy local run` and `pwdeploy local env`: the job on emulated CPU devices, without Pathways."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from pwdeploy.cli.options import job_from_params, job_options, pop_job_params, seam
from pwdeploy.config import JobConfig
from pwdeploy.errors import LocalLimitsError
from pwdeploy.local.env import LOCAL_OUTPUTS, LocalPlan, gcs_cache_supported, plan, without_compile_cache

_COMMAND = click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND...]")
_NO_INTERSPERSED = {"allow_interspersed_args": False}


@click.group()
def local() -> None:
    """Run a job locally on emulated CPU devices (no Pathways, no TPU)."""


def _cores() -> int:
    """The CPU cores this process may use; a caller may pass the count in the click context (``obj["cores"]``)."""
    cores: int | None = seam("cores")
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
@_COMMAND
def run(command: tuple[str, ...], no_limits_check: bool, **params: Any) -> int:
    """Run the job's command with JAX on CPU, emulating the target's devices.

    The config's main.command runs in the config file's directory; a COMMAND after -- runs in the current
    directory instead. A leading python/python3 runs with the interpreter pwdeploy runs under. The job's
    exit status, stdout and stderr pass through.

    While the job runs, its process tree's memory and /dev/shm use are sampled; a job that used more than
    main.memory or main.shm_size (it would be killed on the cluster) exits 8, even when it succeeded.
    """
    from pwdeploy.local.runner import check_startable, run_child

    job, local_plan = _plan(params, command)
    _show_plan_messages(local_plan)
    check_startable(local_plan.command, cwd=local_plan.cwd, env={**os.environ, **local_plan.env})  # before any dir
    local_plan = _usable_gcs_cache(local_plan)
    child_env = {**os.environ, **local_plan.env}
    _prepare_dirs(local_plan)
    click.echo(
        f"pwdeploy local: {local_plan.devices} CPU devices, in {local_plan.cwd}: {shlex.join(local_plan.command)}",
        err=True,
    )
    if no_limits_check:
        status = run_child(local_plan.command, cwd=local_plan.cwd, env=child_env)
    else:
        status = _run_checked(local_plan, child_env, job)
    if status == 130:
        click.echo("pwdeploy local: the job was interrupted", err=True)
    elif status != 0:
        click.echo(f"pwdeploy local: the job exited with status {status}", err=True)
    return status


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


def _run_checked(local_plan: LocalPlan, child_env: dict[str, str], job: JobConfig) -> int:
    """Run the job with its process tree sampled; then the summary line, and LimitsExceeded if it went over."""
    from pwdeploy.local.limits import Usage, exceeded, sampled, summary
    from pwdeploy.local.runner import run_child
    from pwdeploy.runtime import cgroup_cpus

    usage = [Usage()]

    @contextmanager
    def watch(pid: int) -> Iterator[Usage]:
        with sampled(pid) as sampling:
            usage[0] = sampling
            yield sampling

    status = run_child(local_plan.command, cwd=local_plan.cwd, env=child_env, watch=watch)
    click.echo(summary(usage[0], job, cpus=cgroup_cpus() or _cores()), err=True)
    problems = exceeded(usage[0], job)
    if problems and status == 0:
        raise LocalLimitsError("; ".join(problems))
    for line in problems:
        click.echo(f"pwdeploy local: {line}", err=True)
    return status


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


def _prepare_dirs(local_plan: LocalPlan) -> None:
    shown = {"HLO dumps": local_plan.hlo_dir} if local_plan.hlo_dir is not None else {}
    shown |= {
        f"{LOCAL_OUTPUTS[name]} (instead of storage.{LOCAL_OUTPUTS[name]})": path
        for name, path in local_plan.outputs.items()
    }
    for what, path in shown.items():
        path.mkdir(parents=True, exist_ok=True)
        click.echo(f"pwdeploy local: {what} go to {path}", err=True)
    cache = local_plan.compile_cache
    if cache is not None and not cache.startswith("gs://"):
        Path(cache).mkdir(parents=True, exist_ok=True)
