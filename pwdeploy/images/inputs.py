"""Build inputs shared by every image spec: the rendered Dockerfile, the files of the build context, their hash.

The build context is a tar pwdeploy writes itself (the Dockerfile plus the files a spec names), so nothing outside
the configured inputs reaches the engine, and the hash covers exactly what is sent. A source folder's
``.dockerignore`` leaves files out (``pwdeploy.images.ignore``). Every image is built for ``TARGET_PLATFORM``, the
platform of the GKE TPU nodes, whatever the building machine is; the platform is part of the hash. The hash names
the image tag (``REPOSITORY:<first 16 hex digits>``): unchanged inputs give the same tag and are not rebuilt.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from pwdeploy.errors import ConfigError
from pwdeploy.imageref import repository_problem
from pwdeploy.images import template
from pwdeploy.images.digests import (
    FACTS,
    WALK_STAMPS,
    Stamps,
    credential_flags,
    imports_pwdeploy,
    recall,
    remember,
    sha256,
)
from pwdeploy.images.ignore import IGNORE_FILE
from pwdeploy.images.lock import BuiltWith, LockEntry, Record

if TYPE_CHECKING:
    from io import BufferedReader

    from pwdeploy.config import JobConfig

HASH_LABEL = "dev.pwdeploy.inputs-hash"
TARGET_PLATFORM = "linux/amd64"  # GKE TPU VMs are x86-64: an arm64 image fails there with "exec format error"
TAG_LENGTH = 16  # hex digits of the inputs hash in the tag
_PYTHON = r"([0-9]+)\.([0-9]+)"  # compiled by re when a job sets sidecar.python_version


class ContextFile(Record):  # Records, not NamedTuples: a render that pins an image imports this module
    _fields = ("name", "source", "executable", "digest", "imports_pwdeploy", "looks_like_credentials")
    __slots__ = _fields

    def __init__(
        self,
        name: str,  # path inside the build context, with forward slashes
        # A file on disk (its path, as open() takes it: a folder's files keep the str the listing gave, since a
        # Path per file costs render 2 us a file), or content pwdeploy generated.
        source: str | os.PathLike[str] | bytes,
        executable: bool = False,
        digest: str | None = None,  # sha256 hex of the content, when known (the digest cache, a recorded wheel)
        imports_pwdeploy: bool = False,  # a .py file of a source folder that imports pwdeploy
        looks_like_credentials: bool = False,  # a file of a source folder named like a secret (.env, keys, ...)
    ) -> None:
        self.name, self.source, self.executable, self.digest = name, source, executable, digest
        self.imports_pwdeploy, self.looks_like_credentials = imports_pwdeploy, looks_like_credentials

    def read(self) -> bytes:
        return self.source if isinstance(self.source, bytes) else Path(self.source).read_bytes()


class ImageInputs(Record):
    _fields = (
        "base_image",
        "python_version",
        "jax_version",
        "dockerfile",
        "files",
        "inputs_hash",
        "platform",
        "warnings",
        "built_with",
    )
    __slots__ = _fields

    def __init__(
        self,
        base_image: str,
        python_version: str,
        jax_version: str,
        dockerfile: str,  # rendered, with the inputs hash in its labels
        files: tuple[ContextFile, ...],
        inputs_hash: str,  # sha256 hex of the platform, the Dockerfile (without the hash) and every file
        platform: str = TARGET_PLATFORM,  # os/arch the image is built for
        warnings: tuple[str, ...] = (),  # for the user (files that look like credentials); not part of the hash
        built_with: BuiltWith | None = None,  # the machine's parameters, recorded in the lock with the hash
    ) -> None:
        self.base_image, self.python_version, self.jax_version = base_image, python_version, jax_version
        self.dockerfile, self.files, self.inputs_hash = dockerfile, files, inputs_hash
        self.platform, self.warnings, self.built_with = platform, warnings, built_with

    def tag(self, repository: str) -> str:
        return f"{repository}:{self.inputs_hash[:TAG_LENGTH]}"

    def lock_entry(self, repository: str, digest: str) -> LockEntry:
        """What the lock records for these inputs once pushed to ``repository`` as ``digest``."""
        return LockEntry(
            repository=repository,
            tag=self.tag(repository),
            digest=digest,
            inputs_hash=self.inputs_hash,
            base_image=self.base_image,
            jax_version=self.jax_version,
            python_version=self.python_version,
            built_with=self.built_with,
        )


def assemble(
    template_name: str,
    values: Mapping[str, str],
    blocks: Mapping[str, bool],
    files: tuple[ContextFile, ...],
    *,
    base_image: str,
    python_version: str,
    jax_version: str,
    platform: str = TARGET_PLATFORM,
    warnings: tuple[str, ...] = (),
    built_with: BuiltWith | None = None,
) -> ImageInputs:
    """Render the template twice: without the hash (to compute it over the Dockerfile and files), then with it."""
    text = template.template_text(template_name)
    common = {**values, "base_image": base_image, "python_version": python_version, "jax_version": jax_version}
    digest = _hash(platform, template.render(text, {**common, "inputs_hash": ""}, blocks), map(_line, files))
    dockerfile = template.render(text, {**common, "inputs_hash": digest}, blocks)
    return ImageInputs(
        base_image, python_version, jax_version, dockerfile, files, digest, platform, warnings, built_with
    )


def inputs_hash(
    template_name: str,
    values: Mapping[str, str],
    blocks: Mapping[str, bool],
    parts: Iterable[ContextFile | Folder],
    *,
    base_image: str,
    python_version: str,
    jax_version: str,
    platform: str = TARGET_PLATFORM,
) -> str:
    """The inputs hash ``assemble`` computes for these inputs, a folder's files given as its ``Folder`` (in place
    of its ``files()``): what a pinned image is checked by, without a context file made per file."""
    text = template.template_text(template_name)
    common = {**values, "base_image": base_image, "python_version": python_version, "jax_version": jax_version}
    dockerfile = template.render(text, {**common, "inputs_hash": ""}, blocks)
    lines = [part if isinstance(part, Folder) else _line(part) for part in parts]
    folders = [part for part in lines if isinstance(part, Folder)]
    # A folder's files are all the record of its walk says (paths, stamps, modes, digests): the hash computed from
    # that record and the other inputs is kept beside it, under a key over those, and not computed again.
    key = None
    if folders and all(folder.walk_id is not None for folder in folders):
        recorded = [_recorded(part) if isinstance(part, Folder) else part for part in lines]
        key = _hash(platform, dockerfile, [_KEPT_HASH_FORMAT, *recorded])
        known = recall(folders[0].root, str(folders[0].walk_id), key)
        if known is not None:
            return known
    digest = _hash(platform, dockerfile, [part.hash_lines() if isinstance(part, Folder) else part for part in lines])
    if key is not None:
        remember(folders[0].root, str(folders[0].walk_id), key, digest)
    return digest


# In the key of every kept hash: a pwdeploy that hashes the same inputs otherwise (another line per file, another
# order) must change it, or it would take the hashes kept by the one before.
_KEPT_HASH_FORMAT = b"\0kept inputs hash 1\0"


def _recorded(folder: Folder) -> bytes:
    """What stands for a folder's files in the key of a kept hash: the record of its walk (a NUL first: no file's
    line begins so)."""
    return b"\0%s\0%s\0%s\0" % (folder.prefix.encode(), os.fsencode(folder.root), str(folder.walk_id).encode())


def running_python() -> str:
    """X.Y of the Python running pwdeploy."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def client_python(job: JobConfig, running: str | None = None) -> str:
    """Python X.Y of the job's client: ``sidecar.python_version``, else the Python running pwdeploy (``running``:
    the one recorded when an image was built) where the job's project allows it (``requires-python``), else the
    allowed Python nearest it (``pwdeploy.job_python``)."""
    from pwdeploy.job_python import check_allowed, chosen_python

    version = job.sidecar.python_version
    if version is None:
        return chosen_python(job, running or running_python())
    match = re.fullmatch(_PYTHON, version)
    if match is None or int(match.group(1)) != 3 or int(match.group(2)) < 8:
        raise ConfigError(
            "sidecar.python_version",
            f"{version!r} is not a Python 3 minor version such as 3.11",
            hint='quote it in YAML (python_version: "3.10"), or 3.10 reads as the number 3.1',
        )
    check_allowed(job, version, "sidecar.python_version", version)
    return version


