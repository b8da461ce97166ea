"""Build inputs shared by every image spec: the rendered Dockerfile, the files of the build context, their hash.

The build context is a tar pwdeploy writes itself (the Dockerfile plus the files a spec names), so nothing outside
the configured inputs reaches the engine, and the hash covers exactly what is sent. A source folder's
``.dockerignore`` leaves files out (``pwdeploy.images.ignore``). Every image is built for ``TARGET_PLATFORM``, the
platform of the GKE TPU nodes, whatever the building machine is; the platform is part of the hash. The hash names
the image tag (``REPOSITORY:<first 16 hex digits>``): unchanged inputs give the same tag and are not rebuilt.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from pwdeploy.errors import ConfigError
from pwdeploy.imageref import repository_problem
from pwdeploy.images import template
from pwdeploy.images.ignore import IGNORE_FILE, IgnoreRules, looks_like_credentials
from pwdeploy.images.lock import LOCK_NAMES, BuiltWith, LockEntry

HASH_LABEL = "dev.pwdeploy.inputs-hash"
TARGET_PLATFORM = "linux/amd64"  # GKE TPU VMs are x86-64: an arm64 image fails there with "exec format error"
TAG_LENGTH = 16  # hex digits of the inputs hash in the tag
# Never part of an image: version control, caches, virtual environments, pwdeploy's own state and lock files.
EXCLUDED_DIRS = frozenset(
    {".git", ".hg", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".venv", ".pwdeploy"}
)
EXCLUDED_SUFFIXES = (".pyc", ".pyo")


@dataclass(frozen=True)
class ContextFile:
    name: str  # path inside the build context, with forward slashes
    source: Path | bytes  # a file on disk, or content pwdeploy generated
    executable: bool = False
    digest: str | None = None  # sha256 hex of the content, when known without reading it (a recorded wheel)

    def read(self) -> bytes:
        return self.source if isinstance(self.source, bytes) else self.source.read_bytes()


@dataclass(frozen=True)
class ImageInputs:
    base_image: str
    python_version: str
    jax_version: str
    dockerfile: str  # rendered, with the inputs hash in its labels
    files: tuple[ContextFile, ...]
    inputs_hash: str  # sha256 hex of the platform, the Dockerfile (without the hash) and every file
    platform: str = TARGET_PLATFORM  # os/arch the image is built for
    warnings: tuple[str, ...] = ()  # for the user (files that look like credentials); not part of the hash
    built_with: BuiltWith | None = None  # the parameters taken from the machine, recorded in the lock with the hash

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
    digest = _hash(platform, template.render(text, {**common, "inputs_hash": ""}, blocks), files)
    dockerfile = template.render(text, {**common, "inputs_hash": digest}, blocks)
    return ImageInputs(
        base_image, python_version, jax_version, dockerfile, files, digest, platform, warnings, built_with
    )


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


def directory_files(
    root: Path, field: str, prefix: str, *, skip: frozenset[Path] = frozenset()
) -> Iterator[ContextFile]:
    """The files under ``root`` as ``prefix/relative/path``, in a fixed order, less those its ``.dockerignore``
    leaves out; ``skip`` names more files left out."""
    if not root.is_dir():
        raise ConfigError(field, f"{root} is not a directory")
    try:
        rules = IgnoreRules.read(root)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(field, f"cannot read {root / IGNORE_FILE}: {exc}") from None
    for path in _walk(root, rules):
        if path.resolve() in skip:
            continue
        relative = path.relative_to(root).as_posix()
        yield ContextFile(f"{prefix}/{relative}", path, bool(path.stat().st_mode & stat.S_IXUSR))


def credential_warnings(files: tuple[ContextFile, ...], root: Path, field: str, prefix: str) -> tuple[str, ...]:
    """A warning naming the files copied from ``root`` whose names look like credentials (.env, keys, ...)."""
    found = [item.name[len(prefix) + 1 :] for item in files if item.name.startswith(prefix + "/")]
    suspicious = [name for name in found if looks_like_credentials(name)]
    if not suspicious:
        return ()
    listed = ", ".join(suspicious[:10]) + (f" and {len(suspicious) - 10} more" if len(suspicious) > 10 else "")
    return (
        f"{field} {root}: {listed} look like credentials and would be copied into the image, readable by everyone "
        f"who can pull it; list them in {root / IGNORE_FILE} (one pattern a line, e.g. "
        f"{suspicious[0].rsplit('/', 1)[-1]}) to leave them out",
    )


def write_context(inputs: ImageInputs, out: IO[bytes]) -> None:
    """Write the build context as a tar with fixed owners and times (same inputs, same bytes)."""
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        data = inputs.dockerfile.encode()
        _add(tar, "Dockerfile", len(data), 0o644, io.BytesIO(data))
        for item in inputs.files:
            mode = 0o755 if item.executable else 0o644
            if isinstance(item.source, bytes):
                _add(tar, item.name, len(item.source), mode, io.BytesIO(item.source))
                continue
            with item.source.open("rb") as handle:
                _add(tar, item.name, os.fstat(handle.fileno()).st_size, mode, handle)


def _walk(root: Path, rules: IgnoreRules) -> Iterator[Path]:
    """Regular files under root that ``rules`` keep (symlinks to files followed, to directories not), in a fixed
    order; folders left out as a whole are not read (a dataset folder costs nothing)."""
    for directory, subdirs, names in os.walk(root):
        here = Path(directory).relative_to(root).as_posix()
        at = "" if here == "." else here + "/"
        subdirs[:] = sorted(d for d in subdirs if d not in EXCLUDED_DIRS and not rules.prunes(at + d))
        for name in sorted(names):
            path = Path(directory, name)
            if name in LOCK_NAMES or name.endswith(EXCLUDED_SUFFIXES) or rules.excluded(at + name):
                continue
            if path.is_file():
                yield path


def _hash(platform: str, dockerfile_text: str, files: tuple[ContextFile, ...]) -> str:
    digest = hashlib.sha256()
    digest.update(b"platform\0" + platform.encode() + b"\0")
    digest.update(b"Dockerfile\0" + dockerfile_text.encode() + b"\0")
    for item in files:
        if item.digest is not None:
            content = item.digest
        elif isinstance(item.source, bytes):
            content = hashlib.sha256(item.source).hexdigest()
        else:
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
