"""`pwdeploy local run` and `pwdeploy local env`: the job on emulated CPU devices, without Pathways."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from pwdeploy.cli.check import NO_CHECK, run_check
from pwdeploy.cli.local_report import cores, how_it_ended, report_transfers, summary_line
from pwdeploy.cli.options import FILE_PARAM, job_from_params, job_options, pop_job_params
from pwdeploy.cli.output import emit, output_option, shell_join, shell_word
from pwdeploy.config import JobConfig
from pwdeploy.errors import ConfigError, LocalLimitsError, LocalRunError
from pwdeploy.identifiers import CHECKPOINT_DIR_ENV
from pwdeploy.local.env import LOCAL_OUTPUTS, LocalPlan, gcs_cache_supported, plan, without_compile_cache

if TYPE_CHECKING:
    from pwdeploy.local.elastic import SliceEvents
    from pwdeploy.local.limits import Usage
    from pwdeploy.local.namespace import Private
    from pwdeploy.local.restarts import Faults
    from pwdeploy.local.runner import Running
    from pwdeploy.manifests import Manifest

_COMMAND = click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND...]")
_NO_INTERSPERSED = {"allow_interspersed_args": False}


@click.group()
def local() -> None:
    """Run a job locally on emulated CPU devices (no Pathways, no TPU)."""


def _plan(params: dict[str, Any], command: tuple[str, ...]) -> tuple[JobConfig, LocalPlan]:
    job = job_from_params(pop_job_params(params), pin_images=False)  # a local run uses no image
    return job, plan(job, command, cwd=Path.cwd(), cores=cores(), environ=os.environ)


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
@click.option(
    "--lose-slice",
    "lose_slice",
    multiple=True,
    metavar="SLICE@STEP",
    help="Elastic jobs (tpu.elastic_slices > 0): once step STEP is done (runtime.step_done), slice SLICE is lost in "
    "the job's process, as Pathways loses one: reading its arrays fails with the slice-down error the elastic "
    "manager recovers from. Not a restart. Repeatable.",
)
@click.option(
    "--restore-slice",
    "restore_slice",
    multiple=True,
    metavar="SLICE@STEP",
    help="Once step STEP is done, the lost slice SLICE is back and healthy. Repeatable.",
)
@click.option(
    "--summary-json",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Also write the run's summary to FILE as JSON: attempts, restarts, exit_status, elastic_events, peaks, "
    "and per training step the bytes moved host-to-device and device-to-host and the host syncs, as measured in the "
    "job's process.",
)
@NO_CHECK
@_COMMAND
def run(
    command: tuple[str, ...],
    summary_json: Path | None,
    no_check: bool,
    no_limits_check: bool,
    fail_at_step: int | None,
    kill_after: float | None,
    resume: bool,
    lose_slice: tuple[str, ...],
    restore_slice: tuple[str, ...],
    **params: Any,
) -> int:
    """Run the job's command with JAX on CPU, emulating the target's devices.

    The config's main.command runs in the config file's directory; a COMMAND after -- runs in the current
    directory instead. A leading python/python3 runs with the interpreter pwdeploy runs under. The job's
    stdout and stderr pass through; the exit status is the last attempt's.

    A job that dies is restarted from scratch when the JobSet `render` prints for it would restart (its failure
    policy decides, up to scheduling.max_restarts times), with PWDEPLOY_RESTART_ATTEMPT = 0, 1, ...: exit code 75
    (a lost slice) and scheduling.retry_exit_codes restart, any other non-zero exit fails as on the cluster, and
    --fail-at-step and --kill-after stand for a lost slice. Each failed attempt gets one line naming the rule that
    decided. Every process the job starts is ended with it, and the shared-memory files it left in /dev/shm are
    removed. Ctrl-C and SIGTERM go to the job's main process; pwdeploy then exits 130 or 143.

    While the job runs, its process tree's memory and /dev/shm use are sampled; a job that used more than
    main.memory or main.shm_size (it would be killed on the cluster) exits 8, even when it succeeded.
    """
    from pwdeploy.local.elastic import slice_events
    from pwdeploy.local.restarts import Faults, rendered_jobset
    from pwdeploy.local.runner import check_startable
    from pwdeploy.local.transfers import probed

    config_file = params.get(FILE_PARAM)
    job, local_plan = _plan(params, command)
    if job.headless:
        raise ConfigError(
            "headless",
            "a headless job has no program to run (the proxy and resource manager alone, for a notebook), so "
            "`local run` has nothing to run",
            hint="drop --headless (or headless: true in the config) to run main.command locally; a headless job "
            "runs on the cluster: pwdeploy submit, then pwdeploy connect",
        )
    manifest = rendered_jobset(job)  # its failure policy decides the restarts; rendered before anything is made
    events = slice_events(job, local_plan.devices, lose_slice, restore_slice)
    _show_plan_messages(local_plan)
    if not no_check:
        _check_program(job, config_file, local_plan, override=bool(command))
    check_startable(local_plan.command, cwd=local_plan.cwd, env={**os.environ, **local_plan.env})  # before any dir
    local_plan = _usable_gcs_cache(local_plan)
    child_env = {**os.environ, **local_plan.env}
    if resume:
        from pwdeploy.local.notices import nothing_to_resume

        for line in filter(None, [nothing_to_resume(local_plan.outputs.get(CHECKPOINT_DIR_ENV))]):
            click.echo(f"warning: {line}", err=True)
    with _checkpoints_held(local_plan, fresh=not resume):
        _prepare_dirs(local_plan, fresh_checkpoints=not resume)
        click.echo(
            f"pwdeploy local: {local_plan.devices} CPU devices, in {local_plan.cwd}: {shlex.join(local_plan.command)}",
            err=True,
        )
        faults = Faults(fail_at_step=fail_at_step, kill_after=kill_after)
        private = _private_shm(job)
        with _elastic_events(events, child_env) as elastic, probed(child_env) as (probed_env, reports):
            return _run_attempts(
                local_plan,
                probed_env,
                job,
                manifest,
                faults,
                check_limits=not no_limits_check,
                reports=(reports, summary_json),
                elastic=elastic,
                private=private,
            )


@contextmanager
def _elastic_events(
    events: SliceEvents, child_env: dict[str, str]
) -> Iterator[tuple[Callable[[], list[dict[str, Any]]], int]]:
    """Hand the slice events to the job (through a file it reports them in, removed after the run); yield what
    reads them at the run's end, and how many were asked for."""
    import tempfile

    from pwdeploy.local.elastic import read_events

    with tempfile.TemporaryDirectory(prefix="pwdeploy-elastic-") as folder:
        reported = Path(folder) / "events.jsonl"
        if events:
            child_env.update(events.env(reported))

        def reported_events() -> list[dict[str, Any]]:
            return read_events(reported)

        yield reported_events, len(events.losses) + len(events.returns)


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


