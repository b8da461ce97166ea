"""The Kubernetes OpenAPI schemas that kubernetes-validate ships (strict flavour), stripped for the checker, with a
per-user cache of the parts pwdeploy has needed.

kubernetes-validate keeps every definition of a Kubernetes version in one 1.3 MB file; parsing it costs more than
the rest of `pwdeploy render`. So the schema of each kind checked, and only the definitions it reaches, go to
``$XDG_CACHE_HOME/pwdeploy`` (``~/.cache/pwdeploy``), one file per kubernetes-validate and Kubernetes version,
replaced atomically. An unreadable, corrupt or stale cache file is ignored and rewritten; an unwritable cache
directory only means the full file is parsed again next time.

The cache files are in `marshal`'s format (the interpreter's own, as its ``.pyc`` files are; built in, so reading
one imports nothing, and it parses in half json's time): with them, `pwdeploy render` does not import `json` at
all. Only plain data goes in (dicts, lists, strings, numbers), and what comes out is checked like any other file.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import marshal
import os
import re
from pathlib import Path
from typing import Any

from pwdeploy.atomic import write_bytes_atomic
from pwdeploy.errors import DependencyError, PwdeployError
from pwdeploy.validation.checker import UnsupportedSchema, refs, strip

CACHE_FORMAT = 2  # 1: JSON
_SCHEMA_ROOT = "kubernetes-json-schema"
_DEFINITIONS = "_definitions.json"
# Compiled when first used: only a cache miss reads refs (render reads the cache).
_KIND_REF = r"/api/_definitions\.json#/\$defs/([^/~]+)"
_DEFINITION_REF = r"#/\$defs/([^/~]+)"

Schema = dict[str, Any]


@functools.cache
def schema_root() -> Path:
    """kubernetes-validate's schema folder, found without importing the package (which costs ~15 ms)."""
    spec = importlib.util.find_spec("kubernetes_validate")
    if spec is None or spec.origin is None:
        raise DependencyError(
            "the kubernetes-validate package is not installed", hint="pip install kubernetes-validate"
        )
    return Path(spec.origin).parent / _SCHEMA_ROOT


@functools.cache
def kubernetes_versions() -> tuple[tuple[int, int], ...]:
    """The (major, minor) versions whose schemas kubernetes-validate ships, oldest first."""
    found = set()
    for entry in schema_root().iterdir():
        match = re.fullmatch(r"v(\d+)\.(\d+)\.\d+-local-strict", entry.name)
        if match:
            found.add((int(match[1]), int(match[2])))
    return tuple(sorted(found))


def kind_schema(
    version: tuple[int, int], api_version: str, kind: str, *, root: Path | None = None
) -> tuple[Schema, dict[str, Schema]] | None:
    """The stripped schema of ``kind`` in ``api_version`` and the definitions it may refer to; None when
    kubernetes-validate ships no schema for it. PwdeployError when the schema uses JSON Schema the checker lacks.
    ``root`` is the schema folder (default: kubernetes-validate's)."""
    store = _store(version, root or schema_root())
    try:
        return store.kind(api_version, kind)
    except UnsupportedSchema as exc:
        raise PwdeployError(
            f"the Kubernetes {version[0]}.{version[1]} schema of {kind} ({api_version}) from kubernetes-validate "
            f"{store.source['version']} cannot be checked: {exc}",
            hint="install the kubernetes-validate version pwdeploy was released with, or render with --no-validate",
        ) from None


def cache_dir() -> Path | None:
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:  # no home directory
            return None
    return Path(base) / "pwdeploy"


def _kind_ref(target: str) -> str:
    match = re.fullmatch(_KIND_REF, target)
    if not match:
        raise UnsupportedSchema(f"$ref {target!r} does not point into {_DEFINITIONS}")
    return match[1]


def _definition_ref(target: str) -> str:
    match = re.fullmatch(_DEFINITION_REF, target)
    if not match:
        raise UnsupportedSchema(f"$ref {target!r} in {_DEFINITIONS} is not of the form #/$defs/NAME")
    return match[1]


def version_folder(version: tuple[int, int], root: Path | None = None) -> Path:
    """The folder of Kubernetes ``version``'s schemas (in ``root``, default kubernetes-validate's)."""
    return (root or schema_root()) / f"v{version[0]}.{version[1]}.0-local-strict"


@functools.cache
def _store(version: tuple[int, int], root: Path) -> _Store:
    folder = version_folder(version, root)
    directory = cache_dir()
    store = _Store(folder, _source_stamp(folder))
    if directory is not None:
        store.path = directory / f"k8s-{version[0]}.{version[1]}-kubernetes-validate-{store.source['version']}.marshal"
        store.load()
    return store


def _source_stamp(folder: Path) -> dict[str, Any]:
    """What the cache was made from: kubernetes-validate's version, and its definitions file's size and time."""
    try:
        text = (folder.parents[1] / "version.py").read_text(encoding="utf-8")
        stat = (folder / _DEFINITIONS).stat()
    except OSError:
        return {"version": "unknown", "definitions": None}
    release = "".join(c if c in _NAME_CHARS else "_" for c in _assigned_version(text))  # goes into a file name
    return {"version": release, "definitions": [stat.st_size, stat.st_mtime_ns]}


