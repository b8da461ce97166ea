"""A local run from start to end (`pwdeploy local run`, ``pwdeploy.api.run_local``): plan it, check what can be
checked before anything is made (the config, the command, the folders, the program), make the folders, run the
attempts the JobSet would, and tell how it went.

Nothing here prints: each line for the user goes to ``say`` (the CLI writes it on stderr), and the result is a
``LocalRun``. The program check belongs to a room above this one, so the caller passes it in (``check_program``).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pwdeploy.config import JobConfig
from pwdeploy.errors import ConfigError
from pwdeploy.identifiers import CHECKPOINT_DIR_ENV
from pwdeploy.local.env import LOCAL_OUTPUTS, LOCAL_STATE, LocalPlan, gcs_cache_supported, plan, without_compile_cache
from pwdeploy.local.outcome import LocalRun, Say
from pwdeploy.local.restarts import Faults
from pwdeploy.local.run_end import Finishing, finish

if TYPE_CHECKING:
    from pwdeploy.local.elastic import SliceEvents
    from pwdeploy.local.limits import Usage
    from pwdeploy.local.runner import Ended, Running
    from pwdeploy.local.unshare import Private, Probe
    from pwdeploy.manifests import Manifest

# The program check before the run (`pwdeploy check`, a room above): it tells its findings on the way and returns
# the rule of each finding of severity error, one per finding.
ProgramCheck = Callable[[LocalPlan], Sequence[str]]


@dataclass(frozen=True)
class RunOptions:
    """How to run: the flags of `pwdeploy local run` beyond the job's config."""

    check_limits: bool = True  # sample memory and /dev/shm against main.memory and main.shm_size
    resume: bool = False  # keep the checkpoints an earlier local run left
    faults: Faults = field(default_factory=Faults)  # --fail-at-step, --kill-after, --evict-* (attempt 0 only)
    lose_slice: tuple[str, ...] = ()  # SLICE@STEP
    restore_slice: tuple[str, ...] = ()  # SLICE@STEP
    summary_json: Path | None = None  # also write the JSON summary there


@dataclass(frozen=True)
class Surroundings:
    """What the run takes from where it is started: the folder a command after -- runs in, the CPU cores, the
    environment the job's own goes on top of, and where the lines for the user go."""

    cwd: Path
    cores: int
    environ: Mapping[str, str]
    say: Say


def plan_messages(local_plan: LocalPlan) -> list[str]:
    """The plan's warnings and notes, one line each, as `local run` and `local env` show them."""
    return [f"warning: {line}" for line in local_plan.warnings] + [f"note: {line}" for line in local_plan.notes]


def run_local(
    job: JobConfig,
    command: Sequence[str],
    around: Surroundings,
    options: RunOptions = RunOptions(),
    *,
    check_program: ProgramCheck | None = None,
) -> LocalRun:
    """Run the job (or ``command`` in ``around.cwd`` instead of main.command) on emulated CPU devices, restarted
    as its JobSet would restart it. Raises ConfigError (a headless job, a bad slice event), LocalRunError (the
    command cannot start; slice events asked for never happened in a run that succeeded) and LocalLimitsError (a
    run that succeeded went over main.memory or main.shm_size)."""
    from pwdeploy.local.mtc_stand_in import standing_in
    from pwdeploy.local.transfers import probed

    say = around.say
    local_plan = plan(job, tuple(command), cwd=around.cwd, cores=around.cores, environ=around.environ)
    manifest, events = _first(job, local_plan, options, say)
    with _shm_probe(job) as probe:  # it runs while the program and the folders are checked
        local_plan = _before_the_run(job, local_plan, around, options, check_program)
        child_env = {**around.environ, **local_plan.env}
        with _checkpoints_held(local_plan, fresh=not options.resume), ExitStack() as held:
            _prepare_dirs(local_plan, say, fresh_checkpoints=not options.resume)
            child_env.update(held.enter_context(_gcs_redirected(job, local_plan, say, fresh=not options.resume)))
            command = shlex.join(local_plan.command)
            say(f"pwdeploy local: {local_plan.devices} CPU devices, in {local_plan.cwd}: {command}")
            private = _private_shm(probe, say)
            with (
                standing_in(job, child_env, private, say),  # mtc.enabled: sets PWDEPLOY_MTC_DIR in child_env
                _elastic_events(events, child_env) as elastic,
                probed(child_env) as (probed_env, reports),
            ):
                attempts, usage = _run_attempts(local_plan, probed_env, job, manifest, options, say, private=private)
                how = Finishing(say, around.cores, options.faults, options.summary_json, private)
                return finish(job, local_plan, attempts, usage, how, reports, elastic)


def _first(job: JobConfig, local_plan: LocalPlan, options: RunOptions, say: Say) -> tuple[Manifest, SliceEvents]:
    """Before anything is made: a headless job refused, the rendered JobSet (its failure policy decides the
    restarts), the slice events asked for; then the plan told."""
    from pwdeploy.local.elastic import slice_events
    from pwdeploy.local.restarts import rendered_jobset

    _refuse_headless(job)
    manifest = rendered_jobset(job)
    events = slice_events(job, local_plan.devices, options.lose_slice, options.restore_slice)
    for line in plan_messages(local_plan):
        say(line)
    return manifest, events


def _refuse_headless(job: JobConfig) -> None:
    if job.headless:
        raise ConfigError(
            "headless",
            "a headless job has no program to run (the proxy and resource manager alone, for a notebook), so "
            "`local run` has nothing to run",
            hint="drop --headless (or headless: true in the config) to run main.command locally; a headless job "
            "runs on the cluster: pwdeploy submit, then pwdeploy connect",
        )


