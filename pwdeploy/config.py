"""Load, merge and validate a job config into one typed, immutable JobConfig.

Everything downstream (manifests, local runs, sidecar builds, preflight, submit) trusts this object.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import yaml

from pwdeploy import catalog
from pwdeploy.errors import ConfigError
from pwdeploy.fields import BY_PATH, FIELDS, SECTIONS, Field, Kind
from pwdeploy.quantity import canonical, parse_quantity
from pwdeploy.validation import names
from pwdeploy.values import (
    GcsPath,
    check_image_pinned,
    check_name,
    kind_name,
    merge_flags,
    parse_bool,
    parse_command,
    parse_env,
    parse_flags,
    parse_gcs,
    parse_int,
    parse_str_list,
)

__all__ = ["GcsPath", "JobConfig", "check_image_pinned", "load_job", "merge", "parse_gcs"]

_T = TypeVar("_T")
_SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present

VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")

# Quantities where 0 is a meaningful value: "off".
ZERO_DISABLES = frozenset({"head.transfer_shm_size"})

# Set by pwdeploy in the user's container; users must not override them through main.env.
RESERVED_ENV = frozenset(
    {
        "JAX_PLATFORMS", "JAX_BACKEND_TARGET", "XCLOUD_ENVIRONMENT", "ENABLE_PATHWAYS_PERSISTENCE",
        "PATHWAYS_HEAD", "PWDEPLOY_DATA_WORKERS",
    }
)  # fmt: skip


class TpuConfig(NamedTuple):
    type: str | None
    family: str | None
    topology: str | None
    slices: int
    elastic_slices: int
    max_slice_restarts: int
    worker_memory: str | None
    shm_size: str
    slice: catalog.TpuSlice

    @property
    def total_chips(self) -> int:
        return self.slices * self.slice.chips


class SecretRef(NamedTuple):
    """An environment variable taken from one key of a Kubernetes Secret (``valueFrom.secretKeyRef``)."""

    env: str
    secret: str
    key: str


class MainConfig(NamedTuple):
    image: str | None
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    secret_env: tuple[SecretRef, ...]
    cpu: str
    memory: str
    shm_size: str
    data_workers: int  # resolved: never None
    privileged: bool


class HeadConfig(NamedTuple):
    node_pool: str
    proxy_cpu: str
    proxy_memory: str
    rm_cpu: str
    rm_memory: str
    transfer_shm_size: str  # "0": no client-proxy shared memory


class StorageConfig(NamedTuple):
    scratch: GcsPath
    enable_olm: bool
    hlo_dump: GcsPath | None
    hlo_uploader_image: str
    profiles: GcsPath | None
    checkpoints: GcsPath | None

    def locations(self) -> dict[str, GcsPath]:
        """The GCS locations that are set, by config field."""
        found = {
            "storage.scratch": self.scratch,
            "storage.hlo_dump": self.hlo_dump,
            "storage.profiles": self.profiles,
            "storage.checkpoints": self.checkpoints,
        }
        return {name: path for name, path in found.items() if path is not None}


class SchedulingConfig(NamedTuple):
    max_restarts: int
    restart_strategy: str
    queue: str | None
    priority_class: str | None
    service_account: str | None
    termination_grace_seconds: int | None


class SidecarConfig(NamedTuple):
    image: str | None
    repository: str | None
    base_image: str | None
    source_dir: Path | None
    requirements: Path | None
    pip_args: tuple[str, ...]
    shm_size: str
    base_release: str | None = None  # only `pwdeploy sidecar` reads these two
    python_version: str | None = None

    @property
    def enabled(self) -> bool:
        return self.image is not None or self.repository is not None


class ImagesConfig(NamedTuple):
    """Pinned Pathways images; None: derived from image_registry and pathways_version."""

    server: str | None
    proxy_server: str | None


class ImageConfig(NamedTuple):
    """The job's own (main) container image, as `pwdeploy image build` makes it."""

    repository: str | None
    base: str | None
    source_dir: Path | None
    requirements: Path | None
    pip_args: tuple[str, ...]


class LocalConfig(NamedTuple):
    devices: int | None
    compile_cache: str
    hlo_dir: Path


class JobConfig(NamedTuple):
    name: str
    namespace: str | None  # None: the kubeconfig context's namespace
    pathways_version: str
    allow_version_mismatch: bool
    image_registry: str
    headless: bool
    xla_flags: tuple[str, ...]
    worker_flags: tuple[str, ...]
    worker_env: tuple[tuple[str, str], ...]
    images: ImagesConfig
    tpu: TpuConfig
    main: MainConfig
    head: HeadConfig
    storage: StorageConfig
    scheduling: SchedulingConfig
    sidecar: SidecarConfig
    image: ImageConfig
    local: LocalConfig
    base_dir: Path = Path(".")  # relative paths in the file resolve here

    @property
    def proxy_image(self) -> str:
        return self.images.proxy_server or f"{self.image_registry}/proxy_server:jax-{self.pathways_version}"

    @property
    def server_image(self) -> str:
        return self.images.server or f"{self.image_registry}/server:jax-{self.pathways_version}"


