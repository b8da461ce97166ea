"""The build command body every image command shares (`image build`, `sidecar build`): progress on stderr,
warnings, and the result lines."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

import click

if TYPE_CHECKING:
    from pwdeploy.images.build import BuildResult
    from pwdeploy.images.engine import BuildStep, Progress


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


def run_build(build: Callable[[Progress], BuildResult]) -> None:
    """Run one image's build (``api.build_image``, ``api.build_sidecar``) with progress on stderr, then report it."""
    progress = StreamProgress(sys.stderr)
    try:
        result = build(progress)
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
