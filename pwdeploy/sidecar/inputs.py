"""The sidecar build inputs: the rendered Dockerfile, the files of the build context, and their hash.

The build context is a tar pwdeploy writes itself (``code/`` from sidecar.source_dir, ``requirements.txt``,
``Dockerfile``), so nothing outside the configured inputs reaches the engine, and the hash covers exactly
what is sent. The hash names the image tag: unchanged inputs give the same tag and are not rebuilt.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shlex
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from pwdeploy import __version__
from pwdeploy.config import JobConfig
from pwdeploy.errors import ConfigError
from pwdeploy.sidecar import base, dockerfile
from pwdeploy.sidecar.lock import LOCK_NAME

HASH_LABEL = "dev.pwdeploy.inputs-hash"
TAG_LENGTH = 16  # hex digits of the inputs hash in the tag
# Never part of the image: version control, caches, virtual environments, pwdeploy's own state.
EXCLUDED_DIRS = frozenset(
    {".git", ".hg", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".venv", ".pwdeploy"}
)
EXCLUDED_SUFFIXES = (".pyc", ".pyo")
EXCLUDED_NAMES = frozenset({LOCK_NAME})
# A Docker repository: [host[:port]/]path, lower-case components, no tag or digest.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*")


@dataclass(frozen=True)
class ContextFile:
    name: str  # path inside the build context, with forward slashes
    source: Path
    executable: bool


@dataclass(frozen=True)
class SidecarInputs:
    base_image: str
    python_version: str
    jax_version: str
    dockerfile: str  # rendered, with the inputs hash in its labels
    files: tuple[ContextFile, ...]
    inputs_hash: str  # sha256 hex of the Dockerfile (without the hash) and every file's name, mode and content

    def tag(self, repository: str) -> str:
        return f"{repository}:{self.inputs_hash[:TAG_LENGTH]}"


def collect(job: JobConfig) -> SidecarInputs:
    """Gather and hash the inputs; ConfigError for a missing source directory or requirements file."""
    image = base.base_image(job)
    python = base.client_python(job)
    files = tuple(_context_files(job))
    values = {
        "base_image": image,
        "pwdeploy_version": __version__,
        "jax_version": job.pathways_version,
        "python_version": python,
        "pip_args": "".join(" " + shlex.quote(arg) for arg in job.sidecar.pip_args),
    }
    blocks = {"requirements": job.sidecar.requirements is not None, "source": job.sidecar.source_dir is not None}
    template = dockerfile.template_text()
    unhashed = dockerfile.render(template, {**values, "inputs_hash": ""}, blocks)
    digest = _hash(unhashed, files)
    text = dockerfile.render(template, {**values, "inputs_hash": digest}, blocks)
    return SidecarInputs(image, python, job.pathways_version, text, files, digest)


def check_repository(repository: str | None) -> str:
    """The validated ``sidecar.repository``; ConfigError when unset or not a bare repository."""
    if repository is None:
        raise ConfigError(
            "sidecar.repository",
            "is required to build: the registry/repo the sidecar is tagged and pushed as",
            hint="e.g. sidecar.repository: us-docker.pkg.dev/PROJECT/REPO/sidecar (or --sidecar-repository)",
        )
    last = repository.rsplit("/", 1)[-1]
    if "@" in repository or ":" in last:
        raise ConfigError(
            "sidecar.repository",
            f"{repository!r} has a tag or digest; give the repository only (pwdeploy tags it with the inputs hash)",
        )
    if not _REPOSITORY.fullmatch(repository):
        raise ConfigError(
            "sidecar.repository",
            f"{repository!r} is not a Docker repository; use [host[:port]/]path with lower-case letters, digits, "
            "'.', '_' and '-'",
        )
    return repository


def write_context(inputs: SidecarInputs, out: IO[bytes]) -> None:
    """Write the build context as a tar with fixed owners and times (same inputs, same bytes)."""
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        data = inputs.dockerfile.encode()
        _add(tar, "Dockerfile", len(data), 0o644, io.BytesIO(data))
        for item in inputs.files:
            with item.source.open("rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                _add(tar, item.name, size, 0o755 if item.executable else 0o644, handle)


def _context_files(job: JobConfig) -> Iterator[ContextFile]:
    requirements = job.sidecar.requirements
    if requirements is not None:
        if not requirements.is_file():
            raise ConfigError("sidecar.requirements", f"{requirements} is not a file")
        yield ContextFile("requirements.txt", requirements, False)
    source = job.sidecar.source_dir
    if source is not None:
        if not source.is_dir():
            raise ConfigError("sidecar.source_dir", f"{source} is not a directory")
        for path in _walk(source):
            relative = path.relative_to(source).as_posix()
            yield ContextFile(f"code/{relative}", path, bool(path.stat().st_mode & stat.S_IXUSR))


def _walk(root: Path) -> Iterator[Path]:
    """Regular files under root (symlinks to files followed, to directories not), in a fixed order."""
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in EXCLUDED_DIRS)
        for name in sorted(names):
            path = Path(directory, name)
            if name in EXCLUDED_NAMES or name.endswith(EXCLUDED_SUFFIXES) or not path.is_file():
                continue
            yield path


def _hash(dockerfile_text: str, files: tuple[ContextFile, ...]) -> str:
    digest = hashlib.sha256()
    digest.update(b"Dockerfile\0" + dockerfile_text.encode() + b"\0")
    for item in files:
        with item.source.open("rb") as handle:
            content = hashlib.file_digest(handle, "sha256").hexdigest()
        digest.update(f"{item.name}\0{'x' if item.executable else '-'}\0{content}\0".encode())
    return digest.hexdigest()


def _add(tar: tarfile.TarFile, name: str, size: int, mode: int, handle: IO[bytes]) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, mode, 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    tar.addfile(info, handle)
