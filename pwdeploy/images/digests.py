"""A per-folder cache of what reading each file of a build context told: its sha256, and for a ``.py`` file
whether it imports pwdeploy. ``render`` checks a pinned image by hashing the job's folder, and ``image build`` /
``sidecar build`` decide "up to date" the same way; with the cache an unchanged file is not read again.

The cache is ``<folder>/.pwdeploy/file-digests.json`` (``.pwdeploy`` is never part of a build context), one
entry per file by its path in the folder. An entry counts only while the file's size, mtime_ns, ctime_ns and
inode are what they were when it was read: any write moves mtime and ctime (ctime even when ``os.utime`` or
``touch -d`` puts the mtime back), a file replaced by a rename has another inode. What stamps cannot show is
git's "racy" case (https://git-scm.com/docs/racy-git): a file changed again within the timestamp tick of its
previous change keeps its stamps. So, like git with its index, an entry is only written for a file whose last
change is older than a stamp the file system itself gave just before this run read anything (a file made in
``.pwdeploy/``, so the same clock and granularity); a file changed at or after that stamp is read again next
time. A cache that cannot be parsed, or an entry of the wrong shape, is ignored and rewritten; a folder that
cannot be written is read in full each time, as without a cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, NamedTuple

from pwdeploy.atomic import write_text_atomic

STATE_DIR = ".pwdeploy"
CACHE_NAME = "file-digests.json"
FORMAT = 1  # another value: the cache is ignored (and rewritten in this format)
IMPORTS_PWDEPLOY = re.compile(rb"^[ \t]*(?:from|import)[ \t]+pwdeploy\b", re.MULTILINE)
_SHA256 = re.compile(r"[0-9a-f]{64}")


class FileFacts(NamedTuple):
    sha256: str
    imports_pwdeploy: bool  # only ever True for a .py file


class DigestCache:
    """The cache of one folder: ``facts`` of each file found there, ``save`` when the walk is done."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / STATE_DIR / CACHE_NAME
        self._known = _read(self.path)
        self._seen: dict[str, list[Any]] = {}
        self._stamp: int | None = None  # ns; None until this run reads a file
        self._changed = False  # a file was read: its entry is new, or left out as racy
        self._writable = True
        self.read_count = 0  # files read (hashed) by this run

    def facts(self, relative: str, path: str, status: os.stat_result) -> FileFacts:
        """What the file at ``path`` (``relative`` in the folder, ``status`` its stat) holds: from the cache when
        its stamps are unchanged, else read now."""
        stamps = [status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino]
        entry = self._known.get(relative)
        if type(entry) is list and entry[:4] == stamps and _valid_facts(entry):
            self._seen[relative] = entry
            return FileFacts(entry[4], bool(entry[5]))
        if self._stamp is None:
            self._stamp = self._take_stamp()
        found = _read_facts(path)
        self.read_count += 1
        self._changed = True
        if max(status.st_mtime_ns, status.st_ctime_ns) < self._stamp:  # not racy: a later change shows
            self._seen[relative] = [*stamps, found.sha256, int(found.imports_pwdeploy)]
        return found

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
    except (OSError, ValueError, RecursionError):  # RecursionError: arrays nested too deep for the parser
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("files"), dict):
        return {}
    files: dict[str, Any] = data["files"]
    return files


def _valid_facts(entry: list[Any]) -> bool:
    """An entry is [size, mtime_ns, ctime_ns, inode, sha256 hex, imports pwdeploy 0/1]; the stamps were compared."""
    return (
        len(entry) == 6 and isinstance(entry[4], str) and _SHA256.fullmatch(entry[4]) is not None and entry[5] in (0, 1)
    )


def _read_facts(path: str) -> FileFacts:
    with open(path, "rb") as handle:
        if not path.endswith(".py"):
            return FileFacts(hashlib.file_digest(handle, "sha256").hexdigest(), False)
        data = handle.read()
    return FileFacts(hashlib.sha256(data).hexdigest(), bool(IMPORTS_PWDEPLOY.search(data)))