_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.+-")


def _assigned_version(source: str) -> str:
    """The string a ``__version__ = "..."`` line of ``source`` assigns; ``unknown`` without one. String methods, not
    a regular expression: this runs in every render, and compiling one costs more than the rest of it."""
    for line in source.splitlines():
        name, equals, value = line.partition("=")
        value = value.strip()
        if name.strip() == "__version__" and equals and len(value) > 2 and value[0] in "'\"" and value[-1] == value[0]:
            return value[1:-1]
    return "unknown"


class _Store:
    """The schemas of one Kubernetes version read so far, and the cache file (``path``) they are kept in."""

    def __init__(self, folder: Path, source: dict[str, Any]) -> None:
        self.folder, self.source = folder, source
        self.path: Path | None = None
        self.kinds: dict[str, Any] = {}
        self.definitions: dict[str, Schema] = {}
        self._all_definitions: dict[str, Any] | None = None

    def kind(self, api_version: str, kind: str) -> tuple[Schema, dict[str, Schema]] | None:
        key = f"{api_version} {kind}"
        entry = self.kinds.get(key)
        if entry is None:
            group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
            name = f"{kind.lower()}-{group_version}.json"
            try:
                raw = _read_json(self.folder / name)
            except FileNotFoundError:
                return None
            entry = self.kinds[key] = self._reach(strip(raw, name, _kind_ref))
            self.save()
        return entry["schema"], self.definitions

    def _reach(self, schema: Schema) -> dict[str, Any]:
        """Strips every definition ``schema`` reaches into ``definitions``; the cache entry of ``schema``."""
        reached: set[str] = set()
        pending = refs(schema)
        while pending:
            name = pending.pop()
            reached.add(name)
            if name not in self.definitions:
                everything = self._everything()
                if name not in everything:
                    raise UnsupportedSchema(f"$ref to {name!r}, which {_DEFINITIONS} does not define")
                self.definitions[name] = strip(everything[name], f"{_DEFINITIONS}#/$defs/{name}", _definition_ref)
            pending |= refs(self.definitions[name]) - reached
        return {"schema": schema, "definitions": sorted(reached)}

    def _everything(self) -> dict[str, Any]:
        if self._all_definitions is None:
            document = _read_json(self.folder / _DEFINITIONS)
            self._all_definitions = document["$defs"]
        return self._all_definitions

    def load(self) -> None:
        assert self.path is not None
        data = _read_marshal(self.path)
        if not _usable(data, self.source):
            return
        self.kinds, self.definitions = data["kinds"], data["definitions"]

    def save(self) -> None:
        if self.path is None:
            return
        data = {"format": CACHE_FORMAT, "source": self.source, "kinds": self.kinds, "definitions": self.definitions}
        _write_marshal(self.path, data)
        with contextlib.suppress(OSError):  # the JSON file of cache format 1, which this one replaces
            self.path.with_suffix(".json").unlink(missing_ok=True)


def _usable(data: object, source: dict[str, Any]) -> bool:
    """Whether a parsed cache file was made from ``source`` and holds every definition its kinds reach."""
    if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT or data.get("source") != source:
        return False
    kinds, definitions = data.get("kinds"), data.get("definitions")
    if not isinstance(kinds, dict) or not isinstance(definitions, dict):
        return False
    for entry in kinds.values():
        if not isinstance(entry, dict) or not isinstance(entry.get("schema"), dict):
            return False
        needed = entry.get("definitions")
        if not isinstance(needed, list) or not all(isinstance(n, str) and n in definitions for n in needed):
            return False
    return all(isinstance(d, dict) for d in definitions.values())


def cached_json(source: Path) -> dict[str, Any]:
    """The parsed JSON object in ``source`` (a file pwdeploy ships), read from its marshal copy in the cache while
    that copy was made from this very file (its path, size and time); otherwise parsed, and the copy written again."""
    stat = source.stat()
    stamp = [str(source), stat.st_size, stat.st_mtime_ns]
    directory = cache_dir()
    path = None if directory is None else directory / f"{source.name}.marshal"
    if path is not None:
        data = _read_marshal(path)
        if isinstance(data, dict) and data.get("format") == CACHE_FORMAT and data.get("source") == stamp:
            document = data.get("document")
            if isinstance(document, dict):
                return document
    document = _read_json(source)
    if not isinstance(document, dict):
        raise UnsupportedSchema(f"{source} does not hold a JSON object")
    if path is not None:
        _write_marshal(path, {"format": CACHE_FORMAT, "source": stamp, "document": document})
    return document


def _read_json(path: Path) -> Any:
    import json  # only when a cache is made: render's start-up reads the marshal copies

    return json.loads(path.read_text(encoding="utf-8"))


def _read_marshal(path: Path) -> Any:
    """A cache file's content; None when it cannot be read or is not marshal data (the caller checks its shape)."""
    try:
        return marshal.loads(path.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return None


def _write_marshal(path: Path, data: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # a cache that cannot be written is only slower next time
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, marshal.dumps(data))
