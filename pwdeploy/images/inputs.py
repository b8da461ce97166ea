"""Build inputs shared by every image spec: the rendered Dockerfile, the files of the build context, their hash.

The build context is a tar pwdeploy writes itself (the Dockerfile plus the files a spec names), so nothing outside
the configured inputs reaches the engine, and the hash covers exactly what is sent. A source folder's
``.dockerignore`` leaves files out (``pwdeploy.images.ignore``). Every image is built for ``TARGET_PLATFORM``, the
platform of the GKE TPU nodes, whatever the building machine is; the platform is part of the hash. The hash names
the image tag (``REPOSITORY:<first 16 hex digits>``): unchanged inputs give the same tag and are not rebuilt.
"""

from __future__ import annotations

import contextlib
import operator
import os
import re
import stat
import struct
import sys
from collections.abc import Callable, Iterable, Mapping
from itertools import compress, starmap
from pathlib import Path
from typing import IO, TYPE_CHECKING

from pwdeploy.errors import ConfigError
from pwdeploy.imageref import repository_problem
from pwdeploy.images import template
from pwdeploy.images.digests import (
    FACTS,
    STAMP_FIELDS,
    STATE_DIR,
    WALK_STAMPS,
    DigestCache,
    Stamps,
    credential_flags,
    imports_pwdeploy,
    recall,
    remember,
    sha256,
)
from pwdeploy.images.ignore import IGNORE_FILE, BadPattern, IgnoreRules
from pwdeploy.images.lock import LOCK_NAMES, BuiltWith, LockEntry, Record

if TYPE_CHECKING:
    import tarfile
    from io import BufferedReader

    from pwdeploy.config import JobConfig

HASH_LABEL = "dev.pwdeploy.inputs-hash"
TARGET_PLATFORM = "linux/amd64"  # GKE TPU VMs are x86-64: an arm64 image fails there with "exec format error"
TAG_LENGTH = 16  # hex digits of the inputs hash in the tag
# Never part of an image: version control, caches, virtual environments, pwdeploy's own state and lock files.
EXCLUDED_DIRS = frozenset(
    {".git", ".hg", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".venv", STATE_DIR}
)
EXCLUDED_SUFFIXES = (".pyc", ".pyo")
# Folders that are never a job's source: walking them reads devices and the kernel's files.
PSEUDO_FILESYSTEMS = (Path("/proc"), Path("/sys"), Path("/dev"))
SYSTEM_FOLDERS = frozenset(
    Path(name) for name in ("/", "/bin", "/boot", "/etc", "/lib", "/lib64", "/opt", "/run", "/sbin", "/usr", "/var")
)
_PYTHON = r"([0-9]+)\.([0-9]+)"  # compiled by re when a job sets sidecar.python_version
MAX_FILES = 200_000  # a walk that finds more is not of a job's folder; bounded so that it ends with a clear error


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


def scan(root: Path, field: str, prefix: str, *, skip: frozenset[Path] = frozenset()) -> Folder:
    """The files under ``root`` (as ``prefix/relative/path`` in the context), in a fixed order, less those its
    ``.dockerignore`` leaves out; ``skip`` names more files left out. Their facts are read through the folder's
    digest cache (pwdeploy.images.digests): an unchanged file is not read again, nor its name judged again."""
    if not root.is_dir():
        raise ConfigError(field, f"{root} is not a directory")
    _refuse_system_folder(root, field)
    try:
        rules = IgnoreRules.read(root)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(field, f"cannot read {root / IGNORE_FILE}: {exc}") from None
    except BadPattern as exc:
        raise ConfigError(
            field,
            f"{root / IGNORE_FILE} {exc}: a syntax error in the pattern, which Docker refuses too",
            hint="fix or remove that line (a range runs from low to high, e.g. [a-z])",
        ) from None
    try:
        names, stamps, odd, links, skipped = _walk(root, rules, {path.name for path in skip})
    except OSError as exc:  # a folder this user may not list: its files would be missing from the image
        raise _unreadable(exc, root, field) from None
    left_out = set()
    for index in reversed(skipped):  # named like a file to skip: left out when it is one
        path = os.path.join(root, names[index])
        if Path(path).resolve() in skip:
            left_out.add(path)
            del names[index], stamps[index * WALK_STAMPS.size : (index + 1) * WALK_STAMPS.size]
            odd = {at - (at > index): row for at, row in odd.items() if at != index}
    if links:
        inside = os.path.realpath(root)
        for path in links:
            if path not in left_out:
                _check_link(Path(path), inside, root, field)
    if len(names) > MAX_FILES:
        raise ConfigError(
            field,
            f"{root} holds more than {MAX_FILES:,} files to copy into the image: that is not a job's source folder",
            hint=f"point {field} at the folder of the program, or leave data out with {root / IGNORE_FILE}",
        )
    _refuse_undecodable_names(names, root, field)
    packed = bytes(stamps)
    cache = DigestCache(root)
    try:
        facts = cache.walk_facts(names, packed, odd)
    except OSError as exc:  # a file this user may not read (made by a container as root), or gone since the walk
        raise _unreadable(exc, root, field) from None
    cache.save()
    return Folder(root, prefix, names, packed, odd, facts, cache.walk_id)


