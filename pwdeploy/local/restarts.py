"""Restarts in `local run`, decided by the JobSet's own rules, and the faults that prove a job survives them.

On the cluster, when the JobSet's failure policy restarts it, every pod is recreated and the program starts again
from the top, with the attempt number in the pods' label ``jobset.sigs.k8s.io/restart-attempt`` (which the
manifests pass on as ``PWDEPLOY_RESTART_ATTEMPT``). Here the job's process tree is started again from scratch
when it dies and the JobSet `render` prints for this job would restart (``pwdeploy.manifests.failure_policy``
decides): the program's exit stands for main's in the head pod, so its own non-zero exit fails the run as it
fails the JobSet, and a retry exit code (75, scheduling.retry_exit_codes) restarts it; an injected fault
(``--fail-at-step``, ``--kill-after``) stands for a lost slice, the worker Job failing. An eviction
(``--evict-after``, ``--evict-at-step``: pwdeploy.local.eviction) stands for the head pod deleted from outside;
what follows it is the evaluator's too: a restart, Kueue's requeue or the head Job replacing its pod (the program
starts from the top again, a restart only counting as one), or the end. A stop asked of pwdeploy (Ctrl-C, SIGTERM)
ends the run without a restart.

The job's main process stands as the rendered head pod makes it stand (``main_is_pid_1``): PID 1 of its namespace
when the pod does not share its process namespace, so that a SIGTERM it has no handler for is dropped here as on
the cluster.
"""

from __future__ import annotations

import dataclasses
import functools
import signal
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pwdeploy import identifiers as ids
from pwdeploy.config import JobConfig
from pwdeploy.local.eviction import CAUSES, Eviction, step_env
from pwdeploy.local.runner import Ended, Watch, run_child
from pwdeploy.local.stop_signals import STOP_GRACE_SECONDS, Stops, stop_signals
from pwdeploy.local.tree import LEFTOVER_GRACE_SECONDS
from pwdeploy.local.unshare import Private
from pwdeploy.manifests import Manifest
from pwdeploy.manifests.failure_policy import Action, Decision, PodFailure, decide
from pwdeploy.manifests.head_stop import grace_seconds as grace_seconds  # re-exported: launch reads it here
from pwdeploy.manifests.head_stop import main_is_pid_1
from pwdeploy.manifests.jobset import jobset
from pwdeploy.manifests.lost_slice import slice_lost

LOCAL_IMAGE = "local-run.invalid/unused:0"  # stands in for an image no push pinned yet: images decide no restart


@dataclass(frozen=True)
class Faults:
    """Faults injected on attempt 0 only, so that the restart that follows can be watched recovering."""

    fail_at_step: int | None = None  # PWDEPLOY_FAIL_AT_STEP: runtime.step_done(N) SIGKILLs the job's tree
    kill_after: float | None = None  # local run SIGKILLs the job's tree after this many seconds
    evict_at_step: int | None = None  # PWDEPLOY_EVICT_AT_STEP: the eviction begins once step N is done
    evict_after: float | None = None  # the eviction begins after this many seconds
    evict_by: str = "kueue"  # what evicts the head pod: a row of pwdeploy.local.eviction.CAUSES

    @property
    def evicts(self) -> bool:
        return self.evict_at_step is not None or self.evict_after is not None

    def flags(self) -> str:
        """The flags that set these faults, as a user typed them (empty: none)."""
        named = [
            ("--fail-at-step", self.fail_at_step),
            ("--kill-after", self.kill_after),
            ("--evict-at-step", self.evict_at_step),
            ("--evict-after", self.evict_after),
        ]
        said = " ".join(f"{flag} {value:g}" for flag, value in named if value is not None)
        return said + (f" --evict-by {self.evict_by}" if self.evicts else "")


def attempt_env(
    env: Mapping[str, str], attempt: int, faults: Faults, *, restarts: int | None = None, flag: Path | None = None
) -> dict[str, str]:
    """The environment of attempt ``attempt``: the job's, plus the JobSet's restart attempt (``restarts`` so far;
    default: one per earlier attempt) and, on attempt 0, the faults (``flag``: the file --evict-at-step watches)."""
    faulted = (ids.FAIL_AT_STEP_ENV, ids.EVICT_AT_STEP_ENV, ids.EVICT_FLAG_ENV)
    result = {k: v for k, v in env.items() if k not in faulted}
    result[ids.RESTART_ATTEMPT_ENV] = str(attempt if restarts is None else restarts)
    if attempt == 0 and faults.fail_at_step is not None:
        result[ids.FAIL_AT_STEP_ENV] = str(faults.fail_at_step)
    if attempt == 0 and faults.evict_at_step is not None and flag is not None:
        result.update(step_env(faults.evict_at_step, flag))
    return result


