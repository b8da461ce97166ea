"""The job's container images: the job image (main's) and the colocated-Python sidecar image, their Dockerfiles
and their builds on a docker engine, pushed and recorded beside the config when asked (docs/api.md, "Images")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pwdeploy.api.job_api import PathLike, given_job

if TYPE_CHECKING:
    from pwdeploy.config.model import JobConfig
    from pwdeploy.images.build import BuildResult
    from pwdeploy.images.engine import BuildStep, Engine, Progress
    from pwdeploy.images.inputs import ImageInputs


def image_inputs(job: JobConfig, *, config_file: PathLike | None = None) -> ImageInputs:
    """What `pwdeploy image build` would build for the job (``pwdeploy image dockerfile``): ``dockerfile``, the
    base image, the Python and jax versions, the files it copies, the inputs' hash and ``warnings`` (files that
    look like credentials). ``config_file``: the config the job was read from, whose folder is the default
    source."""
    from pwdeploy import arguments
    from pwdeploy.images.job_image import collect

    return collect(given_job(job), arguments.optional_path(config_file, "config_file"))


def build_image(
    job: JobConfig,
    *,
    push: bool = False,
    config_file: PathLike | None = None,
    progress: Progress | None = None,
    engine: Engine | None = None,
) -> BuildResult:
    """Build the job image as image.repository:<inputs hash> (``pwdeploy image build``); unchanged inputs are not
    rebuilt. With ``push``, push it and record its digest beside the config, where ``load(pin_images=True)`` and
    `render` pin main.image to it. ``progress`` hears each step and output line (default: nowhere); ``engine``
    defaults to the docker engine ``DOCKER_HOST`` (or the current docker context) names. Raises ``BuildError``."""
    from pwdeploy import arguments
    from pwdeploy.images import job_image

    config = arguments.optional_path(config_file, "config_file")
    chosen, heard = _engine(engine), progress or _Unheard()
    return job_image.build(given_job(job), chosen, heard, push=push, config_file=config)


def sidecar_inputs(job: JobConfig, *, allow_base_mismatch: bool = False) -> ImageInputs:
    """What `pwdeploy sidecar build` would build (``pwdeploy sidecar dockerfile``): as ``image_inputs``, for the
    colocated-Python sidecar. A base image whose python_X.Y / jax_V differ from the job's is a ``ConfigError``
    unless ``allow_base_mismatch``."""
    from pwdeploy.images.sidecar_image import prepare

    return prepare(given_job(job), allow_base_mismatch=allow_base_mismatch)


def build_sidecar(
    job: JobConfig,
    *,
    push: bool = False,
    allow_base_mismatch: bool = False,
    progress: Progress | None = None,
    engine: Engine | None = None,
) -> BuildResult:
    """Build the sidecar image as sidecar.repository:<inputs hash> (``pwdeploy sidecar build``), as
    ``build_image`` builds the job image; with ``push``, the workers' sidecar is pinned to the pushed digest."""
    from pwdeploy.images import sidecar_image

    chosen, heard = _engine(engine), progress or _Unheard()
    return sidecar_image.build(given_job(job), chosen, heard, push=push, allow_base_mismatch=allow_base_mismatch)


def _engine(engine: Engine | None) -> Engine:
    from pwdeploy.images.engine import DockerCli

    return DockerCli() if engine is None else engine


class _Unheard:
    """A build's progress heard by no one."""

    def step(self, step: BuildStep) -> None:
        pass

    def line(self, text: str) -> None:
        pass