def _unreadable(exc: OSError, root: Path, field: str) -> ConfigError:
    """A folder this user may not list, or a file it may not read (one a container wrote as root): its files would
    be missing from the image, so it is an error naming it."""
    return ConfigError(
        field,
        f"cannot read {exc.filename or root}: {exc.strerror or exc}; every file of the folder goes into the image",
        hint=f"make it readable, or leave it out with a line in {root / IGNORE_FILE}",
    )


def _refuse_undecodable_names(names: list[str], root: Path, field: str) -> None:
    """A file name that is not UTF-8 (its bytes kept as surrogates) has no place in the image's manifest of
    inputs nor, reliably, in a build context: refused, naming the file, rather than failing inside the hash."""
    joined = "\0".join(names)
    if joined.isascii():  # one pass of C: the usual case
        return
    for name in names:
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            shown = os.fsencode(name).decode("utf-8", "backslashreplace")
            raise ConfigError(
                field,
                f"{root}/{shown} has a name that is not UTF-8: pwdeploy cannot record it among the image's inputs",
                hint=f"rename it, or leave it out with a line in {root / IGNORE_FILE}",
            ) from None


def _refuse_system_folder(root: Path, field: str) -> None:
    """A system folder (``/``, ``/proc``, ``/usr``, ...) is no job's source: walking it reads files of the kernel
    (``/proc/kmsg`` blocks for ever) and would copy the machine into the image."""
    resolved = Path(os.path.realpath(root))
    inside = next((top for top in PSEUDO_FILESYSTEMS if resolved == top or top in resolved.parents), None)
    if resolved in SYSTEM_FOLDERS or inside is not None or resolved == Path.home().resolve():
        what = f"inside {inside}, a file system of the kernel" if inside is not None else "a system folder"
        if resolved == Path.home().resolve():
            what = "your home folder"
        raise ConfigError(
            field,
            f"{root} is {what}, not a job's source folder: pwdeploy copies the whole folder into the image",
            hint=f"point {field} at the folder that holds the program (default: the config file's folder)",
        )


def _check_link(link: Path, inside: str, root: Path, field: str) -> None:
    """A file link is copied as the file it names only when that file is inside the folder: a link out of it (a
    cloned repository's ``notes -> ~/.ssh/id_ed25519``) would put an outside file into an image everyone who can
    pull reads. It is refused rather than copied as a link, since a link to a path outside the image would dangle
    there and the program would not find the file it expects."""
    target = os.path.realpath(link)
    if os.path.commonpath([inside, target]) != inside:
        raise ConfigError(
            field,
            f"{link} is a symbolic link to {os.readlink(link)} ({target}), outside {root}: pwdeploy copies only "
            "files inside the folder into the image",
            hint=f"copy the file into {root}, or leave the link out with a line in {root / IGNORE_FILE}",
        )


