"""`pwdeploy image dockerfile` and `pwdeploy image build [--push]`: the job's own (main) container image."""

from __future__ import annotations

from typing import Any

import click

from pwdeploy.cli.building import run_build, warn
from pwdeploy.cli.options import JobCommand, job_from_params, job_options, pop_job_params


@click.group()
def image() -> None:
    """Build and push the job's own (main) container image.

    The image is image.base (default: the official slim Python image of the client's Python) plus
    jax==pathways_version, the pathwaysutils installed beside pwdeploy, image.requirements, pwdeploy when the
    code imports it, and image.source_dir (default: the config's folder) in /app; main.command runs in the
    config's folder there, as in `local run`.
    """


@image.command(cls=JobCommand)
@job_options
def dockerfile(**params: Any) -> None:
    """Print the Dockerfile `pwdeploy image build` would build."""
    from pwdeploy import api

    file = params.get("job__file")
    job = job_from_params(pop_job_params(params), pin_images=False)  # the build reads the lock itself
    found = api.image_inputs(job, config_file=file)
    warn(found.warnings)
    click.echo(found.dockerfile, nl=False)


@image.command(cls=JobCommand)
@job_options
@click.option("--push", is_flag=True, help="Push the image and record its digest in pwdeploy-image.lock.")
def build(push: bool, **params: Any) -> None:
    """Build the job image as image.repository:<inputs hash>; unchanged inputs are not rebuilt.

    The image is built for linux/amd64 (the GKE nodes), whatever this machine is. A step of the build checks
    that the installed jax equals pathways_version, and so does `python -c` in the built image where the engine
    can run it. Files the source folder's .dockerignore names are left out. The engine
    is the one DOCKER_HOST (or the current docker context) names. With --push, the pushed digest is recorded
    next to the config and `pwdeploy render` pins main.image to it.
    """
    from pwdeploy import api

    file = params.get("job__file")
    job = job_from_params(pop_job_params(params), pin_images=False)
    run_build(lambda progress: api.build_image(job, push=push, config_file=file, progress=progress))
