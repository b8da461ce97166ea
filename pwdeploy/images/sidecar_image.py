"""The colocated-Python sidecar spec: the Pathways colocated-Python base plus sidecar.requirements and
sidecar.source_dir (in /app), template docker/Dockerfile.sidecar, lock file pwdeploy-sidecar.lock.

The base image fixes the sidecar's Python and jax/jaxlib. pathwaysutils refuses to connect a client whose Python
minor version or jax differs from the sidecar's, so pwdeploy reads both from the base tag
(``<date>-python_<X.Y>-jax_<V>``) and compares them with the job before building anything.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from pwdeploy import __version__, sidecar_imports
from pwdeploy.config import JobConfig, check_image_pinned
from pwdeploy.errors import ConfigError
from pwdeploy.images import inputs, lock, source_folder
from pwdeploy.images.inputs import client_python, running_python

if TYPE_CHECKING:  # the build flow is imported by the builds only: render pins without it (subprocess, tempfile)
    from pwdeploy.images.base_check import ImageLookup
    from pwdeploy.images.build import BuildResult, ImageDestination
    from pwdeploy.images.engine import Engine, Progress

TEMPLATE = "Dockerfile.sidecar"

DEFAULT_BASE_REPOSITORY = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways-colocated-python/sidecar"
_RELEASE = re.compile(r"[0-9]{8}")
_BASE_TAG = re.compile(r"(?:.*[-_])?python_(?P<python>[0-9]+\.[0-9]+)-jax_(?P<jax>[0-9]+\.[0-9]+\.[0-9]+)(?:[-_].*)?")


def built_with_here() -> lock.BuiltWith:
    """The sidecar's build parameters that come from this machine."""
    return lock.BuiltWith(python=running_python(), pwdeploy=__version__)


def base_image(job: JobConfig, running: str | None = None) -> str:
    """``sidecar.base_image``, else the Pathways base for this JAX version, client Python and base_release."""
    if job.sidecar.base_image is not None:
        check_image_pinned(job.sidecar.base_image, "sidecar.base_image")
        return job.sidecar.base_image
    release = job.sidecar.base_release
    if release is None:
        raise ConfigError(
            "sidecar.base_release",
            "is required unless sidecar.base_image is set: it is the date part of the base tag "
            f"{DEFAULT_BASE_REPOSITORY}:<date>-python_{client_python(job, running)}-jax_{job.pathways_version}",
            hint=f"list the released tags with `gcloud artifacts docker tags list {DEFAULT_BASE_REPOSITORY}` "
            'and set e.g. sidecar.base_release: "20260423" (or --sidecar-base-release)',
        )
    if not _RELEASE.fullmatch(release):
        raise ConfigError("sidecar.base_release", f"{release!r} is not a release date such as 20260423 (YYYYMMDD)")
    return f"{DEFAULT_BASE_REPOSITORY}:{release}-python_{client_python(job, running)}-jax_{job.pathways_version}"