def check_repository(repository: str | None, field: str, what: str) -> str:
    """The validated repository of config ``field``; ConfigError when unset or not a bare repository."""
    if repository is None:
        raise ConfigError(
            field,
            f"is required to build: the registry/repo the {what} is tagged and pushed as",
            hint=f"e.g. {field}: us-docker.pkg.dev/PROJECT/REPO/NAME (or --{field.replace('.', '-')})",
        )
    problem = repository_problem(repository)
    if problem is not None:
        raise ConfigError(field, problem, hint="use [host[:port]/]path with lower-case letters, digits, '.', '_', '-'")
    return repository


def requirements_file(path: Path, field: str) -> ContextFile:
    if not path.is_file():
        raise ConfigError(field, f"{path} is not a file")
    return ContextFile("requirements.txt", path)


class Folder:
    """The files a spec copies from a source folder, as one walk found them (``scan``), with their facts from the
    folder's digest cache. ``files()`` gives them as context files; the inputs hash can take the folder whole. A
    plain class: render imports this module, and a NamedTuple class costs 0.1-0.2 ms to make."""

    __slots__ = ("facts", "names", "odd", "prefix", "root", "stamps", "walk_id")

    def __init__(
        self,
        root: Path,
        prefix: str,  # of each file's path inside the build context
        names: list[str],  # each file's path in the folder, with forward slashes, in the walk's order
        stamps: bytes,  # each file's digests.WALK_STAMPS, as the walk found them
        odd: dict[int, Stamps],  # the stamps of the files (by index) whose stamps are too large to pack
        facts: str,  # each file's sha256 hex and flags digit (digests.FACTS characters a file)
        walk_id: str | None = None,  # the id of the digest cache's record of this walk, when there is one
    ) -> None:
        self.root, self.prefix, self.names, self.stamps, self.odd = root, prefix, names, stamps, odd
        self.facts, self.walk_id = facts, walk_id

    def files(self) -> tuple[ContextFile, ...]:
        facts, prefix, root, executes = self.facts, self.prefix, os.fspath(self.root), _OWNER_EXECUTES
        return tuple(
            [
                ContextFile(
                    f"{prefix}/{name}",
                    os.path.join(root, name),
                    bool(mode & executes),
                    facts[at : at + 64],
                    imports,
                    flag,
                )
                for name, mode, at, imports, flag in zip(
                    self.names,
                    self.modes(),
                    range(0, len(facts), FACTS),
                    imports_pwdeploy(facts),
                    credential_flags(facts),
                    strict=True,
                )
            ]
        )

    def hash_lines(self) -> bytes:
        """What the inputs hash takes of these files: ``_line`` of each of ``files()``, joined."""
        facts, prefix, executes = self.facts, self.prefix, _OWNER_EXECUTES
        return "".join(
            [
                f"{prefix}/{name}\0{'x' if mode & executes else '-'}\0{facts[at : at + 64]}\0"
                for name, mode, at in zip(self.names, self.modes(), range(0, len(facts), FACTS), strict=True)
            ]
        ).encode()

    def modes(self) -> list[int]:
        """Each file's mode."""
        modes = [row[4] for row in WALK_STAMPS.iter_unpack(self.stamps)]
        for index, row in self.odd.items():
            modes[index] = row[4]
        return modes

    def imports_pwdeploy(self) -> bool:
        """Whether a .py file of the folder imports pwdeploy (``digests.IMPORTS_PWDEPLOY``)."""
        return any(imports_pwdeploy(self.facts))

    def credential_warnings(self, field: str) -> tuple[str, ...]:
        """A warning naming the files whose names look like credentials (.env, keys, ...), as the cache judged
        them: anyone who can pull the image could read them."""
        flags = credential_flags(self.facts)
        if not any(flags):
            return ()
        return _credential_warning(
            [name for name, flag in zip(self.names, flags, strict=True) if flag], self.root, field
        )


