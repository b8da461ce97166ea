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

Each entry is one string of 129 characters: the stamps (size, mtime_ns, ctime_ns, inode as 8 bytes each, in hex),
the sha256 hex, a flags digit (1: imports pwdeploy, 2: looks like credentials, 3: both). json parses 5,000 such
strings in a fifth of the time it takes for 5,000 lists of 19-digit numbers, the stamps are compared as one string,
and only an entry a lookup uses is checked for its shape (its length, its flags digit, its digest 64 lower-case hex
digits, found by stripping them: a regex or a decode would cost the lookup twice as much); any other entry is read
again.

Most renders find the folder as the last walk left it. So the walk is recorded too, in a file of its own
(``<folder>/.pwdeploy/last-walk``): a header with the walk's id, every file's path, stamps and mode in the walk's
order as bytes, then each file's sha256 and flags digit in that order. When this run's walk packs to the same bytes
(one comparison), the facts come from the record: no JSON is parsed, no entry looked up (5,000 files: the digest
cache and the record add 1.0-1.1 ms CPU to the walk itself, ``benchmarks/bench_pin_cache.py``). The record is only
written when every file of the walk has an entry (none racy), is checked as a whole when used (its id, length, hex
digits, flags digits), and a damaged or missing record only costs the lookups. What is computed from a recorded
walk and nothing else (``inputs.inputs_hash``: the inputs hash of a pinned image) can be kept under the walk's id
and a key over the other inputs (``remember``, ``recall``: ``<folder>/.pwdeploy/last-hashes``); a record written
again has a new id, so nothing kept for an older walk answers.
"""

from __future__ import annotations

import contextlib
import operator
import os
import re
import struct
from pathlib import Path
from typing import Any

from pwdeploy.atomic import write_bytes_atomic, write_text_atomic
from pwdeploy.images.ignore import CREDENTIAL_NAMES, looks_like_credentials
from pwdeploy.images.lock import STATE_DIR as STATE_DIR  # the folder its files go in (one name for both)

try:  # CPython's own sha256 imports in 0.2 ms, hashlib's OpenSSL in 2.5 ms; render of a pinned job hashes < 1 MB
    from _sha256 import sha256 as sha256  # type: ignore[import-not-found]  # Python <= 3.11
except ImportError:  # pragma: no cover - the Python of the tests has it
    try:
        from _sha2 import sha256 as sha256  # type: ignore[import-not-found]  # Python >= 3.12
    except ImportError:  # a Python built without it
        from hashlib import sha256 as sha256

CACHE_NAME = "file-digests.json"
WALK_NAME = "last-walk"
# Compiled by re when a .py file is first read (render of an unchanged folder reads none).
IMPORTS_PWDEPLOY = rb"^[ \t]*(?:from|import)[ \t]+pwdeploy\b"
_RULES = b"\0".join([IMPORTS_PWDEPLOY, *(name.encode() for name in CREDENTIAL_NAMES)])
# The entries' shape and the rules their verdicts were judged by. Another value: the cache is ignored (and
# rewritten in this format), so a pwdeploy that judges imports or names otherwise judges every file again.
FORMAT = f"2-{sha256(_RULES).hexdigest()[:16]}"
# A record of a walk begins with this, its id (16 hex digits), then " <length of the walk's paths and stamps>\n".
_WALK_HEADER = b"pwdeploy-walk " + FORMAT.encode() + b" "
_ID_LENGTH = 16
_STAMPS = struct.Struct("<QqqQ")  # size, mtime_ns, ctime_ns, inode
# A walk's stamps of each file: the same and the mode (a record vouches for each file's execute bit too).
WALK_STAMPS = struct.Struct("<QqqQL")
STAMP_FIELDS = operator.attrgetter("st_size", "st_mtime_ns", "st_ctime_ns", "st_ino", "st_mode")  # of a stat
Stamps = tuple[int, int, int, int, int]  # a file's STAMP_FIELDS
_LENGTH = 2 * _STAMPS.size + 64 + 1  # the characters of an entry: stamps, sha256 hex, flags digit
_FLAGS, _IMPORTS, _CREDENTIALS = "0123", "13", "23"  # the flags digits: all, importing pwdeploy, named like a secret
_DIGEST = slice(2 * _STAMPS.size, -1)  # the sha256 hex in an entry
FACTS = 64 + 1  # the characters of a file's facts: its sha256 hex and flags digit
_HEX_DIGITS = "0123456789abcdef"
_HEX_BYTES, _FLAG_BYTES = _HEX_DIGITS.encode(), _FLAGS.encode()
_MAX_RECORD = 1 << 30  # bytes: a record past this is not read (200,000 files take about 40 MB)
HASHES_NAME = "last-hashes"  # what was computed from a recorded walk: lines of "walk-id key value"
_MAX_HASHES = 16  # lines kept


class FileFacts:
    """What reading a file told (a plain class: render imports this module, and a NamedTuple class costs 0.1-0.2 ms
    to make)."""

    __slots__ = ("imports_pwdeploy", "looks_like_credentials", "sha256")

    def __init__(self, sha256: str, imports_pwdeploy: bool, looks_like_credentials: bool = False) -> None:
        self.sha256 = sha256
        self.imports_pwdeploy = imports_pwdeploy  # only ever True for a .py file
        self.looks_like_credentials = looks_like_credentials  # by its name: ignore.looks_like_credentials


def imports_pwdeploy(facts: str) -> list[bool]:
    """Of each file whose facts ``facts`` holds (``DigestCache.walk_facts``), whether it imports pwdeploy."""
    return [flag in _IMPORTS for flag in facts[FACTS - 1 :: FACTS]]


def credential_flags(facts: str) -> list[bool]:
    """Of each file whose facts ``facts`` holds, whether its name looks like credentials."""
    return [flag in _CREDENTIALS for flag in facts[FACTS - 1 :: FACTS]]


class DigestCache:
    """The cache of one folder: ``walk_facts`` of a walk's files (or ``facts`` of one), ``save`` when done."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / STATE_DIR / CACHE_NAME
        self.walk_path = folder / STATE_DIR / WALK_NAME
        self._loaded: dict[str, Any] | None = None  # the entries, read when a lookup first needs them
        self._rewrite = False  # the cache file holds more than the entries (an earlier layout): write it again
        self._seen: dict[str, str] = {}
        # This run's walk when every stamp could be packed: its count, paths and stamps, as its record holds them.
        self._walk: tuple[bytes, bytes, bytes] | None = None
        self._walk_facts = ""  # the facts of this run's walk, in its order
        self._walk_count = 0  # the files of this run's walk
        self._walk_unchanged = False  # this run's walk is the one recorded: nothing to write
        self.walk_id: str | None = None  # the id of the record of this run's walk, once there is one (``recall``)
        self._stamp: int | None = None  # ns; None until this run reads a file
        self._changed = False  # a file was read: its entry is new, or left out as racy
        self._writable = True
        self.read_count = 0  # files read (hashed) by this run

    def walk_facts(self, names: list[str], stamps: bytes, odd: dict[int, Stamps]) -> str:
        """The facts of each file of a walk of the folder (``names`` in it, ``stamps`` of each packed as
        ``WALK_STAMPS``, but for the files ``odd`` names by index: stamps too large to pack, the bytes there
        meaningless), in the walk's order, as one string: per file its sha256 hex and a flags digit (``FACTS``
        characters; read them with ``imports_pwdeploy`` and ``credential_flags``). When the walk is the one the
        record of the last walk holds (the same files in the same order, each with the same stamps and mode), the
        facts come from that record with no lookup per file; else file by file (``facts``)."""
        if not odd:  # else a file's times are past the year 2262: no record of this walk
            self._walk = (b"%d\0" % len(names), "\0".join(names).encode("utf-8", "surrogateescape") + b"\0", stamps)
            self._walk_count = len(names)
            recorded = _recorded_facts(self.walk_path, self._walk, len(names))
            if recorded is not None:
                self.walk_id, facts = recorded
                self._walk_unchanged = True
                return facts
        folder = os.fspath(self.folder)
        rows = list(WALK_STAMPS.iter_unpack(stamps))
        for index, row in odd.items():
            rows[index] = row
        found = [
            self.facts(relative, os.path.join(folder, relative), row) for relative, row in zip(names, rows, strict=True)
        ]
        self._walk_facts = "".join(
            [f"{item.sha256}{item.imports_pwdeploy + 2 * item.looks_like_credentials}" for item in found]
        )
        return self._walk_facts

    def facts(self, relative: str, path: str, row: Stamps) -> FileFacts:
        """What the file at ``path`` (``relative`` in the folder, ``row`` its ``STAMP_FIELDS``) holds: from the
        cache when its stamps are unchanged, else read now. Kept to a few string operations on a hit: a walk that
        is not the recorded one calls it for every file of the folder."""
        size, mtime_ns, ctime_ns, inode, _ = row
        try:
            stamps = _STAMPS.pack(size, mtime_ns, ctime_ns, inode).hex()
        except struct.error:  # times past the year 2262: read each time
            stamps = ""
        entry = self._entries().get(relative)
        if stamps and type(entry) is str and len(entry) == _LENGTH and entry.startswith(stamps):
            sha256, flags = entry[_DIGEST], entry[-1]
            if flags in _FLAGS and not sha256.strip(_HEX_DIGITS):  # 64 lower-case hex digits
                self._seen[relative] = entry
                return FileFacts(sha256, flags in _IMPORTS, flags in _CREDENTIALS)
        if self._stamp is None:
            self._stamp = self._take_stamp()
        read = _read_facts(path)
        sha256 = read.sha256
        found = FileFacts(sha256, read.imports_pwdeploy, looks_like_credentials(relative))
        self.read_count += 1
        self._changed = True
        if stamps and max(mtime_ns, ctime_ns) < self._stamp:  # not racy: a later change shows
            self._seen[relative] = f"{stamps}{sha256}{found.imports_pwdeploy + 2 * found.looks_like_credentials}"
        return found

    def save(self) -> None:
        """Write the entries of the files seen by this run, when they differ from what was read, and the record of
        this run's walk (never fails: a cache that cannot be written only costs the reads next time)."""
        if self._walk_unchanged or not self._writable:
            return
        known = self._entries()
        unchanged = not self._changed and len(self._seen) == len(known)  # every entry used, none added
        if not unchanged or self._rewrite:
            import json  # here: a render of an unchanged folder reads only the record of the walk

            text = json.dumps({"format": FORMAT, "files": self._seen}, separators=(",", ":"), sort_keys=True)
            with contextlib.suppress(OSError):
                write_text_atomic(self.path, text + "\n")
        # Only when every file of the walk has an entry (none racy) do the stamps vouch for the facts recorded.
        if self._walk is not None and len(self._seen) == self._walk_count:
            walk_id = os.urandom(_ID_LENGTH // 2).hex()
            walk = b"".join(self._walk)
            header = _WALK_HEADER + b"%s %d\n" % (walk_id.encode(), len(walk))
            with contextlib.suppress(OSError):
                write_bytes_atomic(self.walk_path, header + walk + self._walk_facts.encode("ascii"))
                self.walk_id = walk_id
        else:  # a record of an older walk: it no longer answers, so it is only bytes to read
            with contextlib.suppress(OSError):
                self.walk_path.unlink(missing_ok=True)

    def _entries(self) -> dict[str, Any]:
        if self._loaded is None:
            self._loaded, self._rewrite = _read(self.path)
        return self._loaded

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


def _read(path: Path) -> tuple[dict[str, Any], bool]:
    """The cached entries, and whether the file holds more than them (an earlier layout's record of a walk); {} for
    a missing, unreadable or malformed cache (entries are checked when used)."""
    import json  # here: a render of an unchanged folder reads only the record of the walk

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # RecursionError: arrays or objects nested too deep to parse
        return {}, False
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("files"), dict):
        return {}, False
    files: dict[str, Any] = data["files"]
    return files, len(data) > 2