# ---------------------------------------------------------------------------------------------- loading


def read_file(path: Path) -> dict[str, Any]:
    """The raw mapping in a YAML job file; ConfigError for a missing file or bad YAML."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(None, f"config file {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(None, f"cannot read config file {path}: {exc.strerror}") from None
    try:
        data = yaml.load(text, Loader=_SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(None, f"{path}: invalid YAML{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(None, f"{path}: the top level must be a mapping of fields, not a {kind_name(data)}")
    return data


def flatten(data: Mapping[str, Any]) -> dict[str, Any]:
    """``{"tpu": {"slices": 2}}`` -> ``{"tpu.slices": 2}``; unknown keys are ConfigErrors."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        key = str(key)
        if key in SECTIONS and key != "":
            if value is None:
                continue
            if not isinstance(value, dict):
                raise ConfigError(key, f"must be a mapping of fields, not a {kind_name(value)}")
            for sub, sub_value in value.items():
                path = f"{key}.{sub}"
                if path not in BY_PATH:
                    valid = [f.key for f in SECTIONS[key]]
                    raise ConfigError(path, f"unknown field{_suggest(str(sub), valid)}; valid: {', '.join(valid)}")
                flat[path] = sub_value
        elif key in BY_PATH:
            flat[key] = value
        else:
            valid = [f.key for f in SECTIONS[""]] + [s for s in SECTIONS if s]
            raise ConfigError(key, f"unknown field{_suggest(key, valid)}; valid: {', '.join(valid)}")
    return flat


def load_job(
    path: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    installed_jax: Callable[[], str | None] | None = None,
) -> JobConfig:
    """Read ``path`` (optional), apply ``overrides`` (dotted paths; flags and env) and validate.

    ``installed_jax`` gives the jax version the images must match (``None``: jax is not installed); by
    default it is read from package metadata, never by importing jax.
    """
    raw = flatten(read_file(path)) if path is not None else {}
    merged = merge(raw, overrides or {})
    jax_version = (installed_jax or installed_jax_version)()
    base_dir = path.parent if path is not None else Path(".")
    return build(merged, installed_jax=jax_version, base_dir=base_dir)


