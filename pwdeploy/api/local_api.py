"""The job on this machine: what `pwdeploy local run` would start (``plan_local``), and the run itself on emulated
CPU devices (``run_local``, with its flags as one ``LocalRunOptions``) (docs/api.md, "The job")."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pwdeploy.api.job_api import PathLike, check_before, given_job, say_to

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TextIO

    from pwdeploy.config.model import JobConfig
    from pwdeploy.local.env import LocalPlan
    from pwdeploy.local.launch import RunOptions, Surroundings
    from pwdeploy.local.outcome import LocalRun


class LocalRunOptions(NamedTuple):
    """How ``run_local`` runs the job: the flags of `pwdeploy local run`, by the same names."""

    check_program: bool = True  # run the program check first (--no-check: False)
    check_limits: bool = True  # sample memory and /dev/shm against main.memory and main.shm_size
    resume: bool = False  # keep the checkpoints an earlier local run left
    fail_at_step: int | None = None  # attempt 0 dies at this step (runtime.step_done)
    kill_after: float | None = None  # attempt 0 is killed after these seconds
    evict_at_step: int | None = None  # attempt 0's head pod is deleted once this step is done (runtime.step_done)
    evict_after: float | None = None  # ... or after these seconds
    evict_by: str | None = None  # what deletes it: "kueue" (None), "delete" or "disruption" (local.eviction.CAUSES)
    lose_slices: Sequence[str] = ()  # "SLICE@STEP": an elastic job loses the slice once the step is done
    restore_slices: Sequence[str] = ()  # "SLICE@STEP": the slice is back
    summary_json: PathLike | None = None  # also write the run's summary there


def plan_local(
    job: JobConfig,
    command: Sequence[str] = (),
    *,
    cwd: PathLike | None = None,
    cores: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> LocalPlan:
    """What ``pwdeploy local run`` would start, without starting it: the command and its folder (``main.command``
    beside the config, or ``command`` in ``cwd``, default the current directory; a leading ``python3`` is this
    Python), the emulated CPU devices and the variables set on top of ``environ`` (default: this process's),
    with the plan's warnings and notes. ``cores`` defaults to the CPU cores this process may use."""
    from pwdeploy import arguments
    from pwdeploy.local.env import plan

    return plan(
        given_job(job),
        arguments.strings(command, "command", "['python3', 'train.py']"),
        cwd=arguments.optional_path(cwd, "cwd") or Path.cwd(),
        cores=_cores(cores),
        environ=_environ(environ),
    )


def run_local(
    job: JobConfig,
    command: Sequence[str] = (),
    options: LocalRunOptions | None = None,
    *,
    cwd: PathLike | None = None,
    config_file: PathLike | None = None,
    cores: int | None = None,
    environ: Mapping[str, str] | None = None,
    progress: TextIO | None = None,
    **flags: Any,
) -> LocalRun:
    """Run the job on emulated CPU devices as ``pwdeploy local run`` does, and return how it went: the exit
    status, attempts and restarts, where the checkpoints, profiles and HLO dumps went, the peaks and the per-step
    transfers. ``command`` and ``cwd`` as for ``plan_local``; ``options`` are the command's flags
    (``LocalRunOptions``); ``config_file`` lets the program check's findings point at the config's lines. The
    job's own output goes where this process's stdout and stderr go; pwdeploy's lines (the plan's warnings, the
    program check's findings, each failed attempt, the summary) go to ``progress`` (default: nowhere).
    ``LocalRunOptions``' fields given as keywords (``resume=True``) are read as before, with a
    ``DeprecationWarning``.

    A job that fails is a result (``exit_status`` not 0), not an exception. Raised: ``ConfigError`` (a headless
    job, a bad argument), ``LocalRunError`` (the command cannot start, a checkpoint folder another run holds, slice
    events that never happened in a run that succeeded) and ``LocalLimitsError`` (a run that succeeded went over
    main.memory or main.shm_size: the cluster would have killed it).
    """
    from pwdeploy import arguments
    from pwdeploy.local.launch import run_local as launch

    job = given_job(job)
    command = arguments.strings(command, "command", "['python3', 'train.py']")
    chosen = _options(options, flags)
    around = _surroundings(cwd, cores, environ, say_to(progress))
    given = arguments.optional_path(config_file, "config_file")
    checker = _program_check(job, bool(command), given, around.say) if chosen.check_program else None
    return launch(job, command, around, _run_options(chosen), check_program=checker)


def _surroundings(
    cwd: PathLike | None, cores: int | None, environ: Mapping[str, str] | None, say: Callable[[str], None]
) -> Surroundings:
    """Where the run happens and where its lines go, from a caller's arguments (each checked)."""
    from pwdeploy import arguments
    from pwdeploy.local.launch import Surroundings

    return Surroundings(
        cwd=arguments.optional_path(cwd, "cwd") or Path.cwd(),
        cores=_cores(cores),
        environ=_environ(environ),
        say=say,
    )


def _program_check(
    job: JobConfig, own_command: bool, config_file: Path | None, say: Callable[[str], None]
) -> Callable[[LocalPlan], list[str]]:
    """The program check a local run makes of its plan: the rules of its error findings, each finding said."""

    def program_check(local_plan: LocalPlan) -> list[str]:
        ran = local_plan.command if own_command else ()
        report = check_before(job, say, config_file=config_file, command=ran, cwd=local_plan.cwd)
        return [finding.id for finding in report.errors]

    return program_check


def _options(options: object, flags: Mapping[str, Any]) -> LocalRunOptions:
    """The caller's options; the flags given as keywords (the signature before ``LocalRunOptions``) on top."""
    import warnings

    from pwdeploy.arguments import a_kind
    from pwdeploy.errors import ArgumentError

    if options is not None and not isinstance(options, LocalRunOptions):
        raise ArgumentError("options", f"must be a LocalRunOptions, not {a_kind(options)}")
    chosen = options or LocalRunOptions()
    unknown = sorted(set(flags) - set(LocalRunOptions._fields))
    if unknown:
        raise ArgumentError(unknown[0], "is not an argument of run_local", hint=f"valid: {LocalRunOptions._fields}")
    if flags:
        warnings.warn(
            f"run_local({', '.join(f'{k}=...' for k in flags)}) is deprecated: pass options=LocalRunOptions(...)",
            DeprecationWarning,
            stacklevel=3,
        )
    return chosen._replace(**flags)


def _run_options(options: LocalRunOptions) -> RunOptions:
    """The room's options from the caller's, each checked for its kind."""
    from pwdeploy import arguments
    from pwdeploy.local.launch import RunOptions
    from pwdeploy.local.restarts import Faults

    return RunOptions(
        check_limits=options.check_limits,
        resume=options.resume,
        faults=Faults(
            fail_at_step=arguments.optional_whole(options.fail_at_step, "fail_at_step", 1),
            kill_after=arguments.seconds(options.kill_after, "kill_after"),
            evict_at_step=arguments.optional_whole(options.evict_at_step, "evict_at_step", 1),
            evict_after=arguments.seconds(options.evict_after, "evict_after"),
            evict_by=_evicted_by(options),
        ),
        lose_slice=arguments.strings(options.lose_slices, "lose_slices", "['1@40']"),
        restore_slice=arguments.strings(options.restore_slices, "restore_slices", "['1@80']"),
        summary_json=arguments.optional_path(options.summary_json, "summary_json"),
    )


def _evicted_by(options: LocalRunOptions) -> str:
    """``evict_by`` checked: a row of ``pwdeploy.local.eviction.CAUSES`` (None: a Kueue eviction), for the one
    eviction (not two, nor none) asked for."""
    from pwdeploy import arguments
    from pwdeploy.errors import ArgumentError
    from pwdeploy.local.eviction import CAUSES

    if options.evict_at_step is not None and options.evict_after is not None:
        raise ArgumentError("evict_after", "give one of evict_at_step and evict_after: one eviction a run")
    if options.evict_by is None:
        return "kueue"
    cause = arguments.text(options.evict_by, "evict_by")
    if cause not in CAUSES:
        raise ArgumentError("evict_by", f"{cause!r} is not a cause of eviction; valid: {', '.join(CAUSES)}")
    if options.evict_at_step is None and options.evict_after is None:
        raise ArgumentError(
            "evict_by",
            f"{cause!r} says what deletes the head pod in an eviction, and no eviction is asked for",
            hint="give `evict_at_step` or `evict_after` too",
        )
    return cause


def _cores(cores: object) -> int:
    from pwdeploy import arguments

    return len(os.sched_getaffinity(0)) if cores is None else arguments.whole(cores, "cores", 1)


def _environ(environ: object) -> Mapping[str, str]:
    from pwdeploy import arguments

    checked = arguments.environment(environ, "environ")
    return os.environ if checked is None else checked
