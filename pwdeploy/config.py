"""Load, merge and validate a job config into one typed, immutable JobConfig.

Everything downstream (manifests, local runs, sidecar builds, preflight, submit) trusts this object.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import yaml

from pwdeploy import catalog
from pwdeploy.errors import ConfigError
from pwdeploy.fields import BY_PATH, FIELDS, SECTIONS, Field, Kind
from pwdeploy.quantity import canonical, parse_quantity

_T = TypeVar("_T")
_SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present

DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
FLAG_ITEM = re.compile(r"--([A-Za-z][A-Za-z0-9_]*)(?:=(\S+))?")
VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")
GCS_URI = re.compile(r"gs://([a-z0-9][a-z0-9._-]{1,220}[a-z0-9])(/[^\s]*)?")

# Set by pwdeploy in the user's container; users must not override them through main.env.
RESERVED_ENV = frozenset(
    {
        "JAX_PLATFORMS", "JAX_BACKEND_TARGET", "XCLOUD_ENVIRONMENT", "ENABLE_PATHWAYS_PERSISTENCE",
        "PATHWAYS_HEAD", "PWDEPLOY_DATA_WORKERS",
    }
)  # fmt: skip


class GcsPath(NamedTuple):
    bucket: str
    prefix: str  # without leading or trailing slash; "" for the bucket root

    @property
    def uri(self) -> str:
        return f"gs://{self.bucket}/{self.prefix}" if self.prefix else f"gs://{self.bucket}"

    def child(self, name: str) -> GcsPath:
        return GcsPath(self.bucket, f"{self.prefix}/{name}" if self.prefix else name)


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


class MainConfig(NamedTuple):
    image: str | None
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
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


class StorageConfig(NamedTuple):
    scratch: GcsPath | None
    in_memory_cache: bool
    enable_olm: bool
    hlo_dump: GcsPath | None
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


class LocalConfig(NamedTuple):
    devices: int | None
    compile_cache: str
    hlo_dir: Path


class JobConfig(NamedTuple):
    name: str
    namespace: str
    pathways_version: str
    allow_version_mismatch: bool
    image_registry: str
    headless: bool
    xla_flags: tuple[str, ...]
    tpu: TpuConfig
    main: MainConfig
    head: HeadConfig
    storage: StorageConfig
    scheduling: SchedulingConfig
    sidecar: SidecarConfig
    local: LocalConfig
    base_dir: Path = Path(".")  # relative paths in the file resolve here

    @property
    def proxy_image(self) -> str:
        return f"{self.image_registry}/proxy_server:jax-{self.pathways_version}"

    @property
    def server_image(self) -> str:
        return f"{self.image_registry}/server:jax-{self.pathways_version}"


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
        raise ConfigError(None, f"{path}: the top level must be a mapping of fields, not a {_kind(data)}")
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
                raise ConfigError(key, f"must be a mapping of fields, not a {_kind(value)}")
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
    for path, value in overrides.items():
        if path not in BY_PATH:
            raise ConfigError(path, "unknown field")
        if path == "main.env" and path in merged:
            merged[path] = {**_as_env(merged[path], path), **_as_env(value, path)}
        elif path == "xla_flags" and path in merged:
            merged[path] = _merge_flags(_as_flags(merged[path], path), _as_flags(value, path))
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
        namespace=_dns_label(parsed["namespace"], "namespace"),
        pathways_version=_pathways_version(parsed, installed_jax),
        allow_version_mismatch=parsed["allow_version_mismatch"],
        image_registry=parsed["image_registry"],
        headless=parsed["headless"],
        xla_flags=parsed["xla_flags"],
        tpu=_section(TpuConfig, parsed, "tpu", slice=tpu_slice),
        main=_main(parsed),
        head=_section(HeadConfig, parsed, "head"),
        storage=_storage(parsed),
        scheduling=_scheduling(parsed),
        sidecar=_sidecar(parsed),
        local=_section(LocalConfig, parsed, "local"),
        base_dir=base_dir,
    )
    _check_cross_fields(job)
    return job


def _section(cls: type[_T], parsed: Mapping[str, Any], section: str, **extra: Any) -> _T:
    names = set(cls._fields)  # type: ignore[attr-defined]
    values = {f.key: parsed[f.path] for f in SECTIONS[section] if f.key in names}
    return cls(**values, **extra)


def _parse(spec: Field, value: Any, base_dir: Path) -> Any:
    if value is None:
        return _default(spec)
    path = spec.path
    if spec.kind is Kind.STR:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ConfigError(path, f"must be a string, not a {_kind(value)}")
        text = str(value).strip()
        return text or ("" if spec.empty_disables else _default(spec))
    if spec.kind is Kind.INT:
        return _int(value, path, spec.minimum)
    if spec.kind is Kind.BOOL:
        return _bool(value, path)
    if spec.kind is Kind.QUANTITY:
        return canonical(value, path)
    if spec.kind is Kind.GCS:
        return parse_gcs(value, path) if str(value).strip() else None
    if spec.kind is Kind.PATH:
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(path, f"must be a path string, not {value!r}")
        return base_dir / Path(value).expanduser() if not Path(value).expanduser().is_absolute() else Path(value)
    if spec.kind is Kind.COMMAND:
        return _command(value, path)
    if spec.kind is Kind.STR_LIST:
        return _str_list(value, path)
    if spec.kind is Kind.FLAG_LIST:
        return tuple(_as_flags(value, path))
    if spec.kind is Kind.ENV:
        env = _as_env(value, path)
        for name in env:
            if name in RESERVED_ENV or name.startswith("PWDEPLOY_"):
                raise ConfigError(f"{path}.{name}", "is set by pwdeploy; remove it from the config")
        return tuple(sorted(env.items()))
    raise AssertionError(spec.kind)  # pragma: no cover


def _default(spec: Field) -> Any:
    if spec.kind is Kind.PATH and spec.default is not None:
        return Path(str(spec.default))
    if spec.kind is Kind.ENV:
        return ()
    return spec.default


def _int(value: Any, path: str, minimum: int | None) -> int:
    if isinstance(value, bool):
        raise ConfigError(path, f"must be an integer, not {value!r}")
    try:
        number = int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise ConfigError(path, f"must be an integer, not {value!r}") from None
    if isinstance(value, float) or (minimum is not None and number < minimum):
        raise ConfigError(path, f"must be an integer >= {minimum if minimum is not None else 0}, not {value!r}")
    return number


def _bool(value: Any, path: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ConfigError(path, f"must be true or false, not {value!r}")


def _command(value: Any, path: str) -> tuple[str, ...]:
    if isinstance(value, str):
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise ConfigError(path, f"cannot split {value!r} like a shell: {exc}") from None
    elif isinstance(value, list) and all(isinstance(w, (str, int, float)) for w in value):
        words = [str(w) for w in value]
    else:
        raise ConfigError(path, f"must be a string or a list of strings, not a {_kind(value)}")
    if not words:
        raise ConfigError(path, "must not be empty")
    return tuple(words)


def _str_list(value: Any, path: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, (str, int, float)) for v in value):
        raise ConfigError(path, f"must be a list of strings, not a {_kind(value)}")
    return tuple(str(v) for v in value)


def _as_flags(value: Any, path: str) -> list[str]:
    items = _str_list(value, path)
    for item in items:
        if not FLAG_ITEM.fullmatch(item):
            raise ConfigError(
                path,
                f"{item!r} is not a flag; write each as --name=value (one flag per item, no spaces), "
                "e.g. --xla_tpu_enable_async_collective_fusion=true",
            )
    return _merge_flags([], list(items))


def _merge_flags(base: list[str], extra: list[str]) -> list[str]:
    by_name = {item.split("=", 1)[0]: item for item in base}
    for item in extra:
        by_name[item.split("=", 1)[0]] = item
    return list(by_name.values())


def _as_env(value: Any, path: str) -> dict[str, str]:
    if isinstance(value, (list, tuple)):  # KEY=VALUE items, as --env gives them
        env: dict[str, str] = {}
        for item in value:
            if not isinstance(item, str) or "=" not in item:
                raise ConfigError(path, f"{item!r} is not KEY=VALUE")
            key, _, val = item.partition("=")
            env[key] = val
        value = env
    if not isinstance(value, dict):
        raise ConfigError(path, f"must be a mapping of NAME: value, not a {_kind(value)}")
    result: dict[str, str] = {}
    for key, val in value.items():
        if not isinstance(key, str) or not ENV_NAME.fullmatch(key):
            raise ConfigError(f"{path}.{key}", "is not a valid environment variable name")
        if isinstance(val, (dict, list)) or val is None:
            raise ConfigError(f"{path}.{key}", f"must be a string, not a {_kind(val)}")
        result[key] = str(val).lower() if isinstance(val, bool) else str(val)
    return result


def parse_gcs(value: Any, path: str) -> GcsPath:
    text = str(value).strip() if isinstance(value, str) else None
    match = GCS_URI.fullmatch(text) if text else None
    if text is None or match is None or ".." in match.group(1):
        raise ConfigError(
            path, f"{value!r} is not a GCS location; use gs://bucket[/prefix] (bucket: 3-222 of a-z 0-9 . _ -)"
        )
    prefix = (match.group(2) or "")[1:].rstrip("/")
    if "//" in (match.group(2) or ""):
        raise ConfigError(path, f"{value!r} has an empty path segment ('//')")
    bucket = match.group(1)
    if max(map(len, bucket.split("."))) > 63 or bucket.startswith("goog") or re.fullmatch(r"[0-9.]+", bucket):
        raise ConfigError(
            path, f"{value!r}: a bucket name has at most 63 characters between dots, does not start with 'goog' "
            "and is not an IP address",
        )  # fmt: skip
    if any(ord(char) < 32 or 127 <= ord(char) <= 159 for char in prefix):
        raise ConfigError(path, f"{value!r} has a control character in its path")
    return GcsPath(bucket, prefix)


def _name(value: Any) -> str:
    if value is None:
        raise ConfigError("name", "is required; set it in the file or with --name")
    return _dns_label(value, "name")


def _dns_label(value: str, path: str) -> str:
    if len(value) > 63 or not DNS_1035.fullmatch(value):
        raise ConfigError(
            path,
            f"{value!r} is not a DNS-1035 label: lower-case letters, digits and '-', starting with a letter, "
            "ending with a letter or digit, at most 63 characters",
        )
    return value


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
    if parsed["storage.scratch"] is not None and parsed["storage.in_memory_cache"]:
        raise ConfigError("storage.in_memory_cache", "cannot be true when storage.scratch is set; choose one")
    return _section(StorageConfig, parsed, "storage")


def _scheduling(parsed: Mapping[str, Any]) -> SchedulingConfig:
    for path in ("scheduling.queue", "scheduling.priority_class", "scheduling.service_account"):
        value = parsed[path]
        if value is not None and (len(value) > 253 or not DNS_1123_SUBDOMAIN.fullmatch(value)):
            raise ConfigError(path, f"{value!r} is not a valid Kubernetes object name")
    if parsed["scheduling.queue"] and len(parsed["scheduling.queue"]) > 63:
        raise ConfigError("scheduling.queue", "must be at most 63 characters (it is a label value)")
    return _section(SchedulingConfig, parsed, "scheduling")


def _sidecar(parsed: Mapping[str, Any]) -> SidecarConfig:
    image = parsed["sidecar.image"]
    if image is not None:
        check_image_pinned(image, "sidecar.image")
    return _section(SidecarConfig, parsed, "sidecar")


def check_image_pinned(image: str, path: str) -> None:
    """Reject images that float: no tag, or ``:latest``."""
    if "@sha256:" in image:
        return
    last = image.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else None
    if tag is None or tag == "latest":
        raise ConfigError(
            path,
            f"{image!r} is not pinned; give it a tag other than latest, or a digest (@sha256:...), so every "
            "run uses the same image",
        )


def _check_cross_fields(job: JobConfig) -> None:
    main = job.main
    if not job.headless:
        if main.image is None:
            raise ConfigError("main.image", "is required (unless headless); set it or pass --image")
        check_image_pinned(main.image, "main.image")
        if not main.command:
            raise ConfigError("main.command", "is required (unless headless); e.g. --command 'python3 train.py'")
        _check_fits(main.shm_size, "main.shm_size", main.memory, "main.memory")
    if job.tpu.worker_memory is not None:
        _check_fits(job.tpu.shm_size, "tpu.shm_size", job.tpu.worker_memory, "tpu.worker_memory")
    if job.storage.scratch is None and not job.storage.in_memory_cache:
        raise ConfigError(
            "storage.scratch",
            "is required: Pathways keeps its compilation cache there",
            hint="pass --gcs-scratch gs://BUCKET/PREFIX, or --in-memory-cache to run with a non-persistent cache",
        )
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


def _kind(value: Any) -> str:
    return {dict: "mapping", list: "list", str: "string", int: "integer", float: "number", bool: "boolean"}.get(
        type(value), type(value).__name__
    )


def _suggest(word: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(word, valid, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
