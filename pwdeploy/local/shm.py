"""Shared-memory files a run of the job created and left in /dev/shm, found and removed after the run.

/dev/shm is memory: a file left there (a Grain batch block of a killed worker, a ``multiprocessing``
SharedMemory whose resource tracker was killed too) holds that memory until someone unlinks it. Which process
created a file is not recorded by the kernel, so a file counts as the job's when it appeared in /dev/shm while
the job ran (not there, or another file under that name, before), belongs to this user, and no process has it
open or mapped once the job's processes are gone; it is looked at twice, a moment apart, so that a block another
program is just handing from one process to the next (created, closed, not yet opened) is left alone.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from pathlib import Path

SHM = Path("/dev/shm")
SETTLE_SECONDS = 0.2


def snapshot(shm: Path = SHM) -> dict[str, int]:
    """The regular files in ``shm`` now: name -> inode."""
    found = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir(shm):
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False):
                    found[entry.name] = entry.inode()
    return found


def remove_left_behind(before: dict[str, int], shm: Path = SHM, *, settle: float = SETTLE_SECONDS) -> list[str]:
    """Unlink the files the job left in ``shm`` (see the module's docstring); their names, sorted."""
    candidates = _unused(_new_files(before, shm), shm)
    if not candidates:
        return []
    time.sleep(settle)
    candidates = _unused(_new_files(before, shm), shm) & candidates
    removed = []
    for name, inode in sorted(candidates):
        path = shm / name
        with contextlib.suppress(OSError):
            if os.lstat(path).st_ino == inode:
                path.unlink()
                removed.append(name)
    return removed


def _new_files(before: dict[str, int], shm: Path) -> set[tuple[str, int]]:
    """(name, inode) of this user's regular files in ``shm`` that were not in ``before``."""
    uid = os.getuid()
    new = set()
    for name, inode in snapshot(shm).items():
        if before.get(name) == inode:
            continue
        with contextlib.suppress(OSError):
            info = os.lstat(shm / name)
            if stat.S_ISREG(info.st_mode) and info.st_uid == uid:
                new.add((name, inode))
    return new


def _unused(files: set[tuple[str, int]], shm: Path) -> set[tuple[str, int]]:
    """The ``files`` that no process (that this user may inspect) has open or mapped."""
    if not files:
        return files
    in_use = _inodes_in_use(shm)
    return {(name, inode) for name, inode in files if inode not in in_use}


def _inodes_in_use(shm: Path) -> set[int]:
    """Inodes under ``shm`` that a process has open (/proc/PID/fd) or mapped (/proc/PID/maps)."""
    prefix = f"{shm}/"
    inodes: set[int] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd).startswith(prefix):
                        inodes.add(os.stat(fd).st_ino)
        with contextlib.suppress(OSError, UnicodeDecodeError):
            for line in (proc / "maps").read_text(encoding="utf-8", errors="replace").splitlines():
                fields = line.split(maxsplit=5)  # address perms offset dev inode path
                if len(fields) == 6 and fields[5].startswith(prefix):
                    inodes.add(int(fields[4]))
    return inodes
