"""`pwdeploy drill NAME`: inject one real fault into a running job, then follow it and report its recovery
(docs/drill.md)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import click

from pwdeploy.cli.cluster_options import announce, with_cluster
from pwdeploy.cli.output import confirm, emit
from pwdeploy.errors import ClusterError, ConfigError, PwdeployError

if TYPE_CHECKING:
    from pwdeploy.api import Cluster
    from pwdeploy.drill.plan import Fault, Prediction
    from pwdeploy.kube.seam import Kube

_DURATION = re.compile(r"(\d{1,7}(?:\.\d+)?)(ms|s|m|h)?")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
STEP_WAIT_POLL_S = 2.0


def parse_after(value: str | None) -> float | None:
    """Seconds from ``90s``, ``5m``, ``1h`` or a number of seconds; a ConfigError naming --after otherwise."""
    if value is None:
        return None
    m = _DURATION.fullmatch(value.strip().lower())
    if m is None:
        raise ConfigError(
            None, f"{value!r} is not a duration; e.g. 90s, 5m, 1h or a number of seconds", source="--after"
        )
    return float(m[1]) * _UNIT[m[2]]


@click.command()
@click.argument("name")
@click.option(
    "--lose-slice",
    type=click.IntRange(min=0),
    default=None,
    metavar="SLICE",
    help="Evict every worker pod of the slice (a lost node or maintenance).",
)
@click.option(
    "--kill-worker", default=None, metavar="SLICE/HOST", help="Signal one worker container (with --exit-code)."
)
@click.option(
    "--exit-code",
    type=click.IntRange(1, 255),
    default=None,
    metavar="N",
    help="With --kill-worker: 128 + the signal sent (143 SIGTERM, 137 SIGKILL).",
)
@click.option("--evict-head", is_flag=True, help="Evict the head pod (node maintenance of the CPU pool).")
@click.option(
    "--after-step", type=click.IntRange(min=1), default=None, metavar="N", help="Inject once main reported step N."
)
@click.option("--after", "after", default=None, metavar="DURATION", help="Inject after DURATION (90s, 5m).")
@click.option("--dry-run", is_flag=True, help="Say what would be done and which rule would fire; do nothing.")
@click.option("--allow-fatal", is_flag=True, help="Inject a fault the job's policy or capacity makes fatal.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=1800.0,
    show_default=True,
    metavar="SECONDS",
    help="Stop following after SECONDS (the fault stays).",
)
@click.option("-y", "--yes", is_flag=True, help="Do not ask before injecting.")
@click.option(
    "-o",
    "--output",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="The report as text or one JSON document (docs/drill.md).",
)
@with_cluster
def drill(
    cluster: Cluster,
    name: str,
    lose_slice: int | None,
    kill_worker: str | None,
    exit_code: int | None,
    evict_head: bool,
    after_step: int | None,
    after: str | None,
    dry_run: bool,
    allow_fatal: bool,
    timeout: float,
    yes: bool,
    output: str,
) -> None:  # fmt: skip
    """Inject one real fault into a running job, follow its recovery and report it beside local run's prediction.

    The fault is never undone: Ctrl-C stops following only.
    """
    from pwdeploy.drill import plan as dr

    fault = dr.parse_fault(lose_slice, kill_worker, exit_code, evict_head)
    wait_s = parse_after(after)
    if after_step is not None and wait_s is not None:
        raise ConfigError(None, "give --after-step or --after, not both", source="--after")
    kube, ns = cluster
    announce(kube)
    plan = dr.plan(kube, ns, name, fault, needs_steps=after_step is not None)
    prediction, fatal, target = plan.prediction, plan.fatal, plan.target
    _say_plan(fault, prediction, target.pods, wait_s, after_step, dry_run)
    if dry_run:
        if fatal:
            refusal = "needs --allow-fatal" if not allow_fatal else "allowed by --allow-fatal"
            click.echo(f"  fatal: {fatal} ({refusal})", err=True)
        click.echo("dry run: nothing was done", err=True)
        return
    if fatal and not allow_fatal:
        raise ConfigError(
            None,
            f"{fault.flags()} would end job {name}: {fatal}",
            source="--allow-fatal",
            hint="pass --allow-fatal to inject it anyway (the job will not recover)",
        )
    if not yes and not confirm(f"Inject {fault.flags()} into job {name} in namespace {ns}? It cannot be undone."):
        raise PwdeployError("no fault injected")
    _wait_for_trigger(kube, ns, name, wait_s, after_step, timeout)
    _inject_and_report(cluster, name, fault, prediction, output, timeout)


def _say_plan(
    fault: Fault, prediction: Prediction, pods: tuple[str, ...], wait_s: float | None, after_step: int | None, dry: bool
) -> None:
    when = (
        f"once main reports step {after_step}"
        if after_step is not None
        else f"after {wait_s:g} s"
        if wait_s is not None
        else "now"
    )
    click.echo(f"{'would' if dry else 'will'} {fault.describe()} {when}", err=True)
    click.echo(f"  pods: {', '.join(pods)}", err=True)
    click.echo(f"  predicted: {prediction.outcome}: {prediction.why}", err=True)


def _wait_for_trigger(
    kube: Kube, ns: str, name: str, wait_s: float | None, after_step: int | None, timeout: float
) -> None:
    """Wait for --after or --after-step (the latter bounded by --timeout); Ctrl-C injects nothing."""
    from pwdeploy.cluster import jobsets as js
    from pwdeploy.drill.follow import last_step, newest_head

    try:
        if wait_s is not None:
            kube.clock.sleep(wait_s)
        deadline = kube.clock.now() + timeout
        while after_step is not None:
            step = last_step(kube, ns, newest_head(js.list_pods(kube, ns, name)))
            if step is not None and step >= after_step:
                click.echo(f"main reported step {step}: injecting", err=True)
                return
            if kube.clock.now() >= deadline:
                raise ClusterError(
                    f"main did not report step {after_step} within --timeout {timeout:g} s (last: {step}); "
                    "no fault was injected",
                    hint="step reports are main's log lines `step N` (docs/drill.md)",
                )
            kube.clock.sleep(STEP_WAIT_POLL_S)
    except KeyboardInterrupt:
        click.echo("\nStopped before injecting: no fault was injected.", err=True)
        raise click.exceptions.Exit(130) from None


def _inject_and_report(
    cluster: Cluster, name: str, fault: Fault, prediction: Prediction, output: str, timeout: float
) -> None:
    from pwdeploy.cluster import jobsets as js
    from pwdeploy.drill import follow as fol
    from pwdeploy.drill import plan as dr
    from pwdeploy.drill import verdict as rep
    from pwdeploy.drill.inject import inject

    kube, ns = cluster
    jobset = js.require_jobset(kube, ns, name)
    target = dr.find_target(kube, ns, name, fault)
    was = fol.before(kube, ns, jobset, fault, js.list_pods(kube, ns, name), target.pods)

    def say(line: str) -> None:
        click.echo(line, err=True)

    inject(kube, ns, fault, target, say)
    seen = fol.follow(kube, ns, name, fault, was, elastic=dr.is_elastic(jobset), timeout=timeout, say=say)
    doc = rep.report_document(name, ns, fault, target.pods, prediction, was, seen)
    if output == "json":
        emit(doc, "json")
    else:
        for line in rep.report_lines(doc):
            click.echo(line)
    if seen.stopped == "interrupted":
        click.echo(
            f"Stopped following; the fault is not undone. Job {name} goes on: pwdeploy status {name} -n {ns}", err=True
        )
        raise click.exceptions.Exit(130)
    if seen.stopped == "timeout":
        raise ClusterError(
            f"job {name} did not recover within --timeout {timeout:g} s (the report above says how far it got)",
            hint=f"look at it: pwdeploy diagnose {name} -n {ns}",
        )
