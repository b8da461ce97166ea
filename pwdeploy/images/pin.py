"""Pin pushed images into a job: the sidecar (sidecar.image) and the job image (main.image).

When a field is unset and its repository is set, the digest recorded by ``build --push`` is pinned if the inputs
still hash the same. The hash is recomputed with the build parameters recorded in the lock (the Python, pwdeploy
and pathwaysutils versions of the machine that built), so only the job's files and config decide: a machine with
other versions still pins, with a warning naming the difference. When the inputs changed, nothing is pinned and a
warning says why: ``render`` then stops with "no pushed ... image matches", while commands that do not need the
image (the builds) go on. Warnings are returned, never printed: the CLI speaks.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pwdeploy.config import JobConfig
from pwdeploy.images import job_image, lock


def pin_pushed(
    job: JobConfig,
    config_file: Path | None = None,
    *,
    machine: lock.BuiltWith | None = None,
    build_wheel: Callable[[str], bytes] | None = None,
) -> tuple[JobConfig, list[str]]:
    """The job with every pushed image pinned, and the warnings about recorded images that are stale or were
    built with other versions than this machine's.

    ``machine``: the build parameters of this machine (default ``built_with_here()`` of each image), those a
    rebuild would use and the warnings compare with. ``build_wheel``: as in ``job_image.collect``.
    """
    warnings: list[str] = []
    if job.sidecar.repository is not None and job.sidecar.image is None:
        image = _pushed_sidecar(job, machine, warnings)
        if image is not None:
            job = job._replace(sidecar=job.sidecar._replace(image=image))
    if not job.headless and job.image.repository is not None and job.main.image is None:
        image = _pushed(
            job,
            job_image.lock_path(job),
            job.image.repository,
            lambda built_with: job_image.inputs_hash(
                job, config_file, built_with=built_with, machine=machine, build_wheel=build_wheel
            ),
            lambda: machine or job_image.built_with_here(),
            ("job image", "image", "main.image"),
            warnings,
        )
        if image is not None:
            job = job._replace(main=job.main._replace(image=image))
    return job, warnings


def _pushed_sidecar(job: JobConfig, machine: lock.BuiltWith | None, warnings: list[str]) -> str | None:
    from pwdeploy.images import sidecar_image  # here: a job without a sidecar to pin does not import it

    assert job.sidecar.repository is not None
    return _pushed(
        job,
        sidecar_image.lock_path(job),
        job.sidecar.repository,
        lambda built_with: sidecar_image.inputs_hash(job, built_with, machine=machine),
        lambda: machine or sidecar_image.built_with_here(),
        ("sidecar", "sidecar", "sidecar.image"),
        warnings,
    )


def _pushed(
    job: JobConfig,
    path: Path,
    repository: str,
    inputs_hash: Callable[[lock.BuiltWith | None], str],
    here: Callable[[], lock.BuiltWith],
    names: tuple[str, str, str],
    warnings: list[str],
) -> str | None:
    what, command, field = names
    entry = lock.pinned_entry(path, job.name, repository, f"{command}.repository", command)
    if entry is None:
        return None
    # An entry without built_with (written before it was recorded) is checked with this machine's parameters.
    if inputs_hash(entry.built_with) != entry.inputs_hash:
        warnings.append(
            f"the {what} inputs of {job.name} changed since {entry.image} was pushed (recorded in {path}); not "
            f"using it. Run `pwdeploy {command} build --push` to push the current inputs, or set {field}."
        )
        return None
    if entry.built_with is not None:
        built, now = differences(job, entry.built_with, here())
        if built:
            warnings.append(
                f"the {what} {entry.image} of {job.name} was built with {built}, this machine has {now}; using it "
                f"(the job's files and config are unchanged). Run `pwdeploy {command} build --push` to rebuild it "
                "with this machine's versions."
            )
    return entry.image


def differences(job: JobConfig, built: lock.BuiltWith, here: lock.BuiltWith) -> tuple[str, str]:
    """The recorded and the current versions that differ, as text ("" when none): the ones a rebuild here would
    change (the client's Python only when sidecar.python_version does not fix it)."""
    pairs: list[tuple[str, str, str | None]] = [("pwdeploy", built.pwdeploy, here.pwdeploy)]
    if job.sidecar.python_version is None:
        pairs.insert(0, ("Python", built.python, here.python))
    if built.pathwaysutils is not None:
        pairs.append(("pathwaysutils", built.pathwaysutils, here.pathwaysutils))
    changed = [(name, old, new) for name, old, new in pairs if old != new]
    return (
        ", ".join(f"{name} {old}" for name, old, _ in changed),
        ", ".join(f"{name} {new}" if new is not None else f"no {name}" for name, _, new in changed),
    )
