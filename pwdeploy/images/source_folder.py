"""A source folder's files for an image: one walk of the folder (``scan``), in a fixed order, less what its
``.dockerignore`` and pwdeploy's own rules leave out, with each file's facts read through the folder's digest cache
(pwdeploy.images.digests). What must not reach an image is refused, naming the file: a system folder, a link out of
the folder, a name that is not UTF-8, a folder or file this user cannot read, a walk of more than ``MAX_FILES``.
A render that pins an image walks the job's folder: the walk is written for that (one listing and one ``lstat``
per entry, C loops over a folder's names unless one of them is unusual)."""

from __future__ import annotations

import contextlib
import operator
import os
import stat
import struct
from collections.abc import Callable
from itertools import compress, starmap
from pathlib import Path

from pwdeploy.errors import ConfigError
from pwdeploy.images.digests import STAMP_FIELDS, STATE_DIR, WALK_STAMPS, DigestCache, Stamps
from pwdeploy.images.ignore import IGNORE_FILE, BadPattern, IgnoreRules
from pwdeploy.images.inputs import Folder
from pwdeploy.images.lock import LOCK_NAMES

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
MAX_FILES = 200_000  # a walk that finds more is not of a job's folder; bounded so that it ends with a clear error
_MODE = operator.attrgetter("st_mode")
_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
# Names in a folder that need a look of their own (searched for in one string of the folder's names, in C).
_UNUSUAL = [f"\0{name}\0" for name in LOCK_NAMES] + [f"{end}\0" for end in EXCLUDED_SUFFIXES]
Listed = tuple[list[str], list[os.stat_result], list[str], list[str]]  # files, their stats, subfolders, links


def scan(root: Path, field: str, prefix: str, *, skip: frozenset[Path] = frozenset()) -> Folder:
    """The files under ``root`` (as ``prefix/relative/path`` in the context), in a fixed order, less those its
    ``.dockerignore`` leaves out; ``skip`` names more files left out. Their facts are read through the folder's
    digest cache (pwdeploy.images.digests): an unchanged file is not read again, nor its name judged again."""
    if not root.is_dir():
        raise ConfigError(field, f"{root} is not a directory")
    _refuse_system_folder(root, field)
    rules = _ignore_rules(root, field)
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
    inside = os.path.realpath(root)
    for path in (path for path in links if path not in left_out):
        _check_link(Path(path), inside, root, field)
    _refuse_many(len(names), root, field)
    _refuse_undecodable_names(names, root, field)
    packed = bytes(stamps)
    cache = DigestCache(root)
    try:
        facts = cache.walk_facts(names, packed, odd)
    except OSError as exc:  # a file this user may not read (made by a container as root), or gone since the walk
        raise _unreadable(exc, root, field) from None
    cache.save()
    return Folder(root, prefix, names, packed, odd, facts, cache.walk_id)


def _ignore_rules(root: Path, field: str) -> IgnoreRules:
    """The folder's ``.dockerignore``; a file that cannot be read, or a pattern Docker refuses, is an error."""
    try:
        return IgnoreRules.read(root)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(field, f"cannot read {root / IGNORE_FILE}: {exc}") from None
    except BadPattern as exc:
        raise ConfigError(
            field,
            f"{root / IGNORE_FILE} {exc}: a syntax error in the pattern, which Docker refuses too",
            hint="fix or remove that line (a range runs from low to high, e.g. [a-z])",
        ) from None


def _refuse_many(count: int, root: Path, field: str) -> None:
    if count > MAX_FILES:
        raise ConfigError(
            field,
            f"{root} holds more than {MAX_FILES:,} files to copy into the image: that is not a job's source folder",
            hint=f"point {field} at the folder of the program, or leave data out with {root / IGNORE_FILE}",
        )


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
    walk = _Walk(root, skip)
    excluded = rules.excluded if rules.rules else None  # per file: no call at all without a .dockerignore
    pending = [""]  # relative folders still to list, the next one last
    while pending and len(walk.names) - len(walk.skipped) <= MAX_FILES:  # bounded: the caller says why
        at = pending.pop()
        listed = _list(root, at, rules, excluded)
        if listed is not None:
            walk.add(at, *listed)
            pending.extend(reversed(listed[2]))
    return walk.names, walk.stamps, walk.odd, walk.links, walk.skipped