def rendered_jobset(job: JobConfig) -> Manifest:
    """The JobSet `render` prints for ``job``, whose failure policy decides the restarts; a job image or sidecar
    image that no push pinned yet (a local run needs neither) is a placeholder."""
    main = job.main._replace(image=job.main.image or LOCAL_IMAGE)
    sidecar = job.sidecar._replace(image=job.sidecar.image or LOCAL_IMAGE) if job.sidecar.enabled else job.sidecar
    return jobset(job._replace(main=main, sidecar=sidecar))


def injected(ended: Ended, attempt: int, faults: Faults) -> bool:
    """Whether a lost-slice fault killed this attempt: --kill-after did, or SIGKILL on attempt 0 with
    --fail-at-step (137 either way: a main that is PID 1 cannot be SIGKILLed from inside, so it exits 137)."""
    by_step = attempt == 0 and faults.fail_at_step is not None and ended.status == 128 + signal.SIGKILL
    return ended.killed_after is not None or (by_step and ended.evicted is None)


def cause(ended: Ended, attempt: int, faults: Faults) -> str:
    """Why an attempt ended, naming --fail-at-step where it was the likely killer (SIGKILL on attempt 0), and the
    eviction where there was one."""
    if ended.evicted is not None:
        return f"{ended.cause()} after the eviction ({faults.flags()})"
    if injected(ended, attempt, faults) and ended.killed_after is None:
        return f"{ended.cause()} at --fail-at-step {faults.fail_at_step}"
    return ended.cause()


def cluster_failure(manifest: Manifest, ended: Ended, attempt: int, faults: Faults) -> PodFailure:
    """The failure on the cluster a local attempt's death stands for. An injected fault is a lost slice: slice 0's
    worker pod gone with its VM (DisruptionTarget) once its host has used up its failures (backoffLimitPerIndex),
    which fails the slice's Job (on the cluster the program, dying first, exits with the retry code through
    pwdeploy.runtime.retry_on_slice_loss, and restarts alike). Any other death is main's, in the head pod."""
    if ended.evicted is not None:  # the head pod deleted: main's exit, with what the cause sets on the pod
        evicted_by = CAUSES[faults.evict_by]
        how = {"signal": -ended.returncode} if ended.returncode < 0 else {"exit_code": ended.returncode}
        return PodFailure(ids.HEAD_JOB, container=ids.MAIN_CONTAINER, conditions=evicted_by.conditions,
                          suspended=evicted_by.suspends, **how)  # fmt: skip
    if injected(ended, attempt, faults):
        return slice_lost(manifest)
    return PodFailure(ids.HEAD_JOB, exit_code=ended.status, container=ids.MAIN_CONTAINER)


def attempt_line(
    ended: Ended, attempt: int, decision: Decision, faults: Faults = Faults(), *, restarts: int | None = None
) -> str:
    """The one stderr line a failed attempt gets: how it ended, the rule that decided, and what follows
    (``restarts``: the JobSet's restart attempt so far, which a requeue or a replaced pod keeps)."""
    stands = " (a lost slice)" if injected(ended, attempt, faults) else ""
    same = f"not a restart: PWDEPLOY_RESTART_ATTEMPT stays {attempt if restarts is None else restarts}"
    then = {
        Action.REQUEUE: f"requeued: Kueue admits the JobSet again, and attempt {attempt + 1} starts from the top "
        f"({same})",
        Action.NOTHING: f"the head Job replaces its pod: attempt {attempt + 1} starts from the top ({same})",
    }.get(decision.action, f"restarting from scratch as attempt {attempt + 1}" if decision.restarts else "no restart")
    return f"pwdeploy local: attempt {attempt} {cause(ended, attempt, faults)}{stands}; {decision.why}; {then}"


