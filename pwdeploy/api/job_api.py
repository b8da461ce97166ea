"""The job without a cluster: its config loaded and validated, its manifests rendered and validated, its program
checked (docs/api.md, "The job")."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TextIO

    from pwdeploy.check.results import Report
    from pwdeploy.config.model import JobConfig
    from pwdeploy.finding import Finding
    from pwdeploy.manifests.common import Manifest

PathLike = str | os.PathLike[str]


def load(
    config: PathLike | Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    sources: Mapping[str, str] | None = None,
    pin_images: bool = False,
    on_warning: Callable[[str], None] | None = None,
    installed_jax: Callable[[], str | None] | None = None,
) -> JobConfig:
    """The job config, validated: from a YAML file (a path) or a mapping as the file would hold it (nested:
    ``{"tpu": {"type": "v5p-8"}}``, or dotted keys: ``{"tpu.type": "v5p-8"}``), with ``overrides`` on top.

    ``overrides`` are dotted config paths (``{"tpu.slices": 4}``) and merge as the command-line flags do: an env
    map key by key, XLA flags flag by flag; ``sources`` says where each came from (``{"tpu.slices":
    "--num-slices"}``), for the errors. A mapping's relative paths are read from the current directory, a file's
    from its folder. With ``pin_images``, the images `pwdeploy image build --push` and `sidecar build --push`
    recorded beside the config are pinned by digest, as `render` pins them. ``on_warning`` hears what may be
    meant otherwise (a value an environment variable replaced, an HLO dump with nowhere to go, a stale pushed
    image). ``installed_jax`` gives the jax version the images must match (default: the installed distribution's,
    read without importing jax). Every problem is raised at once: ``ConfigError`` (one) or ``ConfigErrors``
    (several), each naming its field.
    """
    if not (overrides is None or isinstance(overrides, Mapping)) or not _names_sources(sources):
        from pwdeploy import arguments  # only to say what is wrong: render's path loads no argument checks

        arguments.mapping(overrides, "overrides")
        arguments.environment(sources, "sources")
    notes: list[str] = []  # values used as given where something else may have been meant
    file = Path(config) if isinstance(config, str | os.PathLike) else None
    job = _read(config, overrides or {}, dict(sources or {}), installed_jax, notes)
    warn = on_warning or _unheard
    for line in [*notes, *_load_warnings(job, file)]:
        warn(line)
    if pin_images and (job.sidecar.repository or job.image.repository):
        from pwdeploy.images.pin import pin_pushed  # the lock files beside the config

        job, pinned = pin_pushed(job, file)
        for line in pinned:
            warn(line)
    return job


def _read(
    config: object,
    overrides: Mapping[str, Any],
    named: dict[str, str],
    installed_jax: Callable[[], str | None] | None,
    notes: list[str],
) -> JobConfig:
    """The job from a file's path (or none) or a mapping, with the overrides on top."""
    from pwdeploy.config.load import flatten, load_job, merge
    from pwdeploy.errors import ArgumentError

    if config is None or isinstance(config, str | os.PathLike):
        file = None if config is None else Path(config)
        return load_job(file, overrides, sources=named, installed_jax=installed_jax, replaced=notes)
    if not isinstance(config, Mapping):
        raise ArgumentError("config", f"a job config is a path or a mapping, not a {type(config).__name__}")
    flat = flatten(config)
    named = dict.fromkeys(flat, "the config mapping") | dict.fromkeys(overrides, "overrides") | named
    return load_job(None, merge(flat, overrides), sources=named, installed_jax=installed_jax, replaced=notes)


def _load_warnings(job: JobConfig, file: Path | None) -> list[str]:
    """What a valid config may mean otherwise: an HLO dump flag without storage.hlo_dump, flex-start on several
    hosts, MTC settings without mtc.enabled, a config file inside the sidecar's source folder."""
    from pwdeploy.config.capacity import flex_start_multi_host
    from pwdeploy.config.constraints import dump_without_destination
    from pwdeploy.config.mtc_constraints import unused_without_mtc

    found = [
        dump_without_destination(job.xla_flags, job.storage.hlo_dump),
        flex_start_multi_host(job.tpu.capacity, job.tpu.slice),
        unused_without_mtc(job.mtc),
    ]
    if job.sidecar.source_dir is not None and file is not None:
        from pwdeploy.images.source_folder import (
            config_file_warning,  # a sidecar's folder only: not on a plain render's path
        )

        found.append(config_file_warning(job.sidecar.source_dir, file, "sidecar.source_dir"))
    return [line for line in found if line]


def _unheard(_line: str) -> None:
    pass


def _names_sources(sources: object) -> bool:
    """Whether ``sources`` is None or maps config paths to where each value came from (text to text)."""
    if sources is None:
        return True
    return isinstance(sources, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in sources.items())


def _objects(objects: object) -> list[Manifest]:
    """A caller's objects as a list; anything but a list or tuple of them is refused by name."""
    if isinstance(objects, list | tuple):
        return list(objects)
    from pwdeploy import arguments

    return list(arguments.sequence(objects, "objects", "api.render(job)"))  # type: ignore[arg-type]


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


def validate(objects: Sequence[Mapping[str, Any]]) -> list[Finding]:
    """The problems the schemas and webhook rules find in ``objects`` (rendered or read from files), one finding
    each (``where``: ``Kind/name: field.path``); empty when the API server and JobSet's webhook would accept them."""
    from pwdeploy import arguments
    from pwdeploy.validation.validate import validate_objects

    return validate_objects(arguments.sequence(objects, "objects", "[jobset]"))