def _recorded_facts(path: Path, walk: tuple[bytes, bytes, bytes], count: int) -> tuple[str, str] | None:
    """The id of the record at ``path`` and the facts of the ``count`` files of ``walk`` (its parts: the count, the
    paths and the stamps and modes, packed), when that record is of this walk and well formed (64 lower-case hex
    digits and a flags digit a file, checked for all at once). Compared in place (``startswith`` at an offset): a
    copy of each part costs a fresh process more than the comparison."""
    start = len(_WALK_HEADER) + _ID_LENGTH
    walked = sum(map(len, walk))
    length = b" %d\n" % walked
    size = start + len(length) + walked + count * FACTS
    try:
        with open(path, "rb") as handle:
            data = handle.read(min(size + 1, _MAX_RECORD))
    except OSError:
        return None
    walk_id = data[len(_WALK_HEADER) : start]
    if len(data) != size or not data.startswith(_WALK_HEADER) or walk_id.translate(None, _HEX_BYTES):
        return None
    at = start
    for part in (length, *walk):
        if not data.startswith(part, at):
            return None
        at += len(part)
    facts = data[at:]
    # bytes.translate deletes the allowed characters in one pass of C: str.strip with the same set costs 10x more.
    if facts.translate(None, _HEX_BYTES) or facts[FACTS - 1 :: FACTS].translate(None, _FLAG_BYTES):
        return None
    return walk_id.decode("ascii"), facts.decode("ascii")


