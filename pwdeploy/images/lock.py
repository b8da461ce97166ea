"""The lock file format: which pushed digest holds a job's image inputs.

``pwdeploy sidecar build --push`` and ``pwdeploy image build --push`` record ``<repository>@sha256:...`` with the
inputs hash, one entry per job name, in a lock file next to the job config (commit it with the config). Each
image kind has its own file of this one format: ``pwdeploy-sidecar.lock`` (the name it always had, so existing
files keep working) and ``pwdeploy-image.lock``; a rebuild of one never rewrites the other's file.
``pwdeploy.images.pin`` reads them for ``render``. This module only reads and writes: it never prints.

An entry also records what the build took from the machine that ran pwdeploy rather than from the job's files and
config (``built_with``: its Python, pwdeploy and pathwaysutils versions, the pwdeploy wheel's digest), so that
``render`` on another machine checks the pin against the same parameters. Entries written before it existed have
none and are checked with the parameters of the machine that renders.
"""

from __future__ import annotations

import contextlib
import marshal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pwdeploy.atomic import write_bytes_atomic, write_text_atomic
from pwdeploy.errors import ConfigError
from pwdeploy.imageref import is_digest, repository_problem

FORMAT_VERSION = 2  # 2 added built_with; entries of version 1 are still read (without it)
READABLE_VERSIONS = (1, 2)
SIDECAR_LOCK = "pwdeploy-sidecar.lock"
JOB_IMAGE_LOCK = "pwdeploy-image.lock"
LOCK_NAMES = frozenset({SIDECAR_LOCK, JOB_IMAGE_LOCK})
_DIGEST_PREFIX = "sha256:"
STATE_DIR = ".pwdeploy"  # the folder of pwdeploy's state beside a lock (its parsed copy) or in a source folder
_COPY_FORMAT = 1


class Record:
    """A record of named fields, compared, printed and iterated field by field, as a NamedTuple is. Plain slotted
    classes: a render that pins an image imports the image package's four of them, and making a NamedTuple class
    costs it 0.1-0.25 ms each (a dataclass 0.4 ms, and 5 ms for the dataclasses module)."""

    __slots__ = ()
    _fields: tuple[str, ...] = ()  # in order (the JSON of a lock entry keeps it)

    def __iter__(self) -> Iterator[Any]:
        return (getattr(self, name) for name in self._fields)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in zip(self._fields, self, strict=True))
        return f"{type(self).__name__}({fields})"

    def _asdict(self) -> dict[str, Any]:
        return dict(zip(self._fields, self, strict=True))

    def _replace(self, **changes: Any) -> Any:
        return type(self)(**{**self._asdict(), **changes})


class BuiltWith(Record):
    """The build parameters that came from the machine that ran pwdeploy, not from the job's files and config."""

    _fields = ("python", "pwdeploy", "pathwaysutils", "pwdeploy_wheel")
    __slots__ = _fields

    def __init__(
        self,
        python: str,  # X.Y of the Python that ran pwdeploy: the client's Python unless sidecar.python_version is set
        pwdeploy: str,  # pwdeploy's version (the image's label, the name of its wheel)
        pathwaysutils: str | None = None,  # job image: the pathwaysutils it pins
        pwdeploy_wheel: str | None = None,  # job image whose code imports pwdeploy: sha256 of the wheel it copies
    ) -> None:
        self.python, self.pwdeploy = python, pwdeploy
        self.pathwaysutils, self.pwdeploy_wheel = pathwaysutils, pwdeploy_wheel


class LockEntry(Record):
    _fields = (
        "repository",
        "tag",
        "digest",
        "inputs_hash",
        "base_image",
        "jax_version",
        "python_version",
        "built_with",
    )
    __slots__ = _fields

    def __init__(
        self,
        repository: str,
        tag: str,
        digest: str,  # sha256:...
        inputs_hash: str,
        base_image: str,
        jax_version: str,
        python_version: str,
        built_with: BuiltWith | None = None,  # None in entries written before it was recorded
    ) -> None:
        self.repository, self.tag, self.digest, self.inputs_hash = repository, tag, digest, inputs_hash
        self.base_image, self.jax_version, self.python_version = base_image, jax_version, python_version
        self.built_with = built_with

    @property
    def image(self) -> str:
        return f"{self.repository}@{self.digest}"