def config_file_warning(root: Path, config_file: Path, field: str) -> str | None:
    """A warning when the job's config file lies in a source folder that copies it (no ``.dockerignore`` line leaves
    it out): the image then holds the config, and every edit of it (a flag moved into the file, a new slice count)
    changes the image's inputs, so the image is out of date and rebuilt for nothing."""
    inside = os.path.realpath(root)
    config = os.path.realpath(config_file)
    if os.path.commonpath([inside, config]) != inside:
        return None
    relative = os.path.relpath(config, inside).replace(os.sep, "/")
    try:
        excluded = IgnoreRules.read(root).excluded(relative)
    except (OSError, UnicodeDecodeError, BadPattern):
        return None  # building says what is wrong with the file
    if excluded:
        return None
    return (
        f"{field} {root} holds the config file {relative}, which would be copied into the image, so every edit of "
        f"the config makes the image out of date: point {field} at the code's own folder, or add the line "
        f"{relative} to {root / IGNORE_FILE}"
    )


def _credential_warning(suspicious: list[str], root: Path, field: str) -> tuple[str, ...]:
    listed = ", ".join(suspicious[:10]) + (f" and {len(suspicious) - 10} more" if len(suspicious) > 10 else "")
    return (
        f"{field} {root}: {listed} look like credentials and would be copied into the image, readable by everyone "
        f"who can pull it; list them in {root / IGNORE_FILE} (one pattern a line, e.g. "
        f"{suspicious[0].rsplit('/', 1)[-1]}) to leave them out",
    )


def write_context(inputs: ImageInputs, out: IO[bytes]) -> None:
    """Write the build context as a tar with fixed owners and times (same inputs, same bytes)."""
    import io
    import tarfile  # here, not at the top: render never writes a context

    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        data = inputs.dockerfile.encode()
        _add(tar, "Dockerfile", len(data), 0o644, io.BytesIO(data))
        for item in inputs.files:
            mode = 0o755 if item.executable else 0o644
            if isinstance(item.source, bytes):
                _add(tar, item.name, len(item.source), mode, io.BytesIO(item.source))
                continue
            with open(item.source, "rb") as handle:
                _add(tar, item.name, os.fstat(handle.fileno()).st_size, mode, handle)