def _before_the_run(
    job: JobConfig, local_plan: LocalPlan, around: Surroundings, options: RunOptions, check: ProgramCheck | None
) -> LocalPlan:
    """The program checked, the command startable, what the sidecar's folder shadows and whether a gs:// compile
    cache works here said, and a --resume with nothing to resume told; the plan as it will run."""
    from pwdeploy.local.runner import check_startable
    from pwdeploy.local.sidecar_probe import sidecar_import_warnings

    say = around.say
    if check is not None:
        _check_program(check, local_plan, say)
    check_startable(local_plan.command, cwd=local_plan.cwd, env={**around.environ, **local_plan.env})
    sidecar_import_warnings(job, local_plan.command, {**around.environ, **local_plan.env}, local_plan.cwd, say)
    local_plan = _usable_gcs_cache(local_plan, say)
    if options.resume:
        from pwdeploy.local.notices import nothing_to_resume

        for line in filter(None, [nothing_to_resume(local_plan.outputs.get(CHECKPOINT_DIR_ENV))]):
            say(f"warning: {line}")
    return local_plan


def _check_program(check_program: ProgramCheck, local_plan: LocalPlan, say: Say) -> None:
    """`pwdeploy check` over the program first: the local backend is CPU, not the proxy, so the run goes on,
    saying what would fail on the cluster."""
    errors = list(check_program(local_plan))
    if errors:
        rules = ", ".join(dict.fromkeys(errors))
        say(
            f"pwdeploy local: running anyway, but {len(errors)} finding(s) above would fail on Pathways "
            f"({rules}); --no-check skips the check"
        )


def _run_attempts(
    local_plan: LocalPlan,
    child_env: dict[str, str],
    job: JobConfig,
    manifest: Manifest,
    options: RunOptions,
    say: Say,
    *,
    private: Private | None,
) -> tuple[list[Ended], Usage | None]:
    """Run the job with its restarts, each attempt's tree sampled when ``options.check_limits``; how each ended,
    and the peaks over all of them (None: not sampled)."""
    from pwdeploy.local.limits import merged, sampled
    from pwdeploy.local.restarts import grace_seconds, run_attempts

    usages: list[Usage] = []

    @contextmanager
    def watch(running: Running) -> Iterator[Usage]:
        with sampled(running.pid, shm=running.shm, init=running.init) as sampling:
            usages.append(sampling)
            yield sampling

    attempts = run_attempts(
        local_plan.command,
        cwd=local_plan.cwd,
        env=child_env,
        manifest=manifest,
        faults=options.faults,
        watch=watch if options.check_limits else None,
        say=say,
        stop_grace=grace_seconds(manifest),  # what the rendered head pod gives main after SIGTERM
        private=private,
    )
    return attempts, merged(usages) if options.check_limits else None


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


@contextmanager
def _shm_probe(job: JobConfig) -> Iterator[Probe]:
    """The namespace probe for a private /dev/shm of main.shm_size, started now and asked by ``_private_shm``;
    ended when the block ends, whether it was asked or not."""
    from pwdeploy.local.unshare import Probe
    from pwdeploy.quantity import amount, whole_bytes

    # The bytes the kubelet mounts (rounded up, never 0: a tmpfs of size=0 has no limit at all).
    probe = Probe(whole_bytes(amount(job.main.shm_size, "main.shm_size")))
    try:
        yield probe
    finally:
        probe.close()


def _private_shm(probe: Probe, say: Say) -> Private | None:
    """The private /dev/shm of main.shm_size each attempt gets, or None (and one line saying why) where this
    machine cannot give one (``probe``'s answer): the job then uses the machine's, as before."""
    from pwdeploy.local.unshare import Private

    why = probe.answer()
    if why is None:
        return Private(probe.size)
    say(
        f"note: the job uses the machine's /dev/shm, not a private one of main.shm_size ({why}): a private one "
        "needs root or user namespaces (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0)"
    )
    return None


def _gcs_redirected(
    job: JobConfig, local_plan: LocalPlan, say: Say, *, fresh: bool
) -> AbstractContextManager[dict[str, str]]:
    """The emulator every gs:// the job names goes to (``pwdeploy.local.gcs_redirect``), with a gs:// compile
    cache's bucket: the job's GCS clients all go there once it names one."""
    from pwdeploy.local.gcs_cache import split_uri
    from pwdeploy.local.gcs_redirect import FOLDER, redirected

    cache = local_plan.compile_cache
    buckets = [split_uri(cache)[0]] if cache is not None and cache.startswith("gs://") else []
    folder = (job.base_dir / LOCAL_STATE / FOLDER).resolve()
    return redirected(list(local_plan.gcs), buckets, folder, fresh=fresh, say=say)


def _usable_gcs_cache(local_plan: LocalPlan, say: Say) -> LocalPlan:
    """The plan, with a gs:// compile cache turned off (and why, in one line) when the job could not use it; in
    the local GCS emulator when the job's gs:// goes there (nothing of Google's is asked then)."""
    cache = local_plan.compile_cache
    if cache is None or not cache.startswith("gs://") or local_plan.gcs:
        return local_plan
    if not gcs_cache_supported():  # the plan's warnings said so already
        return without_compile_cache(local_plan)
    from pwdeploy.local.gcs_cache import cache_problem

    problem = cache_problem(cache)
    if problem is None:
        return local_plan
    say(f"warning: compile cache {cache} is off for this run: {problem} (--compile-cache DIR keeps a local one)")
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


def _prepare_dirs(local_plan: LocalPlan, say: Say, *, fresh_checkpoints: bool) -> None:
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
        say(f"pwdeploy local: {what} go to {path}{note}")
    if cache is not None and not cache.startswith("gs://"):
        Path(cache).mkdir(parents=True, exist_ok=True)
