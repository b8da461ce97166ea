"""The job without a cluster: its config loaded and validated, its manifests rendered and validated, its program
checked (docs/api.md, "The job")."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from pwdeploy.check.results import Report
    from pwdeploy.config.model import JobConfig
    from pwdeploy.manifests.common import Manifest

PathLike = str | os.PathLike[str]


def load(
    config: PathLike | Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    installed_jax: Callable[[], str | None] | None = None,
) -> JobConfig:
    """The job config, validated: from a YAML file (a path) or a mapping as the file would hold it (nested:
    ``{"tpu": {"type": "v5p-8"}}``, or dotted keys: ``{"tpu.type": "v5p-8"}``), with ``overrides`` on top.

    ``overrides`` are dotted config paths (``{"tpu.slices": 4}``) and merge as the command-line flags do: an env
    map key by key, XLA flags flag by flag. A mapping's relative paths are read from the current directory, a
    file's from its folder. ``installed_jax`` gives the jax version the images must match (default: the installed
    distribution's, read without importing jax). Every problem is raised at once: ``ConfigError`` (one) or
    ``ConfigErrors`` (several), each naming its field.
    """
    from pwdeploy import arguments
    from pwdeploy.config.load import flatten, load_job, merge
    from pwdeploy.errors import ArgumentError

    overrides = arguments.mapping(overrides, "overrides")
    if config is None or isinstance(config, str | os.PathLike):
        return load_job(None if config is None else Path(config), overrides, installed_jax=installed_jax)
    if not isinstance(config, Mapping):
        raise ArgumentError("config", f"a job config is a path or a mapping, not a {type(config).__name__}")
    flat = flatten(config)
    given = merge(flat, overrides or {})
    sources = dict.fromkeys(flat, "the config mapping") | dict.fromkeys(overrides or {}, "overrides")
    return load_job(None, given, sources=sources, installed_jax=installed_jax)


def warnings(job: JobConfig) -> list[str]:
    """What ``render`` and ``submit`` warn of: a valid job that is likely to go wrong (a literal credential in
    ``main.env``, a reclaimed capacity mode without restarts, ...)."""
    from pwdeploy.advice import job_warnings

    return list(job_warnings(given_job(job)))


def render(job: JobConfig, *, validate: bool = True) -> list[Manifest]:
    """The job's Kubernetes objects (the JobSet, and what goes with it), as plain dicts in a stable order; with
    ``validate``, checked against the Kubernetes and JobSet schemas and webhook rules first (``ValidationError``
    lists every problem)."""
    from pwdeploy import manifests

    objects = manifests.build(given_job(job))
    if validate:
        from pwdeploy.validation.validate import require_valid

        require_valid(objects)
    return objects


def validate(objects: Sequence[Mapping[str, Any]]) -> list[str]:
    """The problems the schemas and webhook rules find in ``objects`` (rendered or read from files); empty when
    the API server and JobSet's webhook would accept them."""
    from pwdeploy import arguments
    from pwdeploy.validation.validate import validate_objects

    return validate_objects(arguments.sequence(objects, "objects", "[jobset]"))


def to_yaml(objects: Sequence[Manifest]) -> str:
    """The objects as ``pwdeploy render`` prints them (YAML documents, deterministic), for ``kubectl apply -f -``."""
    from pwdeploy import arguments, manifests

    return manifests.to_yaml(list(arguments.sequence(objects, "objects", "api.render(job)")))  # type: ignore[arg-type]


def check(
    job: JobConfig | None = None, paths: Sequence[PathLike] = (), *, config_file: PathLike | None = None
) -> Report:
    """The program check (``pwdeploy check``) over the job's entry module, what it imports from the job's folder,
    and ``paths``. Without ``job``, the job is ``config_file``'s (``check(config_file="job.yaml")``); without
    either, only ``paths`` are read. The report's ``errors`` are what would make the command exit with
    ``CheckError``'s code; this function returns them rather than raising. ``config_file`` also lets findings
    point at the config's lines."""
    from pwdeploy import arguments
    from pwdeploy.check import check as run_check

    checked = arguments.paths(paths, "paths")
    config = arguments.optional_path(config_file, "config_file")
    if job is None and config is not None:
        job = load(config)
    return run_check(None if job is None else given_job(job), list(checked), config_file=config)


def given_job(job: object) -> JobConfig:
    """A caller's job: what ``load`` returns (a mapping or a path is ``load``'s to read first)."""
    from pwdeploy.arguments import a_kind
    from pwdeploy.config.model import JobConfig
    from pwdeploy.errors import ArgumentError

    if not isinstance(job, JobConfig):
        raise ArgumentError("job", f"must be a JobConfig, not {a_kind(job)}", hint="job = api.load(...)")
    return job
