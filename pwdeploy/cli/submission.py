"""`pwdeploy submit`: render, check, preflight and apply a job, then (--wait, --connect) follow it. Apart from the
inspection commands (cli/cluster.py), which read no job config and so do not import it."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from pwdeploy.cli.cluster_options import (
    announce,
    cluster_options,
    cluster_source,
    open_kube,
    region_option,
    surroundings,
)
from pwdeploy.cli.options import JobCommand, job_from_params, job_options, pop_job_params
from pwdeploy.cli.output import confirm
from pwdeploy.errors import ConfigError, PreflightError

if TYPE_CHECKING:
    from pwdeploy.config import JobConfig
    from pwdeploy.kube.seam import Kube
    from pwdeploy.preflight import PreflightReport


@click.command(cls=JobCommand)
@job_options
@click.option("-n", "namespace_alias", default=None, help="Same as --namespace.")
@cluster_options
@click.option(
    "--dry-run",
    type=click.Choice(["none", "client", "server"]),
    default="none",
    show_default=True,
    help="server: the API server validates and admits the job, nothing is persisted; "
    "client: check and compare only, nothing is sent that could change the cluster.",
)
@click.option(
    "--wait",
    type=click.Choice(["running", "done"]),
    is_flag=False,
    flag_value="running",
    default=None,
    help="Show progress until every pod runs (--wait or --wait=running) or the job ends (--wait=done).",
)
@click.option(
    "--timeout", type=click.FloatRange(min=0), default=None, metavar="SECONDS", help="Give up waiting after SECONDS."
)
@click.option(
    "--connect",
    "connect_after",
    is_flag=True,
    help="Headless jobs: once running, forward the proxy to 127.0.0.1 (--local-port) as `pwdeploy connect` does.",
)
@click.option(
    "--local-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="With --connect: the port on 127.0.0.1 to forward (default 29000; 0: any free port).",
)
@click.option("--replace", is_flag=True, help="Delete a different job of the same name and create this one.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask before replacing.")
@click.option("--skip-preflight", is_flag=True, help="Skip the preflight checks (cluster readiness, GCS, images).")
@region_option
def submit(
    namespace_alias: str | None,
    kubeconfig: Path | None,
    context: str | None,
    dry_run: str,
    wait: str | None,
    timeout: float | None,
    connect_after: bool,
    local_port: int | None,
    replace: bool,
    yes: bool,
    skip_preflight: bool,
    region: str | None,
    **params: Any,
) -> int:
    """Render, check and submit a job as a JobSet (server-side apply, field manager pwdeploy).

    Submitting the same config again changes nothing; a different config under the same name needs --replace.
    """
    from pwdeploy import manifests
    from pwdeploy.advice import job_warnings
    from pwdeploy.cluster.deploy import SubmitOptions, submit_job
    from pwdeploy.cluster.submit import DryRun
    from pwdeploy.session.attach import DEFAULT_LOCAL_PORT, SessionOptions, bind_local, run_session
    from pwdeploy.validation.validate import require_valid

    _check_wait_flags(wait, timeout, dry_run, connect_after)
    job_params = pop_job_params(params)
    if namespace_alias is not None:
        if job_params.get("job__namespace") not in (None, namespace_alias):
            raise ConfigError("-n", f"{namespace_alias!r} contradicts --namespace {job_params['job__namespace']!r}")
        job_params["job__namespace"] = namespace_alias
    job = job_from_params(job_params)
    if connect_after and not job.headless:
        raise ConfigError("--connect", "applies to headless jobs only: this job's program runs in the cluster")
    if local_port is not None and not connect_after:
        raise ConfigError("--local-port", "applies only to --connect", hint="add --connect, or drop --local-port")
    session = None
    if connect_after:
        session = SessionOptions(local_port=DEFAULT_LOCAL_PORT if local_port is None else local_port, timeout=timeout)
        bind_local(session.local_port).close()  # a port in use stops submit before the job is created
    # Every problem of the config is reported before the cluster is asked anything (or even found).
    require_valid(manifests.build(job._replace(namespace=job.namespace or "default")))
    kube = open_kube(kubeconfig, context)
    announce(kube)
    for warning in job_warnings(job):
        click.echo(f"warning: {warning}", err=True)
    around = surroundings()
    options = SubmitOptions(
        dry_run=DryRun(dry_run),
        replace=replace,
        wait="done" if wait == "done" else "running" if wait is not None else None,
        timeout=timeout,
        connect=None if session is None else partial(run_session, options=session, around=around),
    )
    submitted = submit_job(
        kube,
        job,
        options,
        around,
        confirm=lambda q: yes or confirm(q),
        preflight=None if skip_preflight else lambda checked: _preflight(checked, kube, region),
    )
    for line in submitted.next_steps:
        click.echo(line)
    return submitted.status


def _check_wait_flags(wait: str | None, timeout: float | None, dry_run: str, connect_after: bool = False) -> None:
    """Flags that would be ignored are refused, so a script never believes it waited."""
    if timeout is not None and wait is None and not connect_after:
        raise ConfigError("--timeout", "applies only to --wait", hint="add --wait (or --wait=done), or drop --timeout")
    if wait is not None and dry_run != "none":
        raise ConfigError("--wait", f"a --dry-run={dry_run} creates nothing to wait for", hint="drop one of them")
    if connect_after and dry_run != "none":
        raise ConfigError("--connect", f"a --dry-run={dry_run} creates nothing to connect to", hint="drop one of them")
    if connect_after and wait == "done":
        raise ConfigError("--connect", "a headless job is done only when deleted; --connect waits until it runs")


def _preflight(job: JobConfig, kube: Kube, region: str | None) -> list[str]:
    """The cluster readiness, GCS and image checks, side by side; a failed row stops submit before anything is
    created, and the rows that are not ok are the lines told before it goes on."""
    from pwdeploy.preflight import run_preflight

    report = run_preflight(job, region=region, extra_sources=[cluster_source(job, kube=kube)])
    if report.failed:
        raise PreflightError(
            "preflight failed; nothing was submitted:\n" + report.format_table(),
            hint="fix what the report names, or pass --skip-preflight to submit anyway",
        )
    return unsettled_rows(report)


def unsettled_rows(report: PreflightReport) -> list[str]:
    """One line per row that is not ok: ``warning: CHECK LOCATION: DETAIL`` (or ``not verified: ...``)."""
    from pwdeploy.preflight import Status

    word = {Status.WARN: "warning", Status.NOT_VERIFIED: "not verified", Status.FAILED: "failed"}
    return [f"{word[r.status]}: {r.check} {r.location}: {r.detail}" for r in report.results if r.status in word]
