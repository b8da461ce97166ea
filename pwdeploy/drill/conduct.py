"""A drill from start to end (`pwdeploy drill`, ``pwdeploy.api.drill``): the fault the options name, the plan and
its prediction (``drill.plan``), the wait for its moment, the injection (``drill.inject``), following the job
(``drill.follow``) and the report (``drill.verdict``).

Nothing here prints: each line for the user goes to ``say`` (the CLI writes it on stderr), the question before
an injection to ``confirm``, and the result is a ``Drilled``: the report document, or None when nothing was
injected (a dry run, a stop before the moment came), and how following stopped. The fault is never undone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pwdeploy.drill.plan import Fault, Plan, parse_fault, plan
from pwdeploy.errors import ArgumentError, PwdeployError

if TYPE_CHECKING:
    from pwdeploy.kube.seam import Kube
    from pwdeploy.kube.watch import Mirrors

STEP_WAIT_POLL_S = 2.0
MAX_AFTER_S = 7 * 24 * 3600.0  # a wait before a fault: longer is a typo (9999999h once crashed after the question)
Say = Callable[[str], None]
Stopped = Literal["timeout", "interrupted", "api_error"]


class DrillOptions(NamedTuple):
    """Which fault, when, and how long to follow it: the flags of `pwdeploy drill`, by the same names."""

    lose_slice: int | None = None  # evict every worker pod of this slice
    kill_worker: str | None = None  # "SLICE/HOST": signal one worker container (with exit_code)
    exit_code: int | None = None  # with kill_worker: 128 + the signal sent (143 SIGTERM, 137 SIGKILL)
    evict_head: bool = False  # evict the head pod
    after_step: int | None = None  # inject once main reported this step
    after: float | None = None  # inject after these seconds
    dry_run: bool = False  # say what would be done and which rule would fire; do nothing
    allow_fatal: bool = False  # inject a fault the job's policy or capacity makes fatal
    timeout: float = 1800.0  # stop following after these seconds (the fault stays)
    delete_head: bool = False  # delete the head pod (no DisruptionTarget: the kubelet stops main)


class Drilled(NamedTuple):
    """How a drill went: the fault and its plan (prediction, target pods, why it would be fatal), the report
    (docs/drill.md; None: nothing was injected) and how it stopped: None (the job recovered or ended),
    ``"timeout"`` (it did not recover within the options' timeout; without a report: main never reported
    ``after_step``, ``last_step`` being the last it did), ``"interrupted"`` (Ctrl-C; without a report: before
    any pod was hit) or ``"api_error"`` (an error from the API server stopped following: the report has what was
    measured before it). The report's ``fault.injection`` says how much of the fault was confirmed."""

    fault: Fault
    plan: Plan
    report: dict[str, Any] | None = None
    stopped: Stopped | None = None
    last_step: int | None = None


def run_drill(
    kube: Kube, namespace: str, name: str, options: DrillOptions, *, say: Say, confirm: Callable[[str], bool]
) -> Drilled:
    """Plan the fault, ask, wait for its moment, inject it and follow the job to its recovery. Raises
    ``ArgumentError`` (a fault the job cannot take, a fatal one without ``allow_fatal``), ``ClusterError`` (a job
    that does not run, a refused injection) and ``PwdeployError`` (``confirm`` said no)."""
    fault = parse_fault(
        options.lose_slice, options.kill_worker, options.exit_code, options.evict_head, options.delete_head
    )
    if options.after_step is not None and options.after is not None:
        raise ArgumentError("after", "give `after_step` or `after`, not both")
    if options.after is not None and not 0 <= options.after <= MAX_AFTER_S:
        raise ArgumentError("after", f"{options.after:g} s is not a wait a drill makes (0 to 7 days: 168h)")
    planned = plan(kube, namespace, name, fault, needs_steps=options.after_step is not None)
    for line in plan_lines(fault, planned, options):
        say(line)
    if options.dry_run:
        return Drilled(fault, planned)
    if planned.fatal and not options.allow_fatal:
        raise ArgumentError(
            "allow_fatal",
            f"{fault.flags()} would end job {name}: {planned.fatal}",
            hint="pass `allow_fatal=True` to inject it anyway (the job will not recover)",
        )
    if not confirm(f"Inject {fault.flags()} into job {name} in namespace {namespace}? It cannot be undone."):
        raise PwdeployError("no fault injected")
    stopped, step = _wait_for_moment(kube, namespace, name, options, say)
    if stopped is not None:
        return Drilled(fault, planned, stopped=stopped, last_step=step)
    report, stopped = _inject_and_follow(kube, namespace, name, fault, planned, options.timeout, say)
    return Drilled(fault, planned, report, stopped)


