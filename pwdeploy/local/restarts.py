"""Restarts in `local run`, decided by the JobSet's own rules, and the faults that prove a job survives them.

On the cluster, when the JobSet's failure policy restarts it, every pod is recreated and the program starts again
from the top, with the attempt number in the pods' label ``jobset.sigs.k8s.io/restart-attempt`` (which the
manifests pass on as ``PWDEPLOY_RESTART_ATTEMPT``). Here the job's process tree is started again from scratch
when it dies and the JobSet `render` prints for this job would restart (``pwdeploy.manifests.failure_policy``
decides): the program's exit stands for main's in the head pod, so its own non-zero exit fails the run as it
fails the JobSet, and a retry exit code (75, scheduling.retry_exit_codes) restarts it; an injected fault
(``--fail-at-step``, ``--kill-after``) stands for a lost slice, the worker Job failing. A stop asked of pwdeploy
(Ctrl-C, SIGTERM) ends the run without a restart.
"""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pwdeploy import identifiers as ids
from pwdeploy.config import JobConfig
from pwdeploy.local.runner import STOP_GRACE_SECONDS, Ended, Watch, run_child, stop_signals
from pwdeploy.local.tree import LEFTOVER_GRACE_SECONDS
from pwdeploy.local.unshare import Private
from pwdeploy.manifests import Manifest
from pwdeploy.manifests.failure_policy import Action, Decision, PodFailure, backoff_limit, decide
from pwdeploy.manifests.jobset import jobset

LOCAL_IMAGE = "local-run.invalid/unused:0"  # stands in for an image no push pinned yet: images decide no restart


@dataclass(frozen=True)
class Faults:
    """Faults injected on attempt 0 only, so that the restart that follows can be watched recovering."""

    fail_at_step: int | None = None  # PWDEPLOY_FAIL_AT_STEP: runtime.step_done(N) SIGKILLs the job's tree
    kill_after: float | None = None  # local run SIGKILLs the job's tree after this many seconds

    def flags(self) -> str:
        """The flags that set these faults, as a user typed them (empty: none)."""
        named = [("--fail-at-step", self.fail_at_step), ("--kill-after", self.kill_after)]
        return " ".join(f"{flag} {value:g}" for flag, value in named if value is not None)


def attempt_env(env: Mapping[str, str], attempt: int, faults: Faults) -> dict[str, str]:
    """The environment of attempt ``attempt``: the job's, plus the attempt number and, on attempt 0, the fault."""
    result = {k: v for k, v in env.items() if k != ids.FAIL_AT_STEP_ENV}
    result[ids.RESTART_ATTEMPT_ENV] = str(attempt)
    if attempt == 0 and faults.fail_at_step is not None:
        result[ids.FAIL_AT_STEP_ENV] = str(faults.fail_at_step)
    return result


def rendered_jobset(job: JobConfig) -> Manifest:
    """The JobSet `render` prints for ``job``, whose failure policy decides the restarts; a job image or sidecar
    image that no push pinned yet (a local run needs neither) is a placeholder."""
    main = job.main._replace(image=job.main.image or LOCAL_IMAGE)
    sidecar = job.sidecar._replace(image=job.sidecar.image or LOCAL_IMAGE) if job.sidecar.enabled else job.sidecar
    return jobset(job._replace(main=main, sidecar=sidecar))


def injected(ended: Ended, attempt: int, faults: Faults) -> bool:
    """Whether the fault killed this attempt: --kill-after did, or SIGKILL on attempt 0 with --fail-at-step."""
    by_step = attempt == 0 and faults.fail_at_step is not None and ended.returncode == -signal.SIGKILL
    return ended.killed_after is not None or by_step


def cause(ended: Ended, attempt: int, faults: Faults) -> str:
    """Why an attempt ended, naming --fail-at-step where it was the likely killer (SIGKILL on attempt 0)."""
    if injected(ended, attempt, faults) and ended.killed_after is None:
        return f"{ended.cause()} at --fail-at-step {faults.fail_at_step}"
    return ended.cause()


def cluster_failure(manifest: Manifest, ended: Ended, attempt: int, faults: Faults) -> PodFailure:
    """The failure on the cluster a local attempt's death stands for. An injected fault is a lost slice: slice 0's
    worker Job has used up its backoffLimit (on the cluster the program, dying first, exits with the retry code
    through pwdeploy.runtime.retry_on_slice_loss, and restarts alike). Any other death is main's, in the head pod."""
    if injected(ended, attempt, faults):
        failed_before = backoff_limit(manifest, ids.WORKER_JOB)
        return PodFailure(ids.WORKER_JOB, signal=signal.SIGKILL, failed_before=failed_before)
    return PodFailure(ids.HEAD_JOB, exit_code=ended.status, container=ids.MAIN_CONTAINER)


def attempt_line(ended: Ended, attempt: int, decision: Decision, faults: Faults = Faults()) -> str:
    """The one stderr line a failed attempt gets: how it ended, the JobSet rule that decided, and what follows."""
    stands = " (a lost slice)" if injected(ended, attempt, faults) else ""
    then = f"restarting from scratch as attempt {attempt + 1}" if decision.restarts else "no restart"
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
    """Run the job, restarting it after each death that the JobSet ``manifest`` restarts on; how each attempt
    ended, in order.

    ``stop_grace``: seconds the main process gets to end after pwdeploy passed it a stop signal; ``leftover_grace``:
    seconds the rest of the tree gets after SIGTERM once the main process has ended; ``private``: each attempt
    runs in namespaces of its own with a fresh /dev/shm (``pwdeploy.local.unshare``).
    """
    attempts: list[Ended] = []
    counted = 0  # the JobSet's status.restartsCountTowardsMax
    with stop_signals(stop_grace) as stops:
        while True:
            attempt = len(attempts)
            if attempt > 0 and stops.received:  # a stop between two attempts ends the run: no restart after Ctrl-C
                attempts[-1] = dataclasses.replace(attempts[-1], stopped_by=stops.received[0])
                break
            kill_after = faults.kill_after if attempt == 0 else None
            ended = run_child(command, cwd=cwd, env=attempt_env(env, attempt, faults), watch=watch, stops=stops,
                              kill_after=kill_after, stop_grace=stop_grace, leftover_grace=leftover_grace,
                              private=private)  # fmt: skip
            attempts.append(ended)
            if not ended.failed:
                break
            decision = decide(manifest, [cluster_failure(manifest, ended, attempt, faults)], restarts=counted)
            say(attempt_line(ended, attempt, decision, faults))
            if not decision.restarts:
                break
            counted += decision.action is Action.RESTART
    return attempts


def exhausted_hint(attempts: list[Ended], max_restarts: int, faults: Faults) -> str | None:
    """When the injected fault killed the job (SIGKILL on attempt 0, the only one that gets it) and no restart
    was left: what to raise (else None: a job that died of something else dies of its own cause)."""
    last = attempts[-1]
    if len(attempts) > 1 or not last.failed or not injected(last, 0, faults):
        return None
    why = cause(attempts[-1], len(attempts) - 1, faults)
    return (
        f"the job died ({why}) after {faults.flags()} with no restart left: a run that injects a fault needs a "
        f"restart to recover; raise scheduling.max_restarts (--max-restarts N, now {max_restarts})"
    )
