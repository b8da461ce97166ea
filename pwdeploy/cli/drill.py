"""`pwdeploy drill NAME` (``api.drill``): inject one real fault into a running job, then follow it and report its
recovery (docs/drill.md)."""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING

import click

from pwdeploy.cli.cluster_options import announce, with_cluster
from pwdeploy.cli.output import confirm, emit
from pwdeploy.errors import ClusterError, ConfigError

if TYPE_CHECKING:
    from pwdeploy.api import Cluster
    from pwdeploy.drill.conduct import Drilled

_DURATION = re.compile(r"(\d{1,7}(?:\.\d+)?)(ms|s|m|h)?")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


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
    "--delete-head",
    is_flag=True,
    help="Delete the head pod without DisruptionTarget, as a person (or Kueue's eviction) does: the kubelet stops "
    "main with SIGTERM, then SIGKILL after the grace period.",
)
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
    delete_head: bool,
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
    from pwdeploy import api

    options = api.DrillOptions(
        lose_slice, kill_worker, exit_code, evict_head, after_step, parse_after(after), dry_run, allow_fatal, timeout,
        delete_head=delete_head,
    )  # fmt: skip
    announce(cluster.kube)
    asked = None if yes else lambda question: confirm(question, terminal_only=True)  # never piped input: a person
    drilled = api.drill(cluster, name, options, confirm=asked, progress=sys.stderr)
    if dry_run:
        _dry_run_end(drilled.plan.fatal, allow_fatal)
        return
    _report(drilled, after_step, timeout, output)
    _end(drilled, name, cluster.namespace, timeout)


def _report(drilled: Drilled, after_step: int | None, timeout: float, output: str) -> None:
    """The drill's report (its JSON with -o json), or why the fault was not injected."""
    from pwdeploy.drill.verdict import report_lines

    if drilled.report is None:
        _not_injected(drilled, after_step, timeout)
    elif output == "json":
        emit(drilled.report, "json")
    else:
        for line in report_lines(drilled.report):
            click.echo(line)


def _end(drilled: Drilled, name: str, ns: str, timeout: float) -> None:
    """The exit status after the report: 0 only for a whole, confirmed fault the job recovered from (or ended of)."""
    assert drilled.report is not None
    fault = drilled.report["fault"]
    if drilled.stopped == "interrupted":
        hit = f"{len(fault['pods'])} pod{'' if len(fault['pods']) == 1 else 's'} hit: {', '.join(fault['pods'])}"
        stopped = "Stopped injecting" if fault["injection"] == "interrupted" else "Stopped following"
        click.echo(f"{stopped}; the fault is not undone ({hit}). Job {name} goes on: pwdeploy status {name} -n {ns}",
                   err=True)  # fmt: skip
        raise click.exceptions.Exit(130)
    if drilled.stopped == "api_error":
        raise ClusterError(
            f"following job {name} stopped on an error (the report above says what was injected and measured)",
            hint=f"the fault is not undone; look at the job: pwdeploy status {name} -n {ns}",
        )
    if drilled.stopped == "timeout":
        unconfirmed = fault["injection"] == "unconfirmed" and drilled.report["rule_fired"] == "none"
        raise ClusterError(
            f"the fault's injection was not confirmed and nothing reacted within --timeout {timeout:g} s"
            if unconfirmed
            else f"job {name} did not recover within --timeout {timeout:g} s (the report above says how far it got)",
            hint=f"look at it: pwdeploy diagnose {name} -n {ns}",
        )
    if fault["injection"] == "partial":
        raise ClusterError(
            f"the fault reached {len(fault['pods'])} of {len(fault['pods']) + len(fault['not_hit'])} pods (the "
            "report above says which, and what the job did)",
            hint="what stopped the injection is in the report's findings",
        )


def _dry_run_end(fatal: str | None, allow_fatal: bool) -> None:
    if fatal:
        refusal = "needs --allow-fatal" if not allow_fatal else "allowed by --allow-fatal"
        click.echo(f"  fatal: {fatal} ({refusal})", err=True)
    click.echo("dry run: nothing was done", err=True)


def _not_injected(drilled: Drilled, after_step: int | None, timeout: float) -> None:
    """Nothing was injected: Ctrl-C came first, or main never reported the step asked for."""
    if drilled.stopped == "interrupted":
        click.echo("\nStopped before injecting: no fault was injected.", err=True)
        raise click.exceptions.Exit(130)
    raise ClusterError(
        f"main did not report step {after_step} within --timeout {timeout:g} s (last: {drilled.last_step}); "
        "no fault was injected",
        hint="step reports are main's log lines `step N` (docs/drill.md)",
    )
