"""``pwdeploy sidecar build``: check the inputs, build unless an image with the same inputs hash exists,
optionally push and record the digest in the lock file.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from pwdeploy.config import JobConfig
from pwdeploy.errors import BuildError
from pwdeploy.sidecar import base, lock
from pwdeploy.sidecar.engine import Engine, Progress
from pwdeploy.sidecar.inputs import HASH_LABEL, SidecarInputs, check_repository, collect, write_context


@dataclass(frozen=True)
class BuildResult:
    tag: str
    built: bool  # False: an image with these inputs already existed ("up to date")
    pushed: bool = False  # False with an image: the lock already held a push of these inputs
    image: str | None = None  # repository@sha256:... once pushed
    lock_path: Path | None = None  # where the pushed digest was recorded


def prepare(job: JobConfig, *, allow_base_mismatch: bool = False) -> SidecarInputs:
    """The checked inputs: ConfigError for a base whose Python/JAX differ from the job's (unless allowed)."""
    inputs = collect(job)
    if not allow_base_mismatch:
        base.check_base(job, inputs.base_image)
    return inputs


def build_sidecar(
    job: JobConfig, engine: Engine, progress: Progress, *, push: bool = False, allow_base_mismatch: bool = False
) -> BuildResult:
    repository = check_repository(job.sidecar.repository)
    inputs = prepare(job, allow_base_mismatch=allow_base_mismatch)
    tag = inputs.tag(repository)
    if push:
        entry = lock.current_entry(job)
        if entry is not None and entry.inputs_hash == inputs.inputs_hash:
            return BuildResult(tag, built=False, image=entry.image, lock_path=lock.lock_path(job))
    engine.check()
    labels = engine.image_labels(tag)
    built = labels is None or labels.get(HASH_LABEL) != inputs.inputs_hash
    if built:
        with tempfile.TemporaryDirectory(prefix="pwdeploy-sidecar-") as scratch:
            context = Path(scratch, "context.tar")
            with context.open("wb") as out:
                write_context(inputs, out)
            engine.build(context, tag, progress)
    if not push:
        return BuildResult(tag, built=built)
    digest = engine.push(tag, progress)
    entry = lock.LockEntry(
        repository=repository, tag=tag, digest=digest, inputs_hash=inputs.inputs_hash,
        base_image=inputs.base_image, jax_version=inputs.jax_version, python_version=inputs.python_version,
    )  # fmt: skip
    path = lock.lock_path(job)
    try:
        lock.record(path, job.name, entry)
    except OSError as exc:
        raise BuildError(
            f"pushed {tag} as {entry.image}, but cannot record it in {path}: {exc.strerror or exc}",
            hint=f"make {path.parent} writable and run the build again (it will not rebuild), "
            f"or set sidecar.image: {entry.image}",
        ) from None
    return BuildResult(tag, built=built, pushed=True, image=entry.image, lock_path=path)
