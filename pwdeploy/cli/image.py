"""`pwdeploy image dockerfile` and `pwdeploy image build [--push]`: the job's own (main) container image; and the
build command body (progress, warnings, result lines) every image command shares."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

import click

from pwdeploy.cli.options import job_from_params, job_options, pop_job_params

if TYPE_CHECKING:
    from pwdeploy.images.build import BuildResult
    from pwdeploy.images.engine import BuildStep, Engine, Progress


class StreamProgress:
    """Build and push output on stderr: every line when piped; on a terminal, one line per step plus a single
    status line that shows the latest output and is overwritten."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self._status = False

    def step(self, step: BuildStep) -> None:
        self._clear()
        self.stream.write(f"[{step.number}/{step.total}] {step.instruction}\n")
        self.stream.flush()

    def line(self, text: str) -> None:
        if not self.tty:
            self.stream.write(text + "\n")
            return
        width = max(20, shutil.get_terminal_size().columns - 1)
        self.stream.write("\r\033[K    " + text.strip()[: width - 4])
        self.stream.flush()
        self._status = True

    def done(self) -> None:
        self._clear()

    def _clear(self) -> None:
        if self._status:
            self.stream.write("\r\033[K")
            self._status = False


def run_build(build: Callable[[Engine, Progress], BuildResult]) -> None:
    """Run one spec's build on the docker engine with progress on stderr, then report it."""
    from pwdeploy.images.engine import DockerCli

    progress = StreamProgress(sys.stderr)
    try:
        result = build(DockerCli(), progress)
    finally:
        progress.done()
    report(result)


def warn(warnings: tuple[str, ...]) -> None:
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)


def report(result: BuildResult) -> None:
    """Warnings and what a build did, on stderr; the image (REPO@sha256:... once pushed, else the tag) on stdout."""
    warn(result.warnings)
    if result.built:
        click.echo(f"built {result.tag} for {result.platform}; jax checked by {result.verified}", err=True)
    elif not result.pushed and result.image is None:
        click.echo(f"up to date: {result.tag} (an image with these inputs exists)", err=True)
    if result.pushed:
        click.echo(f"pushed {result.tag} as {result.image}; recorded in {result.lock_path}", err=True)
    elif result.image is not None:
        click.echo(f"up to date: {result.image} holds these inputs (recorded in {result.lock_path})", err=True)
    click.echo(result.image or result.tag)


@click.group()
def image() -> None:
    """Build and push the job's own (main) container image.

    The image is image.base (default: the official slim Python image of the client's Python) plus
    jax==pathways_version, the pathwaysutils installed beside pwdeploy, image.requirements, pwdeploy when the
    code imports it, and image.source_dir (default: the config's folder) in /app; main.command runs in the
    config's folder there, as in `local run`.
    """


@image.command()
@job_options
def dockerfile(**params: Any) -> None:
    """Print the Dockerfile `pwdeploy image build` would build."""
    from pwdeploy.images.job import collect

    file = params.get("job__file")
    job = job_from_params(pop_job_params(params), pin_images=False)  # the build reads the lock itself
    found = collect(job, file)
    warn(found.warnings)
    click.echo(found.dockerfile, nl=False)


@image.command()
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
    from pwdeploy.images import job as spec

    file = params.get("job__file")
    job = job_from_params(pop_job_params(params), pin_images=False)
    run_build(lambda engine, progress: spec.build(job, engine, progress, push=push, config_file=file))