class _Walk:
    """What a walk found so far, folder by folder."""

    __slots__ = ("links", "names", "odd", "root", "skip", "skipped", "stamps")

    def __init__(self, root: Path, skip: set[str]) -> None:
        self.root, self.skip = root, skip
        self.names: list[str] = []
        self.stamps = bytearray()
        self.odd: dict[int, Stamps] = {}
        self.links: list[str] = []
        self.skipped: list[int] = []

    def add(
        self, at: str, files: list[str], found: list[os.stat_result], _: list[str], linked: list[str], joined: str
    ) -> None:
        """One folder's files (``at`` its path in the root, ``joined`` its names as one string)."""
        if self.skip and any(f"\0{name}\0" in joined for name in self.skip):  # named in the folder: which file
            self.skipped.extend(len(self.names) + index for index, name in enumerate(files) if name in self.skip)
        self.links.extend(os.path.join(self.root, at + name) for name in linked)
        try:
            self.stamps += b"".join(starmap(WALK_STAMPS.pack, map(STAMP_FIELDS, found)))
        except struct.error:  # times past the year 2262
            for index, row in enumerate(map(STAMP_FIELDS, found)):
                try:
                    self.stamps += WALK_STAMPS.pack(*row)
                except struct.error:
                    self.stamps += bytes(WALK_STAMPS.size)
                    self.odd[len(self.names) + index] = row
        self.names.extend(map(at.__add__, files) if at else files)


def _list(
    root: Path, at: str, rules: IgnoreRules, excluded: Callable[[str], bool] | None
) -> tuple[list[str], list[os.stat_result], list[str], list[str], str] | None:
    """The folder ``at`` of ``root``: its files kept, their stats, its subfolders to walk, its files that are
    links, and its names joined; None when it is gone (or replaced) since its parent was listed."""
    try:
        folder = os.open(root / at if at else root, _FOLDER_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        here = os.listdir(folder)
        here.sort()
        joined = "\0" + "\0".join(here) + "\0"
        return (*_entries(folder, at, here, joined, rules, excluded), joined)
    except OSError as exc:  # the open folder could not be listed: named by its path, not its descriptor
        raise OSError(exc.errno, exc.strerror, os.fspath(root / at)) from None
    finally:
        os.close(folder)


def _entries(
    folder: int, at: str, here: list[str], joined: str, rules: IgnoreRules, excluded: Callable[[str], bool] | None
) -> Listed:
    """A folder's entries in C loops when none is unusual (only regular files and folders, no rule per file, no
    lock file or compiled Python, none gone since the listing); else ``_one_by_one``."""
    found: list[os.stat_result] | None = None
    if excluded is None and not any(map(joined.__contains__, _UNUSUAL)):
        lstat = os.lstat
        with contextlib.suppress(FileNotFoundError):  # gone since the listing: one by one
            found = [lstat(name, dir_fd=folder) for name in here]
    if found is None:
        return _one_by_one(folder, at, here, rules, excluded)
    modes = list(map(_MODE, found))
    is_regular = stat.S_ISREG
    if all(map(is_regular, modes)):
        return here, found, [], []
    folders = list(map(stat.S_ISDIR, modes))
    if not all(map(operator.or_, folders, map(is_regular, modes))):  # links, FIFOs
        return _one_by_one(folder, at, here, rules, excluded)
    subfolders = [f"{at}{name}/" for name in compress(here, folders) if name not in EXCLUDED_DIRS]
    keep = list(map(operator.not_, folders))
    return list(compress(here, keep)), list(compress(found, keep)), subfolders, []


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
