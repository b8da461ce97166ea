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

import hashlib
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pwdeploy import __version__
from pwdeploy.config import JobConfig, check_image_pinned, installed_version
from pwdeploy.errors import ConfigError, DependencyError
from pwdeploy.images import inputs, lock, wheel
from pwdeploy.images.inputs import client_python, running_python

if TYPE_CHECKING:  # the build flow is imported by the builds only: render pins without it (subprocess, tempfile)
    from pwdeploy.images.build import BuildResult, ImageDestination
    from pwdeploy.images.engine import Engine, Progress

TEMPLATE = "Dockerfile.job"
APP = "/app"  # where image.source_dir is copied
VERSION_COMMAND = ("python", "-c", "import jax; print(jax.__version__)")
JAX_CHECK = "a step of the build"  # the RUN after the jax install in the Dockerfile
_OFFICIAL_PYTHON = re.compile(r"(?:docker\.io/)?(?:library/)?python:([0-9]+\.[0-9]+)\b.*")


def lock_path(job: JobConfig) -> Path:
    return job.base_dir / lock.JOB_IMAGE_LOCK


def base_image(job: JobConfig, running: str | None = None) -> str:
    """``image.base``, else the official slim Python image of the client's Python (``running``: as in
    ``client_python``)."""
    if job.image.base is None:
        return f"python:{client_python(job, running)}-slim-bookworm"
    check_image_pinned(job.image.base, "image.base")
    official = _OFFICIAL_PYTHON.fullmatch(job.image.base)
    if official and job.sidecar.enabled and official.group(1) != client_python(job, running):
        raise ConfigError(
            "image.base",
            f"{job.image.base} runs Python {official.group(1)}, but the sidecar is built for the client's Python "
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
    build_wheel: Callable[[str], bytes] = wheel.build_wheel,
) -> inputs.ImageInputs:
    """Gather and hash the inputs (``config_file`` is left out of the copied folder); ConfigError for a missing
    source directory or requirements file, DependencyError when pathwaysutils is not installed here.

    ``built_with``: the machine's parameters recorded with a pushed image, to check it (its recorded wheel digest
    stands for the wheel, which is then not built). ``machine``: the parameters of the machine that builds, used
    where ``built_with`` is not given (default this machine's, ``built_with_here()``; its ``pwdeploy_wheel`` is
    not read: the wheel is built). ``build_wheel``: makes the wheel of a pwdeploy version.
    """
    source = job.image.source_dir or job.base_dir
    field = "image.source_dir"
    skip = frozenset({config_file.resolve()}) if config_file is not None else frozenset()
    code = inputs.directory_files(source, field, "code", skip=skip)
    if not code:
        raise ConfigError(field, f"{source} holds no files to copy into the image")
    warnings = inputs.credential_warnings(code, source, field, "code")
    files = [*code]
    if job.image.requirements is not None:
        files.insert(0, inputs.requirements_file(job.image.requirements, "image.requirements"))
    needs_pwdeploy = any(item.imports_pwdeploy for item in code)  # .py files only: digests.IMPORTS_PWDEPLOY
    here = machine or built_with_here()
    python = built_with.python if built_with else here.python
    version = built_with.pwdeploy if built_with else here.pwdeploy
    pathwaysutils = (built_with and built_with.pathwaysutils) or _pathwaysutils_pin(here.pathwaysutils)
    wheel_digest = None
    if needs_pwdeploy:
        wheel_digest = built_with.pwdeploy_wheel if built_with else None
        if wheel_digest is None:
            data = build_wheel(version)
            wheel_digest = hashlib.sha256(data).hexdigest()
            files.append(inputs.ContextFile(wheel.wheel_name(version), data))
        else:  # the recorded wheel: its digest is all the hash needs
            files.append(inputs.ContextFile(wheel.wheel_name(version), b"", digest=wheel_digest))
    values = {
        "workdir": workdir(job),
        "pwdeploy_version": version,
        "pip_args": "".join(" " + shlex.quote(arg) for arg in job.image.pip_args),
        "pwdeploy_wheel": wheel.wheel_name(version),
        "pathwaysutils_version": pathwaysutils,
    }
    blocks = {"requirements": job.image.requirements is not None, "pwdeploy": needs_pwdeploy}
    base = base_image(job, python)
    official = _OFFICIAL_PYTHON.fullmatch(base)
    return inputs.assemble(
        TEMPLATE,
        values,
        blocks,
        tuple(files),
        base_image=base,
        python_version=official.group(1) if official else client_python(job, python),
        jax_version=job.pathways_version,
        warnings=warnings,
        built_with=lock.BuiltWith(python, version, pathwaysutils, wheel_digest),
    )


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