@local.command("env", context_settings=_NO_INTERSPERSED)
@job_options
@output_option
@_COMMAND
def env(command: tuple[str, ...], output: str, **params: Any) -> None:
    """Print the variables a local run sets, as shell `export` lines, and the command it runs (-o json|yaml: one
    document with cwd, command, devices and env)."""
    _, local_plan = _plan(params, command)
    _show_plan_messages(local_plan)
    if output != "text":
        document = {"cwd": str(local_plan.cwd), "command": list(local_plan.command), "devices": local_plan.devices}
        emit({**document, "env": dict(local_plan.env)}, output)
        return
    for key, value in local_plan.env.items():
        click.echo(f"export {key}={shell_word(value)}")
    click.echo(f"# cd {shell_word(str(local_plan.cwd))} && {shell_join(local_plan.command)}")


def _check_program(job: JobConfig, config_file: Path | None, local_plan: LocalPlan, *, override: bool) -> None:
    """`pwdeploy check` over the program first: the local backend is CPU, not the proxy, so the run goes on,
    saying what would fail on the cluster."""
    report = run_check(job, config_file, local_plan.command if override else (), local_plan.cwd)
    if report.errors:
        rules = ", ".join(dict.fromkeys(f.rule for f in report.errors))
        click.echo(
            f"pwdeploy local: running anyway, but {len(report.errors)} finding(s) above would fail on Pathways "
            f"({rules}); --no-check skips the check",
            err=True,
        )


def _show_plan_messages(local_plan: LocalPlan) -> None:
    for line in local_plan.warnings:
        click.echo(f"warning: {line}", err=True)
    for line in local_plan.notes:
        click.echo(f"note: {line}", err=True)


def _run_attempts(
    local_plan: LocalPlan,
    child_env: dict[str, str],
    job: JobConfig,
    manifest: Manifest,
    faults: Faults,
    *,
    check_limits: bool,
    reports: tuple[Path, Path | None],
    elastic: tuple[Callable[[], list[dict[str, Any]]], int],
    private: Private | None,
) -> int:
    """Run the job with its restarts (each attempt's tree sampled when ``check_limits``); then the summary line,
    how it ended, and LimitsExceeded if any attempt went over a limit."""
    from pwdeploy.local.limits import exceeded, filled, merged, sampled
    from pwdeploy.local.restarts import exhausted_hint, run_attempts

    usages: list[Usage] = []

    @contextmanager
    def watch(running: Running) -> Iterator[Usage]:
        with sampled(running.pid, shm=running.shm, init=running.init) as sampling:
            usages.append(sampling)
            yield sampling

    max_restarts = job.scheduling.max_restarts
    attempts = run_attempts(
        local_plan.command,
        cwd=local_plan.cwd,
        env=child_env,
        manifest=manifest,
        faults=faults,
        watch=watch if check_limits else None,
        say=lambda line: click.echo(line, err=True),
        stop_grace=_stop_grace(job),
        private=private,
    )
    usage = merged(usages) if check_limits else None
    click.echo(summary_line(usage, attempts, job), err=True)
    read_events, asked = elastic
    found_events = read_events()
    report_transfers(reports, usage, attempts, found_events)
    unfired = _unfired_slice_events(asked, found_events, reports[0])
    last = attempts[-1]
    ending = how_it_ended(last, exhausted_hint(attempts, max_restarts, faults))
    from pwdeploy.local.notices import unfired_faults

    for line in unfired_faults(attempts, faults):  # before how it ended: that stays the last line
        click.echo(f"warning: {line}", err=True)
    if ending is not None:
        click.echo(f"pwdeploy local: {ending}", err=True)
    if private is not None and usage is not None and last.failed and usage.shm_bytes >= filled(private.size):
        click.echo(
            f"pwdeploy local: the job filled its /dev/shm (main.shm_size {job.main.shm_size}) before it failed: "
            "on the cluster it fails alike (ENOSPC on a write, SIGBUS on a mapped page); raise main.shm_size "
            "(--shm-size) or lower main.data_workers",
            err=True,
        )
    if unfired is not None and last.status == 0 and last.stopped_by is None:
        raise LocalRunError(unfired, hint="pass a STEP the job reaches, in a program with an elastic loop")
    if unfired is not None and last.stopped_by is None:
        click.echo(f"pwdeploy local: {unfired}", err=True)
    problems = exceeded(usage, job) if usage is not None else []
    if problems and last.status == 0:
        raise LocalLimitsError("; ".join(problems))
    for line in problems:
        click.echo(f"pwdeploy local: {line}", err=True)
    return last.status


