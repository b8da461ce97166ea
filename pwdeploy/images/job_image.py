"""The job image spec: the job's own (main) container, template docker/Dockerfile.job, lock pwdeploy-image.lock.

A Python base of the client's Python (``image.base``, default the official ``python:<X.Y>-slim-bookworm``), the
jax of the Pathways server and proxy (``jax==<pathways_version>``, checked by a step of the build), the
pathwaysutils installed beside pwdeploy (pinned: its version is part of the inputs hash), ``image.requirements``,
a wheel of pwdeploy when the code imports it, and ``image.source_dir`` (default: the config's folder) copied to /app.
The Python of the default base, the pathwaysutils and pwdeploy versions and the wheel's digest come from the
machine that builds; the lock records them (``lock.BuiltWith``) and ``collect`` takes them back to check a pin.
The working directory is the config's folder as copied (``/app/<its path under source_dir>`` when source_dir is
a folder above it), so ``main.command`` runs as ``pwdeploy local run`` runs it in the config's folder. The
config file itself is not copied: editing it (resources, flags) must not make the pushed image stale.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pwdeploy import __version__
from pwdeploy.config import JobConfig, check_image_pinned, installed_version
from pwdeploy.errors import ConfigError, DependencyError
from pwdeploy.images import inputs, lock, source_folder
from pwdeploy.images.digests import sha256
from pwdeploy.images.inputs import client_python, running_python
from pwdeploy.job_python import check_allowed, choice_note, official_python

if TYPE_CHECKING:  # the build flow is imported by the builds only: render pins without it (subprocess, tempfile)
    from pwdeploy.images.build import BuildResult, ImageDestination
    from pwdeploy.images.engine import Engine, Progress

TEMPLATE = "Dockerfile.job"
APP = "/app"  # where image.source_dir is copied
VERSION_COMMAND = ("python", "-c", "import jax; print(jax.__version__)")
JAX_CHECK = "a step of the build"  # the RUN after the jax install in the Dockerfile


def wheel_name(version: str = __version__) -> str:
    """The file name of the pwdeploy wheel (``wheel.build_wheel``) an image whose code imports pwdeploy gets."""
    return f"pwdeploy-{version}-py3-none-any.whl"


def lock_path(job: JobConfig) -> Path:
    return job.base_dir / lock.JOB_IMAGE_LOCK


def base_image(job: JobConfig, running: str | None = None) -> str:
    """``image.base``, else the official slim Python image of the client's Python (``running``: as in
    ``client_python``)."""
    if job.image.base is None:
        return f"python:{client_python(job, running)}-slim-bookworm"
    check_image_pinned(job.image.base, "image.base")
    official = official_python(job.image.base)
    if official:
        check_allowed(job, official, "image.base", job.image.base)
    if official and job.sidecar.enabled and official != client_python(job, running):
        raise ConfigError(
            "image.base",
            f"{job.image.base} runs Python {official}, but the sidecar is built for the client's Python "
            f"{client_python(job, running)}; colocated Python needs both equal",
            hint="use a base of the same Python, or set sidecar.python_version to the base's",
        )
    return job.image.base


def installed_pathwaysutils() -> str | None:
    """The version of the pathwaysutils beside pwdeploy, from its dist-info folder name (no import, no metadata)."""
    return installed_version("pathwaysutils")


def collect(
    job: JobConfig,
    config_file: Path | None = None,
    *,
    built_with: lock.BuiltWith | None = None,
    machine: lock.BuiltWith | None = None,
    build_wheel: Callable[[str], bytes] | None = None,
) -> inputs.ImageInputs:
    """Gather and hash the inputs (``config_file`` is left out of the copied folder); ConfigError for a missing
    source directory or requirements file, DependencyError when pathwaysutils is not installed here.

    ``built_with``: the machine's parameters recorded with a pushed image, to check it (its recorded wheel digest
    stands for the wheel, which is then not built). ``machine``: the parameters of the machine that builds, used
    where ``built_with`` is not given (default this machine's, ``built_with_here()``; its ``pwdeploy_wheel`` is
    not read: the wheel is built). ``build_wheel``: makes the wheel of a pwdeploy version (default
    ``wheel.build_wheel``).
    """
    found = _gather(job, config_file, built_with, machine, build_wheel)
    return inputs.assemble(
        TEMPLATE,
        found.values,
        found.blocks,
        (*found.before, *found.code.files(), *found.after),
        base_image=found.base_image,
        python_version=found.python_version,
        jax_version=job.pathways_version,
        warnings=(
            *found.code.credential_warnings(found.field),
            *filter(None, [choice_note(job, found.built_with.python)]),
            *_extras_notes(job, found.code),
        ),
        built_with=found.built_with,
    )


def _extras_notes(job: JobConfig, code: inputs.Folder) -> list[str]:
    from pwdeploy.images.extras import extras_notes  # only when an image is made: render never reads extras

    return extras_notes(job, (code.root / name for name in code.names if name.endswith(".py")))


def inputs_hash(
    job: JobConfig,
    config_file: Path | None = None,
    *,
    built_with: lock.BuiltWith | None = None,
    machine: lock.BuiltWith | None = None,
    build_wheel: Callable[[str], bytes] | None = None,
) -> str:
    """``collect(...).inputs_hash``, without a context file made per file of the folder: what render checks a pinned
    image by (arguments as ``collect``'s)."""
    found = _gather(job, config_file, built_with, machine, build_wheel)
    return inputs.inputs_hash(
        TEMPLATE,
        found.values,
        found.blocks,
        (*found.before, found.code, *found.after),
        base_image=found.base_image,
        python_version=found.python_version,
        jax_version=job.pathways_version,
    )


class _Gathered:
    """What ``collect`` and ``inputs_hash`` gather (a plain class: render imports this module, and each NamedTuple
    class costs its start-up 70 us)."""

    __slots__ = ("after", "base_image", "before", "blocks", "built_with", "code", "field", "python_version", "values")

    def __init__(
        self,
        field: str,  # of the source folder
        code: inputs.Folder,
        before: tuple[inputs.ContextFile, ...],  # the context files before the folder's, then after them
        after: tuple[inputs.ContextFile, ...],
        values: dict[str, str],
        blocks: dict[str, bool],
        base_image: str,
        python_version: str,
        built_with: lock.BuiltWith,
    ) -> None:
        self.field, self.code, self.before, self.after = field, code, before, after
        self.values, self.blocks, self.base_image = values, blocks, base_image
        self.python_version, self.built_with = python_version, built_with


def _gather(
    job: JobConfig,
    config_file: Path | None,
    built_with: lock.BuiltWith | None,
    machine: lock.BuiltWith | None,
    build_wheel: Callable[[str], bytes] | None,
) -> _Gathered:
    source = job.image.source_dir or job.base_dir
    field = "image.source_dir"
    skip = frozenset({config_file.resolve()}) if config_file is not None else frozenset()
    code = source_folder.scan(source, field, "code", skip=skip)
    if not code.names:
        raise ConfigError(field, f"{source} holds no files to copy into the image")
    before: tuple[inputs.ContextFile, ...] = ()
    if job.image.requirements is not None:
        before = (inputs.requirements_file(job.image.requirements, "image.requirements"),)
    needs_pwdeploy = code.imports_pwdeploy()  # .py files only: digests.IMPORTS_PWDEPLOY
    python, version, pathwaysutils = _built_with(built_with, machine)
    wheel_digest, after = _wheel(version, built_with, build_wheel) if needs_pwdeploy else (None, ())
    values = {
        "workdir": workdir(job),
        "pwdeploy_version": version,
        "pip_args": "".join(" " + shlex.quote(arg) for arg in job.image.pip_args),
        "pwdeploy_wheel": wheel_name(version),
        "pathwaysutils_version": pathwaysutils,
    }
    blocks = {"requirements": job.image.requirements is not None, "pwdeploy": needs_pwdeploy}
    base = base_image(job, python)
    official = official_python(base)
    return _Gathered(
        field,
        code,
        before,
        after,
        values,
        blocks,
        base,
        official or client_python(job, python),
        lock.BuiltWith(python, version, pathwaysutils, wheel_digest),
    )


def _built_with(built_with: lock.BuiltWith | None, machine: lock.BuiltWith | None) -> tuple[str, str, str]:
    """(Python, pwdeploy, pathwaysutils) the image is built with: the recorded ones, else this machine's."""
    if built_with is not None and built_with.pathwaysutils:  # all a check needs: this machine is not asked
        return built_with.python, built_with.pwdeploy, built_with.pathwaysutils
    here = machine or built_with_here()
    python = built_with.python if built_with else here.python
    version = built_with.pwdeploy if built_with else here.pwdeploy
    return python, version, _pathwaysutils_pin(here.pathwaysutils)


def _wheel(
    version: str, built_with: lock.BuiltWith | None, build_wheel: Callable[[str], bytes] | None
) -> tuple[str, tuple[inputs.ContextFile, ...]]:
    """(the pwdeploy wheel's digest, the context file): the recorded wheel's digest is all the hash needs."""
    wheel_digest = built_with.pwdeploy_wheel if built_with else None
    if wheel_digest is not None:
        return wheel_digest, (inputs.ContextFile(wheel_name(version), b"", digest=wheel_digest),)
    data = (build_wheel or _build_wheel)(version)
    return sha256(data).hexdigest(), (inputs.ContextFile(wheel_name(version), data),)


def _build_wheel(version: str) -> bytes:
    from pwdeploy.images.wheel import build_wheel  # here: render checks a pin by the recorded wheel's digest

    return build_wheel(version)


def workdir(job: JobConfig) -> str:
    """Where ``main.command`` runs in the image: the config's folder as copied under /app.

    A source_dir that does not hold the config's folder is copied to /app, which is then the working directory;
    ``main.command`` must then name paths as they are in that folder.
    """
    source = (job.image.source_dir or job.base_dir).resolve()
    try:
        relative = job.base_dir.resolve().relative_to(source)
    except ValueError:
        return APP
    return APP if relative == Path() else f"{APP}/{relative.as_posix()}"


def destination(job: JobConfig) -> ImageDestination:
    from pwdeploy.images.build import ImageDestination

    repository = inputs.check_repository(job.image.repository, "image.repository", "job image")
    return ImageDestination(repository, job.name, lock_path(job), "main.image", JAX_CHECK, VERSION_COMMAND)


def build(
    job: JobConfig, engine: Engine, progress: Progress, *, push: bool = False, config_file: Path | None = None
) -> BuildResult:
    from pwdeploy.images.build import build_image

    where = destination(job)
    return build_image(where, collect(job, config_file), engine, progress, push=push)


def _pathwaysutils_pin(version: str | None) -> str:
    if version is None:
        raise DependencyError(
            "pathwaysutils is not installed beside pwdeploy; the job image pins the client's pathwaysutils to it",
            hint="pip install pathwaysutils (in the environment that runs pwdeploy)",
        )
    return version


def built_with_here() -> lock.BuiltWith:
    """This machine's build parameters, as far as render compares them (the wheel's digest is left out)."""
    return lock.BuiltWith(python=running_python(), pwdeploy=__version__, pathwaysutils=installed_pathwaysutils())