def merge(raw: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Overrides beat the file; env maps merge key by key and XLA flags merge flag by flag."""
    merged = dict(raw)
    # A slice given by a flag replaces the file's, in whichever form the file gave it.
    by_type, by_shape = ("tpu.type",), ("tpu.family", "tpu.topology")
    for given, replaced in ((by_type, by_shape), (by_shape, by_type)):
        if any(path in overrides for path in given):
            for path in replaced:
                merged.pop(path, None)
    for path, value in overrides.items():
        if path not in BY_PATH:
            raise ConfigError(path, "unknown field")
        if path in ("main.env", "worker_env") and path in merged:
            merged[path] = {**parse_env(merged[path], path), **parse_env(value, path)}
        elif path in ("xla_flags", "worker_flags") and path in merged:
            merged[path] = merge_flags(parse_flags(merged[path], path), parse_flags(value, path))
        else:
            merged[path] = value
    return merged


def installed_jax_version() -> str | None:
    """The installed jax's version, from its dist-info folder name (cheap), else from package metadata."""
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.startswith("jax-") and name.endswith(".dist-info"):
                return name[len("jax-") : -len(".dist-info")]
    from importlib import metadata  # slower: imports the email package

    try:
        return metadata.version("jax")
    except metadata.PackageNotFoundError:
        return None


# ---------------------------------------------------------------------------------------------- checking


def build(values: Mapping[str, Any], *, installed_jax: str | None, base_dir: Path) -> JobConfig:
    parsed = {f.path: _parse(f, values.get(f.path), base_dir) for f in FIELDS}
    tpu_slice = _resolve_slice(parsed)
    job = JobConfig(
        name=_name(parsed["name"]),
        namespace=parsed["namespace"] and check_name(parsed["namespace"], "namespace", names.dns1123_label),
        pathways_version=_pathways_version(parsed, installed_jax),
        allow_version_mismatch=parsed["allow_version_mismatch"],
        image_registry=parsed["image_registry"],
        headless=parsed["headless"],
        xla_flags=_xla_flags(parsed["xla_flags"]),
        worker_flags=parsed["worker_flags"],
        worker_env=parsed["worker_env"],
        images=_images(parsed),
        tpu=_section(TpuConfig, parsed, "tpu", slice=tpu_slice),
        main=_main(parsed),
        head=_section(HeadConfig, parsed, "head"),
        storage=_storage(parsed),
        scheduling=_scheduling(parsed),
        sidecar=_sidecar(parsed),
        image=_section(ImageConfig, parsed, "image"),
        local=_local(parsed),
        base_dir=base_dir,
    )
    _check_cross_fields(job)
    return job


def _section(cls: type[_T], parsed: Mapping[str, Any], section: str, **extra: Any) -> _T:
    wanted = set(cls._fields)  # type: ignore[attr-defined]
    values = {f.key: parsed[f.path] for f in SECTIONS[section] if f.key in wanted}
    return cls(**values, **extra)


def _parse(spec: Field, value: Any, base_dir: Path) -> Any:
    if value is None:
        return _default(spec)
    path = spec.path
    if spec.kind is Kind.STR:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ConfigError(path, f"must be a string, not a {kind_name(value)}")
        text = str(value).strip()
        if spec.choices is not None and text not in spec.choices:
            raise ConfigError(path, f"{text!r} is not one of: {', '.join(spec.choices)}")
        return text or ("" if spec.empty_disables else _default(spec))
    if spec.kind is Kind.INT:
        return parse_int(value, path, spec.minimum)
    if spec.kind is Kind.BOOL:
        return parse_bool(value, path)
    if spec.kind is Kind.QUANTITY:
        return canonical(value, path, allow_zero=spec.path in ZERO_DISABLES)
    if spec.kind is Kind.GCS:
        return parse_gcs(value, path) if str(value).strip() else None
    if spec.kind is Kind.PATH:
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(path, f"must be a path string, not {value!r}")
        return base_dir / Path(value).expanduser() if not Path(value).expanduser().is_absolute() else Path(value)
    if spec.kind is Kind.COMMAND:
        return parse_command(value, path)
    if spec.kind is Kind.STR_LIST:
        return parse_str_list(value, path)
    if spec.kind is Kind.FLAG_LIST:
        return tuple(parse_flags(value, path))
    if spec.kind is Kind.ENV:
        env = parse_env(value, path)
        for name in env:
            if name in RESERVED_ENV or name.startswith("PWDEPLOY_"):
                raise ConfigError(f"{path}.{name}", "is set by pwdeploy; remove it from the config")
        return tuple(sorted(env.items()))
    if spec.kind is Kind.SECRET_ENV:
        return _secret_refs(value, path)
    raise AssertionError(spec.kind)  # pragma: no cover


def _secret_refs(value: Any, path: str) -> tuple[SecretRef, ...]:
    refs = []
    for name, ref in sorted(parse_env(value, path).items()):
        secret, _, key = ref.partition("/")
        if not secret or not key:
            raise ConfigError(f"{path}.{name}", f"{ref!r} is not SECRET/KEY; e.g. --secret-env {name}=my-secret/token")
        check_name(secret, f"{path}.{name}", names.dns1123_subdomain)
        if name in RESERVED_ENV or name.startswith("PWDEPLOY_"):
            raise ConfigError(f"{path}.{name}", "is set by pwdeploy; remove it from the config")
        refs.append(SecretRef(name, secret, key))
    return tuple(refs)


def _default(spec: Field) -> Any:
    if spec.kind is Kind.PATH and spec.default is not None:
        return Path(str(spec.default))
    if spec.kind in (Kind.ENV, Kind.SECRET_ENV):
        return ()
    return spec.default


def _name(value: Any) -> str:
    if value is None:
        raise ConfigError("name", "is required; set it in the file or with --name")
    return check_name(value, "name", names.dns1035_label)


def _resolve_slice(parsed: Mapping[str, Any]) -> catalog.TpuSlice:
    tpu_type, family, topology = parsed["tpu.type"], parsed["tpu.family"], parsed["tpu.topology"]
    if tpu_type and (family or topology):
        raise ConfigError("tpu.type", "set either tpu.type or tpu.family with tpu.topology, not both")
    if tpu_type:
        return catalog.from_type(tpu_type)
    if family and topology:
        return catalog.from_topology(family, topology)
    if family or topology:
        missing = "tpu.topology" if family else "tpu.family"
        raise ConfigError(missing, "is required together with " + ("tpu.family" if family else "tpu.topology"))
    raise ConfigError("tpu.type", "is required; e.g. --tpu-type v5p-8 (or tpu.family with tpu.topology)")


def _pathways_version(parsed: Mapping[str, Any], installed: str | None) -> str:
    version = parsed["pathways_version"]
    if version is None:
        if installed is None:
            raise ConfigError(
                "pathways_version", "is required when jax is not installed; e.g. --pathways-version 0.10.2"
            )
        version = installed
    if not VERSION.fullmatch(version):
        raise ConfigError("pathways_version", f"{version!r} is not a JAX version such as 0.10.2")
    if installed is not None and version != installed and not parsed["allow_version_mismatch"]:
        raise ConfigError(
            "pathways_version",
            f"{version} does not match the installed jax {installed}; the client's jax, the proxy and the "
            "server must agree",
            hint=f"install jax=={version}, drop --pathways-version, or pass --allow-version-mismatch",
        )
    return str(version)


def _main(parsed: Mapping[str, Any]) -> MainConfig:
    cpu_limit = int(parse_quantity(parsed["main.cpu"], "main.cpu"))  # whole cores available to loaders
    workers = parsed["main.data_workers"]
    if workers is None:
        workers = max(1, cpu_limit - 1)
    elif workers > max(cpu_limit, 1):
        raise ConfigError(
            "main.data_workers",
            f"{workers} exceeds the user container's CPU limit ({parsed['main.cpu']}); "
            f"use at most {max(cpu_limit, 1)} or raise main.cpu",
        )
    return _section(MainConfig, {**parsed, "main.data_workers": workers}, "main")


def _storage(parsed: Mapping[str, Any]) -> StorageConfig:
    if parsed["storage.scratch"] is None:
        raise ConfigError(
            "storage.scratch",
            "is required: Pathways keeps its compilation cache and job state there",
            hint="pass --gcs-scratch gs://BUCKET/PREFIX (a bucket your node pool's service account can write)",
        )
    check_image_pinned(parsed["storage.hlo_uploader_image"], "storage.hlo_uploader_image")
    return _section(StorageConfig, parsed, "storage")


def _xla_flags(flags: tuple[str, ...]) -> tuple[str, ...]:
    for flag in flags:
        if flag.startswith("--megascale_"):
            raise ConfigError(
                "xla_flags",
                f"{flag.split('=', 1)[0]} is a Pathways worker flag, not an XLA flag for the proxy",
                hint=f"pass it with --worker-flag {flag} (config: worker_flags)",
            )
    return flags


def _images(parsed: Mapping[str, Any]) -> ImagesConfig:
    for path in ("images.server", "images.proxy_server"):
        if parsed[path] is not None:
            check_image_pinned(parsed[path], path)
    return _section(ImagesConfig, parsed, "images")


def _scheduling(parsed: Mapping[str, Any]) -> SchedulingConfig:
    for path in ("scheduling.queue", "scheduling.priority_class", "scheduling.service_account"):
        if parsed[path] is not None:
            check_name(parsed[path], path, names.dns1123_subdomain)
    if parsed["scheduling.queue"] is not None:  # also the value of the Kueue label
        check_name(parsed["scheduling.queue"], "scheduling.queue", names.label_value)
    return _section(SchedulingConfig, parsed, "scheduling")


def _local(parsed: Mapping[str, Any]) -> LocalConfig:
    if parsed["local.compile_cache"].startswith("gs://"):
        parse_gcs(parsed["local.compile_cache"], "local.compile_cache")
    return _section(LocalConfig, parsed, "local")


def _sidecar(parsed: Mapping[str, Any]) -> SidecarConfig:
    image = parsed["sidecar.image"]
    if image is not None:
        check_image_pinned(image, "sidecar.image")
    return _section(SidecarConfig, parsed, "sidecar")


def _check_cross_fields(job: JobConfig) -> None:
    main = job.main
    if not job.headless:
        if main.image is None and job.image.repository is None:  # with a repository, the image lock supplies it
            raise ConfigError(
                "main.image", "is required (unless headless or image.repository is set); set it or pass --image"
            )
        if main.image is not None:
            check_image_pinned(main.image, "main.image")
        if not main.command:
            raise ConfigError("main.command", "is required (unless headless); e.g. --command 'python3 train.py'")
        _check_fits(main.shm_size, "main.shm_size", main.memory, "main.memory")
    if job.tpu.worker_memory is not None:
        _check_fits(job.tpu.shm_size, "tpu.shm_size", job.tpu.worker_memory, "tpu.worker_memory")
    if job.tpu.elastic_slices >= job.tpu.slices and job.tpu.elastic_slices > 0:
        raise ConfigError(
            "tpu.elastic_slices",
            f"{job.tpu.elastic_slices} must be less than tpu.slices ({job.tpu.slices}): at least one slice must stay",
        )


def _check_fits(size: str, size_path: str, limit: str, limit_path: str) -> None:
    if parse_quantity(size, size_path) >= parse_quantity(limit, limit_path):
        raise ConfigError(
            size_path,
            f"{size} does not fit inside {limit_path} ({limit}): /dev/shm is memory-backed and counts against "
            "the container's memory limit; lower it or raise the limit",
        )


def _suggest(word: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(word, valid, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