_OWNER_EXECUTES = stat.S_IXUSR


def _credential_warning(suspicious: list[str], root: Path, field: str) -> tuple[str, ...]:
    listed = ", ".join(suspicious[:10]) + (f" and {len(suspicious) - 10} more" if len(suspicious) > 10 else "")
    return (
        f"{field} {root}: {listed} look like credentials and would be copied into the image, readable by everyone "
        f"who can pull it; list them in {root / IGNORE_FILE} (one pattern a line, e.g. "
        f"{suspicious[0].rsplit('/', 1)[-1]}) to leave them out",
    )


def _line(item: ContextFile) -> bytes:
    """What the inputs hash takes of one file: its path in the context, whether it is executable, its sha256."""
    if item.digest is not None:
        content = item.digest
    elif isinstance(item.source, bytes):
        content = sha256(item.source).hexdigest()
    else:
        try:
            with open(item.source, "rb") as handle:
                content = _file_sha256(handle)
        except OSError as exc:
            raise ConfigError(None, f"cannot read {item.source}: {exc.strerror or exc}") from None
    return f"{item.name}\0{'x' if item.executable else '-'}\0{content}\0".encode()


def _file_sha256(handle: BufferedReader) -> str:
    """The sha256 hex of an open file. A small one (a requirements file, which every pinned render hashes) through
    CPython's own sha256; hashlib's OpenSSL, faster on big files, costs 2.5 ms to import."""
    if os.fstat(handle.fileno()).st_size > _SMALL_FILE:
        import hashlib

        return hashlib.file_digest(handle, "sha256").hexdigest()
    digest = sha256()
    while chunk := handle.read(_SMALL_FILE):
        digest.update(chunk)
    hexdigest: str = digest.hexdigest()
    return hexdigest


_SMALL_FILE = 1 << 20


def _hash(platform: str, dockerfile_text: str, lines: Iterable[bytes]) -> str:
    digest = sha256()
    digest.update(b"platform\0" + platform.encode() + b"\0")
    digest.update(b"Dockerfile\0" + dockerfile_text.encode() + b"\0")
    for line in lines:
        digest.update(line)
    hexdigest: str = digest.hexdigest()
    return hexdigest