def run_attempts(
    command: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    manifest: Manifest,
    faults: Faults = Faults(),
    watch: Watch | None = None,
    say: Callable[[str], None] = print,
    stop_grace: float = STOP_GRACE_SECONDS,
    leftover_grace: float = LEFTOVER_GRACE_SECONDS,
    private: Private | None = None,
) -> list[Ended]:
    """Run the job, starting it again after each death that the JobSet ``manifest`` runs it again after (a restart,
    Kueue's requeue, its head pod replaced); how each attempt ended, in order (``next_run`` says how the next began).

    ``stop_grace``: seconds the main process gets to end after pwdeploy passed it a stop signal; ``leftover_grace``:
    seconds the rest of the tree gets after SIGTERM once the main process has ended; ``private``: each attempt
    runs in namespaces of its own with a fresh /dev/shm (``pwdeploy.local.unshare``), its main process PID 1 there
    when the rendered head pod makes it so.
    """
    if private is not None:
        private = dataclasses.replace(private, pid1=main_is_pid_1(manifest))
    run = functools.partial(run_child, command, cwd=cwd, watch=watch, stop_grace=stop_grace,
                            leftover_grace=leftover_grace, private=private)  # fmt: skip
    with stop_signals(stop_grace) as stops, _evict_flag(faults) as flag:
        return _attempts(run, env, manifest, faults, stops, flag, say)


def _attempts(
    run: Callable[..., Ended],
    env: Mapping[str, str],
    manifest: Manifest,
    faults: Faults,
    stops: Stops,
    flag: Path | None,
    say: Callable[[str], None],
) -> list[Ended]:
    """The attempts, each after a death the manifest runs the job again after, until one ends otherwise."""
    attempts: list[Ended] = []
    restarts = counted = 0  # the JobSet's status.restarts and status.restartsCountTowardsMax
    while True:
        attempt = len(attempts)
        if attempt > 0 and stops.received:  # a stop between two attempts ends the run: no restart after Ctrl-C
            attempts[-1] = dataclasses.replace(attempts[-1], stopped_by=stops.received[0])
            return attempts
        first = attempt == 0
        ended = run(env=attempt_env(env, attempt, faults, restarts=restarts, flag=flag), stops=stops,
                    kill_after=faults.kill_after if first else None,
                    eviction=_eviction(manifest, faults, flag) if first else None)  # fmt: skip
        attempts.append(ended)
        if not ended.failed:
            return attempts
        decision = decide(manifest, [cluster_failure(manifest, ended, attempt, faults)], restarts=counted)
        say(attempt_line(ended, attempt, decision, faults, restarts=restarts))
        if not decision.runs_again:
            return attempts
        attempts[-1] = dataclasses.replace(ended, next_run=_NEXT_RUN.get(decision.action, "restart"))
        restarts += decision.restarts
        counted += decision.action is Action.RESTART


_NEXT_RUN = {Action.REQUEUE: "requeue", Action.NOTHING: "replace"}


@contextmanager
def _evict_flag(faults: Faults) -> Iterator[Path | None]:
    """The file runtime.step_done creates at --evict-at-step's step, in a folder removed after the run."""
    if faults.evict_at_step is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="pwdeploy-evict-") as folder:
        yield Path(folder) / "evict"


def _eviction(manifest: Manifest, faults: Faults, flag: Path | None) -> Eviction | None:
    if not faults.evicts:
        return None
    return Eviction(
        CAUSES[faults.evict_by],
        grace_seconds(manifest),
        main_is_pid_1(manifest),
        after=faults.evict_after,
        flag=flag,
        said=faults.flags(),
    )


def ending_hint(attempts: list[Ended], max_restarts: int, faults: Faults) -> str | None:
    """What to change when an injected fault ended the job (attempt 0, the only one that gets one): an eviction
    that failed it, or a lost slice with no restart left (else None: a job that died of something else dies of its
    own cause)."""
    last = attempts[-1]
    if len(attempts) > 1 or not last.failed:
        return None
    if last.evicted is not None:
        return _eviction_failed(last)
    if not injected(last, 0, faults):
        return None
    why = cause(attempts[-1], len(attempts) - 1, faults)
    return (
        f"the job died ({why}) after {faults.flags()} with no restart left: a run that injects a fault needs a "
        f"restart to recover; raise scheduling.max_restarts (--max-restarts N, now {max_restarts})"
    )


def _eviction_failed(ended: Ended) -> str:
    """Why an eviction failed the job rather than requeue or restart it, and the fix."""
    fix = "save and exit 143 within the grace period: pwdeploy.runtime.stop_on_sigterm (docs/restarts.md)"
    if ended.evicted is not None and ended.evicted.killed:
        if ended.evicted.sigterm_seen is False:
            return (
                "the eviction failed the job: main, PID 1 of its container without a SIGTERM handler, never saw the "
                "SIGTERM and was killed at the end of the grace period (137); render with the head pod sharing its "
                f"process namespace (head.share_process_namespace, the default), or {fix}"
            )
        return f"the eviction failed the job: main did not end within the grace period and was killed (137); {fix}"
    return f"the eviction failed the job: main exited {ended.status} on SIGTERM, which fails the JobSet; {fix}"