def _walk(
    root: Path, rules: IgnoreRules, skip: set[str]
) -> tuple[list[str], bytearray, dict[int, Stamps], list[str], list[int]]:
    """Regular files under root that ``rules`` keep (symlinks to files followed; symlinks to directories not
    followed): each folder's files by name, then its subfolders by name, depth first (the order the inputs hash has
    always used). Folders left out as a whole are not read (a dataset folder costs nothing). One listing per folder
    and one ``lstat`` per entry, by its name in its open folder (no path looked up again, no ``os.DirEntry`` made):
    this runs on every render that pins an image, so a folder's files go through C loops (map, compress) unless one
    of its entries is unusual (left out by a rule, a link, not a regular file or folder, gone), when
    ``_one_by_one`` judges them.

    Gives each file's path relative to root (with forward slashes); the stamps of each (``digests.STAMP_FIELDS``)
    packed as ``digests.WALK_STAMPS``, not kept as stat results (a fifth of the memory: a fresh process's walk
    spends less on allocating it), with the files whose stamps are too large to pack by index, their bytes zero;
    the paths of the files reached through a symbolic link (the caller checks they stay inside); and the indexes
    of the files named like one in ``skip`` (the caller decides whether it is that file). A folder that cannot be
    opened, listed or looked into (other than one gone since its parent was listed) raises OSError naming it: its
    files would be missing from the image."""
    names: list[str] = []
    stamps = bytearray()
    odd: dict[int, Stamps] = {}
    links: list[str] = []
    skipped: list[int] = []
    pending = [""]  # relative folders still to list, the next one last
    excluded = rules.excluded if rules.rules else None  # per file: no call at all without a .dockerignore
    lstat, is_regular = os.lstat, stat.S_ISREG
    # Names that need a look of their own (searched in one string of the folder's names, in C).
    unusual = [f"\0{name}\0" for name in LOCK_NAMES] + [f"{end}\0" for end in EXCLUDED_SUFFIXES]
    while pending:
        at = pending.pop()
        try:
            folder = os.open(root / at if at else root, _FOLDER_FLAGS)
        except (FileNotFoundError, NotADirectoryError):  # gone (or replaced) since its parent was listed
            continue
        try:
            here = os.listdir(folder)
            here.sort()
            joined = "\0" + "\0".join(here) + "\0"  # one string searched in C for the names that need a look
            found: list[os.stat_result] | None = None
            if excluded is None and not any(map(joined.__contains__, unusual)):
                with contextlib.suppress(FileNotFoundError):  # gone since the listing: one by one
                    found = [lstat(name, dir_fd=folder) for name in here]
            files, subfolders = here, []
            linked: list[str] = []
            modes = list(map(_MODE, found)) if found is not None else []
            if found is not None and not all(map(is_regular, modes)):  # subfolders, links, FIFOs
                folders = list(map(stat.S_ISDIR, modes))
                if all(map(operator.or_, folders, map(is_regular, modes))):
                    subfolders = [f"{at}{name}/" for name in compress(here, folders) if name not in EXCLUDED_DIRS]
                    keep = list(map(operator.not_, folders))
                    files, found = list(compress(here, keep)), list(compress(found, keep))
                else:
                    found = None
            if found is None:
                files, found, subfolders, linked = _one_by_one(folder, at, here, rules, excluded)
        except OSError as exc:  # the open folder could not be listed: named by its path, not its descriptor
            raise OSError(exc.errno, exc.strerror, os.fspath(root / at)) from None
        finally:
            os.close(folder)
        if skip and any(f"\0{name}\0" in joined for name in skip):  # named in the folder: which file, if any
            skipped.extend(len(names) + index for index, name in enumerate(files) if name in skip)
        links.extend(os.path.join(root, at + name) for name in linked)
        try:
            stamps += b"".join(starmap(WALK_STAMPS.pack, map(STAMP_FIELDS, found)))
        except struct.error:  # times past the year 2262
            for index, row in enumerate(map(STAMP_FIELDS, found)):
                try:
                    stamps += WALK_STAMPS.pack(*row)
                except struct.error:
                    stamps += bytes(WALK_STAMPS.size)
                    odd[len(names) + index] = row
        names.extend(map(at.__add__, files) if at else files)
        pending.extend(reversed(subfolders))
        if len(names) - len(skipped) > MAX_FILES:  # bounded: the caller says why
            break
    return names, stamps, odd, links, skipped


def _one_by_one(
    folder: int, at: str, here: list[str], rules: IgnoreRules, excluded: Callable[[str], bool] | None
) -> tuple[list[str], list[os.stat_result], list[str], list[str]]:
    """Of a folder's entries ``here`` (``at`` its path in the root, ``folder`` open), the files kept (not a lock
    file or compiled Python, not left out by ``excluded``, a regular file or a link to one, still there) with their
    stats, the subfolders to walk (not a link, not excluded, not pruned by ``rules``) and the files that are links."""
    files, found, subfolders, linked = [], [], [], []
    for name in here:
        try:
            status = os.lstat(name, dir_fd=folder)
        except FileNotFoundError:  # gone since the listing
            continue
        if stat.S_ISDIR(status.st_mode):
            if name not in EXCLUDED_DIRS and not rules.prunes(at + name):
                subfolders.append(f"{at}{name}/")
            continue
        if name in LOCK_NAMES or name.endswith(EXCLUDED_SUFFIXES) or (excluded is not None and excluded(at + name)):
            continue
        if stat.S_ISLNK(status.st_mode):
            try:
                status = os.stat(name, dir_fd=folder)
            except OSError:  # a dangling link, or a loop
                continue
            if stat.S_ISREG(status.st_mode):
                linked.append(name)
        if stat.S_ISREG(status.st_mode):
            files.append(name)
            found.append(status)
    return files, found, subfolders, linked


_MODE = operator.attrgetter("st_mode")
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_OWNER_EXECUTES = stat.S_IXUSR


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


def _add(tar: tarfile.TarFile, name: str, size: int, mode: int, handle: IO[bytes]) -> None:
    import tarfile

    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, mode, 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    tar.addfile(info, handle)
