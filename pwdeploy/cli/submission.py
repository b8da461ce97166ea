"""`pwdeploy submit` (``api.submit``): render, check, preflight and apply a job, then (--wait, --connect) follow it.
Apart from the inspection commands (cli/cluster.py), which read no job config and so do not import it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from pwdeploy.cli.cluster_options import (
    announce,
    cluster_options,
    flagged,
    open_cluster,
    region_option,
    surroundings,
)
from pwdeploy.cli.options import JobCommand, job_from_params, job_options, pop_job_params
from pwdeploy.cli.output import confirm
from pwdeploy.errors import ConfigError

if TYPE_CHECKING:
    from pwdeploy.api import Cluster, SessionOptions, SubmitOptions


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
def submit(namespace_alias: str | None, kubeconfig: Path | None, context: str | None, yes: bool, **params: Any) -> int:
    """Render, check and submit a job as a JobSet (server-side apply, field manager pwdeploy).

    Submitting the same config again changes nothing; a different config under the same name needs --replace.
    """
    from pwdeploy import api

    job = job_from_params(_namespaced(pop_job_params(params), namespace_alias))
    options = _submit_options(params)

    def found() -> Cluster:  # once the job is valid: the cluster it goes to, said first
        cluster = flagged(open_cluster, kubeconfig, context)
        announce(cluster.kube)
        return cluster

    submitted = api.submit(found, job, options, confirm=lambda q: yes or confirm(q), surroundings=surroundings())
    for line in submitted.next_steps:
        click.echo(line)
    return submitted.status


def _submit_options(params: dict[str, Any]) -> SubmitOptions:
    """submit's own flags (taken out of ``params``) as the API's options."""
    from pwdeploy import api

    return api.SubmitOptions(
        dry_run=params.pop("dry_run"),
        replace=params.pop("replace"),
        wait=params.pop("wait"),
        timeout=params.pop("timeout"),
        connect=_session(params.pop("connect_after"), params.pop("local_port")),
        preflight=not params.pop("skip_preflight"),
        region=params.pop("region"),
    )


def _namespaced(job_params: dict[str, Any], alias: str | None) -> dict[str, Any]:
    """The job flags with -n (kubectl's) as --namespace; the two saying different things are refused."""
    if alias is not None:
        if job_params.get("job__namespace") not in (None, alias):
            raise ConfigError("-n", f"{alias!r} contradicts --namespace {job_params['job__namespace']!r}")
        job_params["job__namespace"] = alias
    return job_params


def _session(connect_after: bool, local_port: int | None) -> SessionOptions | None:
    """--connect's session, on --local-port (which needs --connect)."""
    from pwdeploy import api

    if local_port is not None and not connect_after:
        raise ConfigError("--local-port", "applies only to --connect", hint="add --connect, or drop --local-port")
    if not connect_after:
        return None
    return api.SessionOptions() if local_port is None else api.SessionOptions(local_port=local_port)
