"""The build flow both image specs share: build unless an image with the same inputs hash exists, check its JAX
version where the engine can run it, optionally push and record the digest in the spec's lock file.

The jax-version label is a record of pathways_version, never a check: the checks are a step of the job image's
build (its Dockerfile runs ``import jax`` and compares) and, after the build, ``version_command`` in the image.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from pwdeploy.errors import BuildError
from pwdeploy.images import lock
from pwdeploy.images.engine import Engine, Progress
from pwdeploy.images.inputs import HASH_LABEL, ImageInputs

if TYPE_CHECKING:
    import tarfile


@dataclass(frozen=True)
class ImageDestination:
    """Where a spec's image goes (its repository, the job's entry in the spec's lock file, the config field that
    can pin it instead) and how its jax version is checked once built."""

    repository: str
    job_name: str
    lock_path: Path
    pin_field: str  # the config field a user can set to the pushed image instead (named when the lock is unwritable)
    jax_check: str  # how the build itself makes sure of the jax version, for the report
    version_command: tuple[str, ...] | None = None  # prints the built image's jax version; None: no run check
    # Before an image is built (not when one with these inputs exists): raises when the base cannot be had,
    # returns warnings when that could not be told.
    base_check: Callable[[Engine], tuple[str, ...]] | None = None


@dataclass(frozen=True)
class BuildResult:
    tag: str
    built: bool  # False: an image with these inputs already existed ("up to date")
    pushed: bool = False  # False with an image: the lock already held a push of these inputs
    image: str | None = None  # repository@sha256:... once pushed
    lock_path: Path | None = None  # where the pushed digest was recorded
    verified: str | None = None  # after a build: how the JAX version was checked
    platform: str | None = None  # after a build: the os/arch it was built for
    warnings: tuple[str, ...] = ()  # about the inputs (files that look like credentials)


def build_image(
    destination: ImageDestination, inputs: ImageInputs, engine: Engine, progress: Progress, *, push: bool
) -> BuildResult:
    tag = inputs.tag(destination.repository)
    if push:
        entry = lock.entry_for(destination.lock_path, destination.job_name, destination.repository)
        if entry is not None and entry.inputs_hash == inputs.inputs_hash:
            return BuildResult(
                tag, built=False, image=entry.image, lock_path=destination.lock_path, warnings=inputs.warnings
            )
    engine.check()
    labels = engine.image_labels(tag)
    built = labels is None or labels.get(HASH_LABEL) != inputs.inputs_hash
    verified = None
    warnings = inputs.warnings
    if built:
        warnings += destination.base_check(engine) if destination.base_check is not None else ()
        verified = _build(destination, inputs, engine, progress, tag)
    platform = inputs.platform if built else None
    if not push:
        return BuildResult(tag, built=built, verified=verified, platform=platform, warnings=warnings)
    entry = inputs.lock_entry(destination.repository, engine.push(tag, progress))
    _record(destination, entry, tag)
    return BuildResult(
        tag,
        built=built,
        pushed=True,
        image=entry.image,
        lock_path=destination.lock_path,
        verified=verified,
        platform=platform,
        warnings=warnings,
    )


def _build(destination: ImageDestination, inputs: ImageInputs, engine: Engine, progress: Progress, tag: str) -> str:
    """Build ``tag`` from the context written for ``inputs``; the JAX version the image holds."""
    with tempfile.TemporaryDirectory(prefix="pwdeploy-image-") as scratch:
        context = Path(scratch, "context.tar")
        with context.open("wb") as out:
            write_context(inputs, out)
        engine.build(context, tag, progress, inputs.platform)
    return verify_jax(engine, tag, inputs.jax_version, destination)


def _record(destination: ImageDestination, entry: lock.LockEntry, tag: str) -> None:
    """The pushed image in the lock; a lock that cannot be written is an error saying what was pushed."""
    try:
        lock.record(destination.lock_path, destination.job_name, entry)
    except OSError as exc:
        raise BuildError(
            f"pushed {tag} as {entry.image}, but cannot record it in {destination.lock_path}: {exc.strerror or exc}",
            hint=f"make {destination.lock_path.parent} writable and run the build again (it will not rebuild), "
            f"or set {destination.pin_field}: {entry.image}",
        ) from None


def verify_jax(engine: Engine, tag: str, expected: str, destination: ImageDestination) -> str:
    """How the built image's jax was found equal to ``expected``: ``destination.jax_check``, and its version command
    where the engine can run the image. A mismatch untags the image (so it is not "up to date" next time) and is a
    BuildError."""
    command = destination.version_command
    if command is None:
        return destination.jax_check
    result = engine.run(tag, list(command))
    if result.cannot_run_here:
        return f"{destination.jax_check} only (this engine cannot run the image's platform)"
    lines = result.stdout.strip().splitlines()  # the version is stdout's last line; warnings go to stderr
    if result.returncode != 0 or not lines:
        output = (result.stdout + result.stderr).strip().splitlines()
        tail = "\n".join(f"    {line}" for line in output[-10:]) or "    (no output)"
        engine.remove(tag)
        raise BuildError(f"built {tag}, but `{shlex.join(command)}` failed in it (exit {result.returncode}):\n{tail}")
    found = lines[-1].strip()
    if found != expected:
        engine.remove(tag)
        raise BuildError(
            f"built {tag}, but `{shlex.join(command)}` finds jax {found} in it while pathways_version is {expected}",
            hint="the client's jax must equal the Pathways server and proxy; check what the base image and "
            "the requirements install (the image was untagged, nothing was pushed)",
        )
    return f"{destination.jax_check} and `{shlex.join(command)}` in the image"


def write_context(inputs: ImageInputs, out: IO[bytes]) -> None:
    """Write the build context as a tar with fixed owners and times (same inputs, same bytes)."""
    import io
    import tarfile  # here, not at the top: render never writes a context

    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        data = inputs.dockerfile.encode()
        _add(tar, "Dockerfile", len(data), 0o644, io.BytesIO(data))
        for item in inputs.files:
            mode = 0o755 if item.executable else 0o644
            if isinstance(item.source, bytes):
                _add(tar, item.name, len(item.source), mode, io.BytesIO(item.source))
                continue
            with open(item.source, "rb") as handle:
                _add(tar, item.name, os.fstat(handle.fileno()).st_size, mode, handle)


def _add(tar: tarfile.TarFile, name: str, size: int, mode: int, handle: IO[bytes]) -> None:
    import tarfile

    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, mode, 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    tar.addfile(info, handle)