def recall(folder: Path, walk_id: str, key: str) -> str | None:
    """The value ``remember`` kept for ``key`` (64 hex digits) computed from the walk of ``folder`` recorded as
    ``walk_id``; None when there is none (or the file is damaged: it is only a cache)."""
    try:
        with open(folder / STATE_DIR / HASHES_NAME, "rb") as handle:
            lines = handle.read(_MAX_HASHES * 200).decode("ascii").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    for line in lines:
        parts = line.split(" ")
        if len(parts) == 3 and parts[:2] == [walk_id, key] and len(parts[2]) == 64 and not parts[2].strip(_HEX_DIGITS):
            return parts[2]
    return None


def remember(folder: Path, walk_id: str, key: str, value: str) -> None:
    """Keep ``value`` (64 hex digits), computed from ``key`` and the files of the walk recorded as ``walk_id`` alone,
    for ``recall``: the lines of other walks are dropped, the newest ``_MAX_HASHES`` kept (never fails)."""
    path = folder / STATE_DIR / HASHES_NAME
    try:
        with open(path, "rb") as handle:
            kept = handle.read(_MAX_HASHES * 200).decode("ascii").splitlines()
    except (OSError, UnicodeDecodeError):
        kept = []
    kept = [line for line in kept if line.startswith(walk_id + " ") and line.split(" ")[1:2] != [key]]
    with contextlib.suppress(OSError):
        write_text_atomic(path, "".join(f"{line}\n" for line in [*kept, f"{walk_id} {key} {value}"][-_MAX_HASHES:]))


def _read_facts(path: str) -> FileFacts:
    import hashlib  # here: a walk the record answers reads no file

    with open(path, "rb") as handle:
        if not path.endswith(".py"):
            return FileFacts(hashlib.file_digest(handle, "sha256").hexdigest(), False)
        data = handle.read()
    return FileFacts(hashlib.sha256(data).hexdigest(), re.search(IMPORTS_PWDEPLOY, data, re.MULTILINE) is not None)
