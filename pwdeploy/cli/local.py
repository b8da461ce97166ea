"""`pwdeploy local run` and `pwdeploy local env`: the job on emulated CPU devices, without Pathways."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from pwdeploy.cli.check import NO_CHECK
from pwdeploy.cli.options import FILE_PARAM, JobCommand, job_from_params, job_options, pop_job_params
from pwdeploy.cli.output import emit, output_option, shell_join, shell_word
from pwdeploy.cli.seams import seams

if TYPE_CHECKING:
    from pwdeploy.api import LocalRunOptions

# --evict-by's values: the rows of pwdeploy.local.eviction.CAUSES (not imported here: the CLI starts without it).
EVICTED_BY = ("kueue", "delete", "disruption")
_COMMAND = click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND...]")
_NO_INTERSPERSED = {"allow_interspersed_args": False}


@click.group()
def local() -> None:
    """Run a job locally on emulated CPU devices (no Pathways, no TPU)."""


@local.command("run", cls=JobCommand, context_settings=_NO_INTERSPERSED)
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
    "--evict-at-step",
    type=click.IntRange(min=1),
    metavar="N",
    help="Fault on attempt 0: once runtime.step_done(N) is called, the head pod is deleted as --evict-by says: "
    "SIGTERM to the job's main process from outside, SIGKILL after the rendered head pod's grace period; the "
    "failure policy then decides (requeue, a new pod, a restart, or the end).",
)
@click.option(
    "--evict-after",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="Fault on attempt 0: the same eviction after SECONDS.",
)
@click.option(
    "--evict-by",
    type=click.Choice(sorted(EVICTED_BY)),
    default="kueue",
    show_default=True,
    help="What deletes the head pod: kueue (an eviction or preemption: the JobSet suspended, no DisruptionTarget), "
    "delete (a person deleting the pod: no DisruptionTarget), disruption (a drain, the scheduler's preemption: "
    "DisruptionTarget).",
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
def run(command: tuple[str, ...], **params: Any) -> int:
    """Run the job's command with JAX on CPU, emulating the target's devices.

    The config's main.command runs in the config file's directory; a COMMAND after -- runs in the current
    directory instead. A leading python/python3 runs with the interpreter pwdeploy runs under. The job's
    stdout and stderr pass through; the exit status is the last attempt's.

    A job that dies is restarted from scratch when the JobSet `render` prints for it would restart (its failure
    policy decides, up to scheduling.max_restarts times), with PWDEPLOY_RESTART_ATTEMPT = 0, 1, ...: exit code 75
    (a lost slice) and scheduling.retry_exit_codes restart, any other non-zero exit fails as on the cluster, and
    --fail-at-step and --kill-after stand for a lost slice; --evict-after and --evict-at-step for the head pod
    deleted from outside, which the job's main process sees as the rendered head pod makes it (PID 1 of its
    container, where the kernel drops a SIGTERM it has no handler for, unless the pod shares its process
    namespace). Each failed attempt gets one line naming the rule that decided. Every process the job starts is
    ended with it, and the shared-memory files it left in /dev/shm are removed. Ctrl-C and SIGTERM go to the job's
    main process; pwdeploy then exits 130 or 143.

    While the job runs, its process tree's memory and /dev/shm use are sampled; a job that used more than
    main.memory or main.shm_size (it would be killed on the cluster) exits 8, even when it succeeded.
    """
    from pwdeploy import api

    options = _run_options(params)
    config_file = params.get(FILE_PARAM)
    job = job_from_params(pop_job_params(params), pin_images=False)  # a local run uses no image
    run = api.run_local(
        job, command, options, cwd=Path.cwd(), config_file=config_file, cores=cores(), environ=os.environ,
        progress=sys.stderr,
    )  # fmt: skip
    return run.exit_status


# `local run`'s flags that are LocalRunOptions' fields of the same name.
_RUN_OPTIONS = ("summary_json", "fail_at_step", "kill_after", "evict_at_step", "evict_after", "resume")


def _run_options(params: dict[str, Any]) -> LocalRunOptions:
    """`local run`'s own flags (taken out of ``params``) as the API's options."""
    from pwdeploy import api

    if params["evict_at_step"] is not None and params["evict_after"] is not None:
        raise click.UsageError("give one of --evict-at-step and --evict-after: one eviction a run")
    return api.LocalRunOptions(
        check_program=not params.pop("no_check"),
        check_limits=not params.pop("no_limits_check"),
        lose_slices=params.pop("lose_slice"),
        restore_slices=params.pop("restore_slice"),
        evict_by=_given("evict_by", params.pop("evict_by")),  # alone, it asks for no eviction: the API refuses it
        **{name: params.pop(name) for name in _RUN_OPTIONS},
    )


@local.command("env", cls=JobCommand, context_settings=_NO_INTERSPERSED)
@job_options
@output_option
@_COMMAND
def env(command: tuple[str, ...], output: str, **params: Any) -> None:
    """Print the variables a local run sets, as shell `export` lines, and the command it runs (-o json|yaml: one
    document with cwd, command, devices and env)."""
    from pwdeploy import api
    from pwdeploy.local.launch import plan_messages

    job = job_from_params(pop_job_params(params), pin_images=False)  # a local run uses no image
    local_plan = api.plan_local(job, command, cwd=Path.cwd(), cores=cores(), environ=os.environ)
    for line in plan_messages(local_plan):
        _say(line)
    if output != "text":
        document = {"cwd": str(local_plan.cwd), "command": list(local_plan.command), "devices": local_plan.devices}
        emit({**document, "env": dict(local_plan.env)}, output)
        return
    for key, value in local_plan.env.items():
        click.echo(f"export {key}={shell_word(value)}")
    click.echo(f"# cd {shell_word(str(local_plan.cwd))} && {shell_join(local_plan.command)}")


def _given(param: str, value: str) -> str | None:
    """``value``, or None where the flag was not given (its default stands)."""
    source = click.get_current_context().get_parameter_source(param)
    return None if source is click.core.ParameterSource.DEFAULT else value


def _say(line: str) -> None:
    click.echo(line, err=True)


def cores() -> int:
    """The CPU cores this process may use; a caller may pass the count in the click context (``Seams.cores``)."""
    given = seams().cores
    return given if given is not None else len(os.sched_getaffinity(0))