def _private_shm(job: JobConfig) -> Private | None:
    """The private /dev/shm of main.shm_size each attempt gets, or None (and one line saying why) where this
    machine cannot give one: the job then uses the machine's, as before."""
    from pwdeploy.local.namespace import Private, available
    from pwdeploy.quantity import parse_quantity

    size = int(parse_quantity(job.main.shm_size, "main.shm_size"))
    why = available(size)
    if why is None:
        return Private(size)
    click.echo(
        f"note: the job uses the machine's /dev/shm, not a private one of main.shm_size ({why}): a private one "
        "needs root or user namespaces (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0)",
        err=True,
    )
    return None


def _stop_grace(job: JobConfig) -> float:
    """What the cluster gives a pod after SIGTERM: scheduling.termination_grace_seconds, else Kubernetes' 30 s."""
    from pwdeploy.local.runner import STOP_GRACE_SECONDS

    seconds = job.scheduling.termination_grace_seconds
    return float(seconds) if seconds is not None else STOP_GRACE_SECONDS


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


@contextmanager
def _checkpoints_held(local_plan: LocalPlan, *, fresh: bool) -> Iterator[None]:
    """The run's checkpoint folder locked against a second local run of the job for as long as this one runs
    (``fresh``: it is to be emptied, which must be possible)."""
    from pwdeploy.local.paths import check_clearable, check_folders, checkpoints_locked

    check_folders(_folders(local_plan))  # all of them before anything is made (the lock file beside one)
    checkpoints = local_plan.outputs.get(CHECKPOINT_DIR_ENV)
    if checkpoints is None:
        yield
        return
    if fresh:
        check_clearable(checkpoints)
    with checkpoints_locked(checkpoints):
        yield


def _folders(local_plan: LocalPlan) -> list[tuple[str, Path]]:
    """The (kind, path) folders a run creates."""
    cache = local_plan.compile_cache
    local_cache = [("compile cache", Path(cache))] if cache is not None and not cache.startswith("gs://") else []
    outputs = [(LOCAL_OUTPUTS[name], path) for name, path in local_plan.outputs.items()]
    hlo = [("HLO dumps", local_plan.hlo_dir)] if local_plan.hlo_dir is not None else []
    return [*hlo, *outputs, *local_cache]


def _prepare_dirs(local_plan: LocalPlan, *, fresh_checkpoints: bool) -> None:
    """Create the local stand-ins; the checkpoint one is emptied first unless the run resumes an earlier one (a
    run that found the last step already saved would train nothing, and prove nothing about its restarts)."""
    from pwdeploy.local.paths import check_folders, clear_checkpoints

    cache = local_plan.compile_cache
    check_folders(_folders(local_plan))  # all of them before any is made
    shown = {"HLO dumps": local_plan.hlo_dir} if local_plan.hlo_dir is not None else {}
    shown |= {
        f"{LOCAL_OUTPUTS[name]} (instead of storage.{LOCAL_OUTPUTS[name]})": path
        for name, path in local_plan.outputs.items()
    }
    checkpoints = local_plan.outputs.get(CHECKPOINT_DIR_ENV)
    for what, path in shown.items():
        note = ""
        if path == checkpoints:
            cleared = fresh_checkpoints and clear_checkpoints(path)
            note = "; an earlier run's were cleared (--resume keeps them)" if cleared else ""
        path.mkdir(parents=True, exist_ok=True)
        click.echo(f"pwdeploy local: {what} go to {path}{note}", err=True)
    if cache is not None and not cache.startswith("gs://"):
        Path(cache).mkdir(parents=True, exist_ok=True)
