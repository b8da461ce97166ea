"""`pwdeploy sidecar dockerfile` and `pwdeploy sidecar build [--push]`."""

from __future__ import annotations

from typing import Any

import click

from pwdeploy.cli.building import run_build, warn
from pwdeploy.cli.options import JobCommand, job_from_params, job_options, pop_job_params

_allow_base_mismatch = click.option(
    "--allow-base-mismatch",
    is_flag=True,
    help="Accept a base image whose tag's python_X.Y / jax_V differ from the job's (experts only).",
)


@click.group()
def sidecar() -> None:
    """Build and push the colocated-Python sidecar image of a job.

    The image is the Pathways colocated-Python base for the job's JAX and Python versions plus
    sidecar.requirements (installed with the base's server constraints) and sidecar.source_dir (in /app).
    """


@sidecar.command(cls=JobCommand)
@job_options
@_allow_base_mismatch
def dockerfile(allow_base_mismatch: bool, **params: Any) -> None:
    """Print the Dockerfile `pwdeploy sidecar build` would build."""
    from pwdeploy import api

    job = job_from_params(pop_job_params(params), pin_images=False)  # the build reads the lock itself
    found = api.sidecar_inputs(job, allow_base_mismatch=allow_base_mismatch)
    warn(found.warnings)
    click.echo(found.dockerfile, nl=False)


@sidecar.command(cls=JobCommand)
@job_options
@click.option("--push", is_flag=True, help="Push the image and record its digest in pwdeploy-sidecar.lock.")
@_allow_base_mismatch
def build(push: bool, allow_base_mismatch: bool, **params: Any) -> None:
    """Build the sidecar image as sidecar.repository:<inputs hash>; unchanged inputs are not rebuilt.

    The image is built for linux/amd64 (the GKE nodes); files the source folder's .dockerignore names are left
    out. The engine is the one DOCKER_HOST (or the current docker context) names. With --push, the pushed
    digest is recorded next to the config and `pwdeploy render` pins the workers' sidecar to it.
    """
    from pwdeploy import api

    job = job_from_params(pop_job_params(params), pin_images=False)  # the build reads the lock itself
    mismatch = allow_base_mismatch
    run_build(lambda progress: api.build_sidecar(job, push=push, allow_base_mismatch=mismatch, progress=progress))
