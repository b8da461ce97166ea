"""`pwdeploy sidecar dockerfile` and `pwdeploy sidecar build [--push]`."""

from __future__ import annotations

import shutil
import sys
from typing import Any, TextIO

import click

from pwdeploy.cli.options import job_from_params, job_options, pop_job_params
from pwdeploy.sidecar.engine import BuildStep

_allow_base_mismatch = click.option(
    "--allow-base-mismatch",
    is_flag=True,
    help="Build even when the base tag's python_X.Y / jax_V differ from the job's (experts only).",
)


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


@click.group()
def sidecar() -> None:
    """Build and push the colocated-Python sidecar image of a job.

    The image is the Pathways colocated-Python base for the job's JAX and Python versions plus
    sidecar.requirements (installed with the base's server constraints) and sidecar.source_dir (in /app).
    """


@sidecar.command()
@job_options
@_allow_base_mismatch
def dockerfile(allow_base_mismatch: bool, **params: Any) -> None:
    """Print the Dockerfile `pwdeploy sidecar build` would build."""
    from pwdeploy.sidecar.build import prepare

    job = job_from_params(pop_job_params(params), pin_sidecar=False)  # the build reads the lock itself
    click.echo(prepare(job, allow_base_mismatch=allow_base_mismatch).dockerfile, nl=False)


@sidecar.command()
@job_options
@click.option("--push", is_flag=True, help="Push the image and record its digest in pwdeploy-sidecar.lock.")
@_allow_base_mismatch
def build(push: bool, allow_base_mismatch: bool, **params: Any) -> None:
    """Build the sidecar image as sidecar.repository:<inputs hash>; unchanged inputs are not rebuilt.

    The engine is the one DOCKER_HOST (or the current docker context) names. With --push, the pushed
    digest is recorded next to the config and `pwdeploy render` pins the workers' sidecar to it.
    """
    from pwdeploy.sidecar.build import build_sidecar
    from pwdeploy.sidecar.engine import DockerCli

    job = job_from_params(pop_job_params(params), pin_sidecar=False)  # the build reads the lock itself
    progress = StreamProgress(sys.stderr)
    try:
        result = build_sidecar(job, DockerCli(), progress, push=push, allow_base_mismatch=allow_base_mismatch)
    finally:
        progress.done()
    if result.built:
        click.echo(f"built {result.tag}", err=True)
    elif not result.pushed and result.image is None:
        click.echo(f"up to date: {result.tag} (an image with these inputs exists)", err=True)
    if result.pushed:
        click.echo(f"pushed {result.tag} as {result.image}; recorded in {result.lock_path}", err=True)
    elif result.image is not None:
        click.echo(f"up to date: {result.image} holds these inputs (recorded in {result.lock_path})", err=True)
    click.echo(result.image or result.tag)