def read_lock(path: Path) -> dict[str, LockEntry]:
    """Entries by job name; {} when there is no lock file. ConfigError for a file that is not a lock."""
    try:
        data = _parsed(path, path.read_bytes())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(None, f"cannot read the lock file {path}: {exc}", hint="delete it and push again") from None
    except RecursionError:
        raise ConfigError(
            None,
            f"cannot read the lock file {path}: nested too deep to be a lock file",
            hint="delete it and push again",
        ) from None
    try:
        if data.get("version") not in READABLE_VERSIONS:
            readable = " or ".join(map(str, READABLE_VERSIONS))
            raise ValueError(f"version {data.get('version')!r}, expected {readable}: written by another pwdeploy?")
        return {str(name): _entry(str(name), entry) for name, entry in data["jobs"].items()}
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            None, f"{path} is not a pwdeploy lock file ({exc})", hint="delete it and push again"
        ) from None


def _parsed(path: Path, text: bytes) -> Any:
    """The JSON in ``text`` (the lock at ``path``), from the parsed copy kept beside it when the copy was made from
    these very bytes; otherwise parsed, and the copy replaced. The copy is in `marshal`'s format, built in: a render
    that pins an image reads no JSON and does not import json (1.5 ms of its start-up). A copy that cannot be read
    or written only costs the parse."""
    copy = path.parent / STATE_DIR / f"{path.name}.parsed"
    try:
        kept = marshal.loads(copy.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        kept = None
    if isinstance(kept, tuple) and len(kept) == 3 and kept[0] == _COPY_FORMAT and kept[1] == text:
        return kept[2]
    import json

    data = json.loads(text.decode("utf-8"))
    with contextlib.suppress(OSError, ValueError):  # ValueError: nested too deep for marshal
        copy.parent.mkdir(exist_ok=True)
        write_bytes_atomic(copy, marshal.dumps((_COPY_FORMAT, text, data)))
    return data


def record(path: Path, job_name: str, entry: LockEntry) -> None:
    """Add or replace one job's entry; the file is replaced atomically, never left half-written."""
    entries = read_lock(path)
    entries[job_name] = entry
    data: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "jobs": {name: _as_json(e) for name, e in sorted(entries.items())},
    }
    import json  # here: render only reads

    write_text_atomic(path, json.dumps(data, indent=2) + "\n")


def entry_for(path: Path, job_name: str, repository: str) -> LockEntry | None:
    """The job's entry when it was pushed to ``repository``, without checking that its inputs are unchanged (a
    build replaces an entry for another repository)."""
    entry = read_lock(path).get(job_name)
    return entry if entry is not None and entry.repository == repository else None


def pinned_entry(path: Path, job_name: str, repository: str, field: str, command: str) -> LockEntry | None:
    """The job's entry, to pin; ConfigError naming the lock file when it was pushed to another repository than
    the config's ``field`` names (a hand edit, or a repository changed since the push)."""
    entry = read_lock(path).get(job_name)
    if entry is not None and entry.repository != repository:
        raise ConfigError(
            field,
            f"{path} records the image of {job_name} in {entry.repository!r}, not in {repository!r}",
            hint=f"push it to {repository} with `pwdeploy {command} build --push` (that replaces the entry), "
            f"or correct {field}",
        )
    return entry


def _as_json(entry: LockEntry) -> dict[str, Any]:
    built = entry.built_with
    return {**entry._asdict(), "built_with": built._asdict() if built is not None else None}


def is_pushed_digest(text: str) -> bool:
    """Whether ``text`` is what a registry answers to docker push, sha256: and 64 lower-case hex digits.

    Nothing else is pinned (not sha512, which ``imageref.is_digest`` also takes)."""
    return text.startswith(_DIGEST_PREFIX) and is_digest(text)


def _entry(name: str, data: dict[str, Any]) -> LockEntry:
    built = data.get("built_with")
    if built is not None:
        if not all(isinstance(value, str | None) for value in built.values()):
            raise ValueError(f"built_with {built!r} holds a value that is not a string")
        data = {**data, "built_with": BuiltWith(**built)}
    entry = LockEntry(**data)
    if not all(isinstance(value, str) for value in tuple(entry)[:7]):
        raise ValueError(f"the entry of {name} holds a value that is not a string")
    if not is_pushed_digest(entry.digest):
        raise ValueError(f"the digest of {name}, {entry.digest[:80]!r}, is not sha256: and 64 lower-case hex digits")
    problem = repository_problem(entry.repository)
    if problem is not None:
        raise ValueError(f"the repository of {name}: {problem}")
    return entry