def plan_lines(fault: Fault, planned: Plan, options: DrillOptions) -> list[str]:
    """What will be done, when, to which pods, and what the failure policy predicts."""
    if options.after_step is not None:
        when = f"once main reports step {options.after_step}"
    else:
        when = f"after {options.after:g} s" if options.after is not None else "now"
    return [
        f"{'would' if options.dry_run else 'will'} {fault.describe()} {when}",
        f"  pods: {', '.join(planned.target.pods)}",
        f"  predicted: {planned.prediction.outcome}: {planned.prediction.why}",
    ]


def _wait_for_moment(
    kube: Kube, namespace: str, name: str, options: DrillOptions, say: Say
) -> tuple[Stopped | None, int | None]:
    """Wait for ``after`` seconds or main's step ``after_step`` (bounded by ``timeout``). Why nothing is to be
    injected (Ctrl-C, or the step never came), else None; and the last step main reported."""
    from pwdeploy.cluster import jobsets as js
    from pwdeploy.drill.follow import last_step, newest_head
    from pwdeploy.kube.watch import Mirrors

    step = None
    try:
        if options.after is not None:
            kube.clock.sleep(options.after)
        if options.after_step is None:
            return None, step
        deadline = kube.clock.now() + options.timeout
        with Mirrors(kube, [js.pods_listing(namespace, name)], poll=STEP_WAIT_POLL_S) as pods:  # main's log: polled
            while True:
                step = last_step(kube, namespace, newest_head(pods[0]))
                if step is not None and step >= options.after_step:
                    say(f"main reported step {step}: injecting")
                    return None, step
                if kube.clock.now() >= deadline:
                    return "timeout", step
                _pause(kube, pods, STEP_WAIT_POLL_S)
    except KeyboardInterrupt:
        return "interrupted", step


def _pause(kube: Kube, pods: Mirrors, seconds: float) -> None:
    """``seconds`` on the connection's clock, the pods' watch kept (listed again where watching is forbidden)."""
    until = kube.clock.now() + seconds
    while (left := until - kube.clock.now()) > 0:
        if any(m.polling for m in pods.mirrors):
            pods.wait(left)
        else:
            kube.clock.sleep(left)


def _inject_and_follow(
    kube: Kube, namespace: str, name: str, fault: Fault, planned: Plan, timeout: float, say: Say
) -> tuple[dict[str, Any] | None, Stopped | None]:
    """The report and how following stopped; (None, "interrupted") for Ctrl-C before any pod was hit. A fault
    injected in part, or never confirmed, is followed and reported as such (``drill.inject.Injected``)."""
    from pwdeploy.cluster import jobsets as js
    from pwdeploy.drill import follow as fol
    from pwdeploy.drill import plan as dr
    from pwdeploy.drill import verdict as rep
    from pwdeploy.drill.inject import inject

    jobset = js.require_jobset(kube, namespace, name)
    target = dr.find_target(kube, namespace, name, fault)
    was = fol.before(kube, namespace, jobset, fault, js.list_pods(kube, namespace, name), target.pods)
    try:
        injected = inject(kube, namespace, fault, target, say)
    except KeyboardInterrupt:
        return None, "interrupted"
    if injected.state == "interrupted":  # Ctrl-C between two pods: what was hit stays hit, nothing is followed
        seen = fol.Observed(last_step=was.last_step, stopped="interrupted")
    else:
        seen = fol.follow(kube, namespace, name, fault, was, elastic=dr.is_elastic(jobset), timeout=timeout, say=say)
    report = rep.report_document(name, namespace, fault, injected, planned.prediction, was, seen)
    stopped = seen.stopped if seen.stopped in ("timeout", "interrupted", "api_error") else None
    return report, stopped  # type: ignore[return-value]
