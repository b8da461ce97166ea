"""`pwdeploy preflight` (``api.preflight``): check a job's program, GCS locations, images and (--cluster) the
cluster."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import click

from pwdeploy.cli.check import NO_CHECK
from pwdeploy.cli.cluster_options import cluster_options, flagged, open_cluster, region_option
from pwdeploy.cli.options import FILE_PARAM, JobCommand, job_from_params, job_options, pop_job_params
from pwdeploy.errors import PreflightError


@click.command("preflight", cls=JobCommand)
@job_options
@click.option(
    "-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True, help="Report format"
)
@region_option
@click.option(
    "--cluster",
    "check_cluster",
    is_flag=True,
    help="Also check that the cluster can run the job "
    "(Kubernetes version, JobSet, namespace, queue, TPU and head capacity, RBAC, Secrets).",
)
@click.option(
    "--no-gcs",
    is_flag=True,
    help="Skip the GCS checks; the images (and with --cluster, the cluster) are still checked.",
)
@NO_CHECK
@cluster_options
def preflight(
    no_check: bool,
    output: str,
    region: str | None,
    check_cluster: bool,
    no_gcs: bool,
    kubeconfig: Path | None,
    context: str | None,
    **kwargs: Any,
) -> None:
    """Check every GCS location of the job (bucket, permissions, lifecycle rules, region, a probe object) and that
    every image it references exists in its registry (proxy, server, main, sidecar, HLO uploader); with --cluster,
    also whether the cluster can run it. The sources are checked side by side.

    First `pwdeploy check` reads the job's program: an error finding stops preflight with exit 11 (--no-check
    skips it). Exits 0 when nothing failed (warnings and "not verified" do not fail), 6 when a check failed.
    """
    from pwdeploy import api

    config_file = kwargs.get(FILE_PARAM)
    job = job_from_params(pop_job_params(kwargs))
    report = api.preflight(
        job,
        region=region,
        check_gcs=not no_gcs,
        cluster=(lambda: flagged(open_cluster, kubeconfig, context)) if check_cluster else None,
        check_program=not no_check,
        config_file=config_file,
        progress=sys.stderr,
    )
    if output == "json":
        click.echo(json.dumps(report.as_json(), indent=2))
    else:
        from pwdeploy.text import printable  # rows quote servers' answers (a version string, an error page)

        click.echo(printable(report.format_table(width=max(80, shutil.get_terminal_size((120, 24)).columns))))
    if report.failed:
        failed = report.counts()["failed"]
        raise PreflightError(f"{failed} preflight check(s) failed; see the fixes in the report")
