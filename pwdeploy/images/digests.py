"""A per-folder cache of what reading each file of a build context told: its sha256, for a ``.py`` file whether
it imports pwdeploy, and whether its name looks like credentials (``ignore.looks_like_credentials``). ``render``
checks a pinned image by hashing the job's folder, and ``image build`` / ``sidecar build`` decide "up to date" the
same way; with the cache an unchanged file is not read again, nor its name matched again.

The cache is ``<folder>/.pwdeploy/file-digests.json`` (``.pwdeploy`` is never part of a build context), one
entry per file by its path in the folder. An entry counts only while the file's size, mtime_ns, ctime_ns and
inode are what they were when it was read: any write moves mtime and ctime (ctime even when ``os.utime`` or
``touch -d`` puts the mtime back), a file replaced by a rename has another inode. What stamps cannot show is
git's "racy" case (https://git-scm.com/docs/racy-git): a file changed again within the timestamp tick of its
previous change keeps its stamps. So, like git with its index, an entry is only written for a file whose last
change is older than a stamp the file system itself gave just before this run read anything (a file made in
``.pwdeploy/``, so the same clock and granularity); a file changed at or after that stamp is read again next
time. A cache that cannot be parsed, or of another ``FORMAT`` (which names the rules the verdicts were judged
by), is ignored and rewritten; an entry of the wrong shape is read again; a folder that cannot be written is
read in full each time, as without a cache.

Every render of a pinned job reads the whole cache and looks up every file, so an entry is one string of 129
characters: the stamps (size, mtime_ns, ctime_ns, inode as 8 bytes each, in hex), the sha256 hex, a flags digit
(1: imports pwdeploy, 2: looks like credentials, 3: both). json parses 5,000 such strings in a fifth of the time
it takes for 5,000 lists of 19-digit numbers, the stamps are compared as one string, and only an entry a lookup
uses is checked for its shape (its length, its flags digit, its digest decoded as 32 bytes of hex: a regex
would cost that lookup twice as much).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import struct
from pathlib import Path
from typing import Any, NamedTuple

from pwdeploy.atomic import write_text_atomic
from pwdeploy.images.ignore import CREDENTIAL_NAMES, looks_like_credentials

STATE_DIR = ".pwdeploy"
CACHE_NAME = "file-digests.json"
IMPORTS_PWDEPLOY = re.compile(rb"^[ \t]*(?:from|import)[ \t]+pwdeploy\b", re.MULTILINE)
_RULES = b"\0".join([IMPORTS_PWDEPLOY.pattern, *(name.encode() for name in CREDENTIAL_NAMES)])
# The entries' shape and the rules their verdicts were judged by. Another value: the cache is ignored (and
# rewritten in this format), so a pwdeploy that judges imports or names otherwise judges every file again.
FORMAT = f"2-{hashlib.sha256(_RULES).hexdigest()[:16]}"
_STAMPS = struct.Struct("<QqqQ")  # size, mtime_ns, ctime_ns, inode
_LENGTH = 2 * _STAMPS.size + 64 + 1  # the characters of an entry: stamps, sha256 hex, flags digit
_FLAGS, _IMPORTS, _CREDENTIALS = "0123", "13", "23"  # the flags digits: all, importing pwdeploy, named like a secret


class FileFacts(NamedTuple):
    sha256: str
    imports_pwdeploy: bool  # only ever True for a .py file
    looks_like_credentials: bool = False  # by its name: ignore.looks_like_credentials


class DigestCache:
    """The cache of one folder: ``facts`` of each file found there, ``save`` when the walk is done."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / STATE_DIR / CACHE_NAME
        self._known = _read(self.path)
        self._seen: dict[str, str] = {}
        self._stamp: int | None = None  # ns; None until this run reads a file
        self._changed = False  # a file was read: its entry is new, or left out as racy
        self._writable = True
        self.read_count = 0  # files read (hashed) by this run

    def facts(self, relative: str, path: str, status: os.stat_result) -> FileFacts:
        """What the file at ``path`` (``relative`` in the folder, ``status`` its stat) holds: from the cache when
        its stamps are unchanged, else read now."""
        stamps = _stamps(status)
        cached = self._cached(relative, stamps) if stamps else None
        if cached is not None:
            return cached
        if self._stamp is None:
            self._stamp = self._take_stamp()
        sha256, imports_pwdeploy, _ = _read_facts(path)
        found = FileFacts(sha256, imports_pwdeploy, looks_like_credentials(relative))
        self.read_count += 1
        self._changed = True
        if stamps and max(status.st_mtime_ns, status.st_ctime_ns) < self._stamp:  # not racy: a later change shows
            self._seen[relative] = f"{stamps}{sha256}{found.imports_pwdeploy + 2 * found.looks_like_credentials}"
        return found

    def _cached(self, relative: str, stamps: str) -> FileFacts | None:
        """The facts in the entry of ``relative`` when it starts with ``stamps`` and has the right shape."""
        entry = self._known.get(relative)
        if type(entry) is not str or len(entry) != _LENGTH or not entry.startswith(stamps) or entry[-1] not in _FLAGS:
            return None
        try:
            sha256 = bytes.fromhex(entry[len(stamps) : -1]).hex()  # lower-case, whatever the case in the entry
        except ValueError:
            return None
        if len(sha256) != 64:  # fromhex skips spaces between bytes
            return None
        self._seen[relative] = entry
        flags = entry[-1]
        return FileFacts(sha256, flags in _IMPORTS, flags in _CREDENTIALS)

    def save(self) -> None:
        """Write the entries of the files seen by this run, when they differ from what was read (never fails:
        a cache that cannot be written only costs the reads next time)."""
        unchanged = not self._changed and len(self._seen) == len(self._known)  # every entry used, none added
        if unchanged or not self._writable:
            return
        text = json.dumps({"format": FORMAT, "files": self._seen}, separators=(",", ":"), sort_keys=True)
        with contextlib.suppress(OSError):
            write_text_atomic(self.path, text + "\n")

    def _take_stamp(self) -> int:
        """The file system's time now, in ns: the mtime of a file made beside the cache (removed at once). Without
        a writable folder, a stamp older than every file: nothing is cached."""
        marker = self.path.with_name(f".stamp-{os.urandom(6).hex()}")
        try:
            marker.parent.mkdir(exist_ok=True)
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError:
            self._writable = False
            return -1
        try:
            return os.fstat(fd).st_mtime_ns
        finally:
            os.close(fd)
            marker.unlink(missing_ok=True)


def _read(path: Path) -> dict[str, Any]:
    """The cached entries; {} for a missing, unreadable or malformed cache (entries are checked when used)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # RecursionError: arrays or objects nested too deep to parse
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("files"), dict):
        return {}
    files: dict[str, Any] = data["files"]
    return files


def _stamps(status: os.stat_result) -> str:
    """The stamps of an entry, as they start it; "" for a file whose times do not fit 64 bits (past the year
    2262), which is then read each time."""
    try:
        return _STAMPS.pack(status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino).hex()
    except struct.error:
        return ""


def _read_facts(path: str) -> FileFacts:
    with open(path, "rb") as handle:
        if not path.endswith(".py"):
            return FileFacts(hashlib.file_digest(handle, "sha256").hexdigest(), False)
        data = handle.read()
    return FileFacts(hashlib.sha256(data).hexdigest(), bool(IMPORTS_PWDEPLOY.search(data)))