def to_yaml(objects: Sequence[Manifest]) -> str:
    """The objects as ``pwdeploy render`` prints them (YAML documents, deterministic), for ``kubectl apply -f -``."""
    from pwdeploy import manifests

    return manifests.to_yaml(_objects(objects))


def to_json(objects: Sequence[Manifest]) -> str:
    """The objects as ``pwdeploy render -o json`` prints them: one object as itself, several as a v1 List."""
    from pwdeploy import manifests

    return manifests.to_json(_objects(objects))


def write_manifests(objects: Sequence[Manifest], output_dir: PathLike, *, output: str = "yaml") -> list[Path]:
    """One file per object in ``output_dir`` (made when missing), as ``pwdeploy render --output-dir`` writes
    them (``output``: ``"yaml"`` or ``"json"``); the files written. A folder that cannot be written is an
    ``ArgumentError`` naming ``output_dir``."""
    from pwdeploy import manifests
    from pwdeploy.errors import ArgumentError

    if not isinstance(output_dir, str | os.PathLike):
        from pwdeploy import arguments

        arguments.path(output_dir, "output_dir")
    folder = Path(output_dir)
    if output not in ("yaml", "json"):
        raise ArgumentError("output", f"{output!r} is not a format; valid: yaml, json")
    checked = _objects(objects)
    try:
        return manifests.write_dir(checked, folder, output)
    except OSError as exc:
        raise ArgumentError("output_dir", f"cannot write to {folder}: {exc.strerror or exc}") from None


def schema() -> dict[str, Any]:
    """The JSON Schema of the job config (``pwdeploy schema``), for editors and other tools."""
    from pwdeploy.config.json_schema import job_schema

    return job_schema()


def finding_schema() -> dict[str, Any]:
    """The JSON Schema of one finding, as check, diagnose, status, preflight and validate print it in ``-o json``
    (``pwdeploy schema --finding``)."""
    from pwdeploy.finding import json_schema

    return json_schema()


def config_reference() -> str:
    """The job config's fields as one Markdown table (``pwdeploy schema --markdown``)."""
    from pwdeploy.config.json_schema import config_reference_markdown

    return config_reference_markdown()


def validate_files(paths: Sequence[PathLike], *, kubernetes_version: str | None = None) -> ManifestCheck:
    """The manifests in ``paths`` (multi-document YAML or JSON; ``"-"``: standard input) against the Kubernetes
    schemas of ``kubernetes_version`` (default: validation's), the JobSet schema and the rules of the JobSet
    webhook and the API server (``pwdeploy validate``): how many objects were read, and the problems, one finding
    each placed in its file. A pwdeploy job config given instead is a ``ConfigError`` saying to render it first."""
    from pwdeploy import arguments
    from pwdeploy.validation.validate import DEFAULT_KUBERNETES_VERSION, file_problems, read_manifests

    files = [str(path) for path in arguments.paths(paths, "paths")]
    version = arguments.optional_text(kubernetes_version, "kubernetes_version") or DEFAULT_KUBERNETES_VERSION
    found = read_manifests(files)
    _refuse_job_configs(found)
    problems = file_problems(found, kubernetes_version=version)
    return ManifestCheck(sum(map(len, found.values())), tuple(problems))


class ManifestCheck(NamedTuple):
    """What ``validate_files`` found: the objects read and the problems, one finding each (empty: all valid)."""

    objects: int
    findings: tuple[Finding, ...]


def _refuse_job_configs(found: Mapping[str, list[Any]]) -> None:
    """A pwdeploy job config given instead of manifests: say to render it first, rather than list the fields a
    Kubernetes object lacks."""
    from pwdeploy.config.fields import FIELDS
    from pwdeploy.errors import ConfigError

    sections = {f.path.split(".")[0] for f in FIELDS} - {"name", "namespace"}
    for path, objects in found.items():
        if any(isinstance(o, dict) and not {"apiVersion", "kind"} & o.keys() and sections & o.keys() for o in objects):
            source = "-f -" if path == "-" else f"-f {path}"
            raise ConfigError(
                None,
                f"{path} is a pwdeploy job config, not Kubernetes manifests",
                hint=f"render it (render validates what it writes): pwdeploy render {source}",
            )


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


def check_before(
    job: JobConfig,
    say: Callable[[str], None],
    *,
    config_file: Path | None,
    command: Sequence[str] = (),
    cwd: Path | None = None,
) -> Report:
    """The program check a local run and preflight run first (over ``command``'s program, started in ``cwd``,
    when one is given instead of main.command), each finding told to ``say`` as a line a terminal can show."""
    from pwdeploy.check import check_before_run
    from pwdeploy.text import printable

    report = check_before_run(job, config_file=config_file, command=command, cwd=cwd)
    for line in report.lines(fixes=False):
        say(printable(line))
    return report


def say_to(progress: TextIO | None) -> Callable[[str], None]:
    """A function that writes each line to ``progress`` at once (None: nowhere)."""

    def say(line: str) -> None:
        if progress is not None:
            print(line, file=progress, flush=True)

    return say


def given_job(job: object) -> JobConfig:
    """A caller's job: what ``load`` returns (a mapping or a path is ``load``'s to read first)."""
    from pwdeploy.config.model import JobConfig

    if not isinstance(job, JobConfig):
        from pwdeploy.arguments import a_kind
        from pwdeploy.errors import ArgumentError

        raise ArgumentError("job", f"must be a JobConfig, not {a_kind(job)}", hint="job = api.load(...)")
    return job
