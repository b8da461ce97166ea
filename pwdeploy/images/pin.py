"""Pin pushed images into a job: the sidecar (sidecar.image) and the job image (main.image).

When a field is unset and its repository is set, the digest recorded by ``build --push`` is pinned if the inputs
still hash the same. When they changed, nothing is pinned and a warning says why: ``render`` then stops with
"no pushed ... image matches", while commands that do not need the image (local runs, the builds) go on.
Warnings are returned, never printed: the CLI speaks.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pwdeploy.config import JobConfig
from pwdeploy.images import job as job_image
from pwdeploy.images import lock, sidecar


def pin_pushed(job: JobConfig, config_file: Path | None = None) -> tuple[JobConfig, list[str]]:
    """The job with every pushed image pinned, and the warnings about recorded images that are stale."""
    warnings: list[str] = []
    if job.sidecar.repository is not None and job.sidecar.image is None:
        image = _pushed(
            job,
            sidecar.lock_path(job),
            job.sidecar.repository,
            lambda: sidecar.collect(job).inputs_hash,
            "sidecar",
            "sidecar",
            "sidecar.image",
            warnings,
        )
        if image is not None:
            job = job._replace(sidecar=job.sidecar._replace(image=image))
    if not job.headless and job.image.repository is not None and job.main.image is None:
        image = _pushed(
            job,
            job_image.lock_path(job),
            job.image.repository,
            lambda: job_image.collect(job, config_file).inputs_hash,
            "job image",
            "image",
            "main.image",
            warnings,
        )
        if image is not None:
            job = job._replace(main=job.main._replace(image=image))
    return job, warnings


def _pushed(
    job: JobConfig,
    path: Path,
    repository: str,
    current_hash: Callable[[], str],
    what: str,
    command: str,
    field: str,
    warnings: list[str],
) -> str | None:
    entry = lock.entry_for(path, job.name, repository)
    if entry is None:
        return None
    if current_hash() != entry.inputs_hash:
        warnings.append(
            f"the {what} inputs of {job.name} changed since {entry.image} was pushed (recorded in {path}); not "
            f"using it. Run `pwdeploy {command} build --push` to push the current inputs, or set {field}."
        )
        return None
    return entry.image