def base_versions(image: str) -> tuple[str, str] | None:
    """(python X.Y, jax V) named by the image's tag, or None when the tag does not say."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    match = _BASE_TAG.fullmatch(last.split(":", 1)[1])
    return (match.group("python"), match.group("jax")) if match else None


def check_base(job: JobConfig, image: str) -> None:
    """ConfigError when the base image's Python or JAX differs from the job's (or its tag does not say)."""
    versions = base_versions(image)
    override = "pass --allow-base-mismatch to build anyway (experts: the client will refuse to connect)"
    if versions is None:
        raise ConfigError(
            "sidecar.base_image",
            f"{image!r}: cannot tell its Python and JAX versions; its tag must end in python_X.Y-jax_V "
            "like the Pathways base images",
            hint=f"tag it e.g. :custom-python_{client_python(job)}-jax_{job.pathways_version}, or {override}",
        )
    python, jax = versions
    problems = []
    if jax != job.pathways_version:
        problems.append(f"jax {jax} differs from pathways_version {job.pathways_version}")
    if python != client_python(job):
        problems.append(f"python {python} differs from the client's Python {client_python(job)}")
    if problems:
        field = "sidecar.base_image" if job.sidecar.base_image else "sidecar.base_release"
        raise ConfigError(
            field,
            f"base image {image}: " + "; ".join(problems),
            hint="the client, the Pathways images and the sidecar must run the same Python and JAX; " + override,
        )


def lock_path(job: JobConfig) -> Path:
    return job.base_dir / lock.SIDECAR_LOCK


def collect(
    job: JobConfig, built_with: lock.BuiltWith | None = None, *, machine: lock.BuiltWith | None = None
) -> inputs.ImageInputs:
    """Gather and hash the inputs; ConfigError for a missing source directory or requirements file.

    ``built_with``: the machine's parameters recorded with a pushed image, to check it. ``machine``: the
    parameters of the machine that builds, used where ``built_with`` is not given (default this machine's,
    ``built_with_here()``).
    """
    machine = built_with or machine or built_with_here()
    files, code = _parts(job)
    if code is not None:
        files = [*files, *code.files()]
    return inputs.assemble(
        TEMPLATE,
        *_template_inputs(job, machine),
        tuple(files),
        base_image=base_image(job, machine.python),
        python_version=client_python(job, machine.python),
        jax_version=job.pathways_version,
        warnings=(
            *(code.credential_warnings("sidecar.source_dir") if code is not None else ()),
            *filter(None, [sidecar_imports.orbax_mismatch(job)]),
        ),
        built_with=lock.BuiltWith(python=machine.python, pwdeploy=machine.pwdeploy),
    )


def inputs_hash(
    job: JobConfig, built_with: lock.BuiltWith | None = None, *, machine: lock.BuiltWith | None = None
) -> str:
    """``collect(...).inputs_hash`` without a context file made per file of sidecar.source_dir: what render checks
    a pinned sidecar by (arguments as ``collect``'s)."""
    machine = built_with or machine or built_with_here()
    files, code = _parts(job)
    return inputs.inputs_hash(
        TEMPLATE,
        *_template_inputs(job, machine),
        [*files, code] if code is not None else files,
        base_image=base_image(job, machine.python),
        python_version=client_python(job, machine.python),
        jax_version=job.pathways_version,
    )


def _parts(job: JobConfig) -> tuple[list[inputs.ContextFile], inputs.Folder | None]:
    """The import test's script, the requirements file (when set) and the scanned sidecar.source_dir (when set),
    in the context's order."""
    files = [inputs.ContextFile(sidecar_imports.SCRIPT_NAME, sidecar_imports.SCRIPT.encode())]
    if job.sidecar.requirements is not None:
        files.append(inputs.requirements_file(job.sidecar.requirements, "sidecar.requirements"))
    code = None
    if job.sidecar.source_dir is not None:
        code = source_folder.scan(job.sidecar.source_dir, "sidecar.source_dir", "code")
    return files, code


def _template_inputs(job: JobConfig, machine: lock.BuiltWith) -> tuple[dict[str, str], dict[str, bool]]:
    values = {
        "pwdeploy_version": machine.pwdeploy,
        "pip_args": "".join(" " + shlex.quote(arg) for arg in job.sidecar.pip_args),
        "import_args": "".join(" " + shlex.quote(arg) for arg in sidecar_imports.arguments(job)),
    }
    return values, {"requirements": job.sidecar.requirements is not None, "source": job.sidecar.source_dir is not None}


def prepare(job: JobConfig, *, allow_base_mismatch: bool = False) -> inputs.ImageInputs:
    """The checked inputs: ConfigError for a base whose Python/JAX differ from the job's (unless allowed)."""
    found = collect(job)
    if not allow_base_mismatch:
        check_base(job, found.base_image)
    return found


def destination(job: JobConfig) -> ImageDestination:
    from pwdeploy.images.build import ImageDestination

    repository = inputs.check_repository(job.sidecar.repository, "sidecar.repository", "sidecar")
    return ImageDestination(
        repository, job.name, lock_path(job), "sidecar.image", "the base image's tag (jax_V), before the build"
    )


def build(
    job: JobConfig,
    engine: Engine,
    progress: Progress,
    *,
    push: bool = False,
    allow_base_mismatch: bool = False,
    base_lookup: ImageLookup | None = None,
) -> BuildResult:
    """``base_lookup``: asks a registry for the base image before a build (default: preflight's client)."""
    import dataclasses

    from pwdeploy.images.base_check import check_base_exists
    from pwdeploy.images.build import build_image

    where = destination(job)
    if allow_base_mismatch:
        where = dataclasses.replace(where, jax_check="nothing (--allow-base-mismatch)")
    found = prepare(job, allow_base_mismatch=allow_base_mismatch)
    where = dataclasses.replace(
        where,
        base_check=lambda engine: check_base_exists(job, found.base_image, found.python_version, engine, base_lookup),
    )
    return build_image(where, found, engine, progress, push=push)
