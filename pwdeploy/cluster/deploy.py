"""A job submitted from start to end (`pwdeploy submit`, ``pwdeploy.api.submit``): the preflight checks, the
server-side apply of its JobSet (or its dry run), then, when asked, the wait until it runs or ends and the connect
session of a headless job.

Nothing here prints: each line for the user goes to ``Surroundings.say`` (the CLI writes it on stderr), the lines
that are the command's output to ``Surroundings.show`` (stdout), and the result is a ``Submitted``. The preflight
checks and the connect session belong to rooms above this one, so the caller passes them in (``preflight``,
``DeployOptions.connect``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pwdeploy.cluster.submit import DryRun, Outcome, Result
from pwdeploy.cluster.surroundings import Surroundings
from pwdeploy.text import printable

if TYPE_CHECKING:
    from pwdeploy.cluster.progress import JobState
    from pwdeploy.cluster.wait import Until
    from pwdeploy.config import JobConfig
    from pwdeploy.kube.seam import Kube

# The preflight checks before the apply (`pwdeploy preflight`, a room above): a failed check raises PreflightError
# (nothing is submitted), and the lines returned are the checks that are not ok, told before the apply.
Preflight = Callable[["JobConfig"], Sequence[str]]
# A headless job's connect session once it runs (`pwdeploy connect`'s, in pwdeploy.session): KUBE, NAMESPACE, NAME
# -> the session's exit status.
Connect = Callable[["Kube", str, str], int]


@dataclass(frozen=True)
class DeployOptions:
    """How to submit: the flags of `pwdeploy submit` beyond the job's config."""

    dry_run: DryRun = DryRun.NONE
    replace: bool = False  # delete a different job of the same name (after ``confirm``) and create this one
    wait: Until | None = None  # show progress until the job runs or ends
    timeout: float | None = None  # of the wait, and of the connect session's
    connect: Connect | None = None  # a headless job: once it runs, its connect session


@dataclass(frozen=True)
class Submitted:
    """How a submit went: the apply's outcome, the state waited for (None: no wait), the exit status (0; 130:
    the wait was stopped; a connect session's own) and the lines that tell what to do next (none after a dry
    run, a stopped wait or a connect session)."""

    outcome: Outcome
    state: JobState | None = None
    status: int = 0
    next_steps: tuple[str, ...] = ()

    # The outcome's, as ``pwdeploy.api.submit`` returned them when it returned the outcome alone.
    @property
    def name(self) -> str:
        return self.outcome.name

    @property
    def namespace(self) -> str:
        return self.outcome.namespace

    @property
    def config_hash(self) -> str:
        return self.outcome.config_hash

    @property
    def result(self) -> Result:
        return self.outcome.result


def submit_job(
    kube: Kube,
    job: JobConfig,
    options: DeployOptions,
    around: Surroundings,
    *,
    confirm: Callable[[str], bool],
    preflight: Preflight | None = None,
) -> Submitted:
    """Submit the (valid) job to the cluster: its namespace is the context's when the config names none. Raises
    PreflightError (a failed preflight check), ClusterError (another config under the same name without
    ``replace``, a failed job or a timeout while waiting, ...) and what the connect session raises."""
    from pwdeploy import manifests
    from pwdeploy.cluster import submit as sub
    from pwdeploy.kube.seam import reading_answers

    job = job._replace(namespace=job.namespace or kube.namespace)  # as kubectl does: else the context's namespace
    namespace = job.namespace or kube.namespace
    if preflight is not None:
        for line in preflight(job):
            around.say(printable(line))
    state = None
    with reading_answers(kube):
        marked = sub.mark_managed(manifests.build(job), namespace)
        outcome = sub.submit(
            kube, marked, dry_run=options.dry_run, replace=options.replace, confirm=confirm, on_progress=around.say
        )
        around.show(outcome.describe(options.dry_run))
        if options.dry_run is not DryRun.NONE:
            return Submitted(outcome)
        if options.wait is not None or options.connect is not None:
            until: Until = "done" if options.wait == "done" else "running"
            state = _wait(kube, job.name, namespace, until, options.timeout, around)
            if state is None:
                return Submitted(outcome, status=130)
    if options.connect is not None:
        return Submitted(outcome, state, options.connect(kube, namespace, job.name))
    steps = [*connect_hint(job.name, namespace)] if job.headless else []
    steps.append(f"follow: pwdeploy status {job.name} -n {namespace}  |  pwdeploy logs {job.name} -n {namespace} -f")
    return Submitted(outcome, state, 0, tuple(steps))


def _wait(
    kube: Kube, name: str, namespace: str, until: Until, timeout: float | None, around: Surroundings
) -> JobState | None:
    """The job's state once it is ``until``; None when the wait was stopped (Ctrl-C), which leaves the job be."""
    from pwdeploy.cluster.wait import wait_for

    try:
        state = wait_for(kube, namespace, name, until=until, display=around.new_display(), timeout=timeout)
    except KeyboardInterrupt:
        ns = f" -n {namespace}"
        around.say(
            f"\nStopped waiting; job {name} keeps running.\n"
            f"  follow it: pwdeploy status {name}{ns}  /  pwdeploy logs {name}{ns} -f\n"
            f"  stop it:   pwdeploy delete {name}{ns}"
        )
        return None
    around.show(f"job {name} is {state.phase}")
    return state


def connect_hint(name: str, namespace: str) -> list[str]:
    """How to connect to a headless job once it is submitted."""
    return [
        "Headless job: connect JAX to its IFRT proxy (waits until it serves, forwards 127.0.0.1:29000):",
        f"  pwdeploy connect {name} -n {namespace} -- python3 explore.py",
        f"  or hold the forward: pwdeploy connect {name} -n {namespace}  (it prints the export lines)",
        "  then in Python: import pathwaysutils; pathwaysutils.initialize()",
    ]
