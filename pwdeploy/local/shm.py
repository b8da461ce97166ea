"""Shared-memory files a run of the job created and left in /dev/shm, found and removed after the run.

/dev/shm is memory: a file left there (a Grain batch block of a killed worker, a ``multiprocessing`` named
semaphore whose resource tracker was killed too) holds that memory until someone unlinks it. The kernel does not
record which process created a file, and removing another program's file would break that program (a Grain
block waits in a queue, open in no process, until its consumer takes it; a second local run may be doing just
that). So, once the job's processes are gone, a *candidate* is a file of this user that appeared in /dev/shm
during the run (absent, or another file under that name, before) and that no process has open or mapped, looked
at twice ``SETTLE_SECONDS`` apart. A candidate is removed when it is known to be the job's: a process of the job
was seen holding it while it ran (``observed``, five times a second, and once more before what is left of the
tree is ended). The other candidates (a block a killed worker had just written, held by no one) are removed too
when no process holds anything in /dev/shm at either look and every process's files could be looked at (so no
other program can be handing one over: Python's multiprocessing keeps its semaphores mapped there); otherwise
they are left alone and counted.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

SHM = Path("/dev/shm")
SETTLE_SECONDS = 0.2
OBSERVE_SECONDS = 0.2  # reading a JAX process's /proc/PID/maps costs ~0.7 ms


@dataclass(frozen=True)
class Cleanup:
    removed: tuple[str, ...] = ()  # the files the run left in /dev/shm, removed
    left_alone: int = 0  # new files nobody holds, not seen in the job's hands, while others use /dev/shm


def snapshot(shm: Path = SHM) -> dict[str, int]:
    """The regular files in ``shm`` now: name -> inode."""
    found = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir(shm):
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False):
                    found[entry.name] = entry.inode()
    return found


def held_by(pids: Iterable[int], shm: Path = SHM) -> set[int]:
    """Inodes of files under ``shm`` that the processes ``pids`` have open (/proc/PID/fd) or mapped (maps)."""
    prefix = f"{shm}/"
    inodes: set[int] = set()
    for pid in pids:
        proc = Path(f"/proc/{pid}")
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


@contextlib.contextmanager
def observed(
    pids: Callable[[], Iterable[int]], shm: Path = SHM, interval: float = OBSERVE_SECONDS
) -> Iterator[set[int]]:
    """Collect, on a daemon thread until the block ends, the inodes of /dev/shm files that ``pids()`` hold."""
    seen: set[int] = set()
    stop = threading.Event()

    def loop() -> None:
        while True:
            seen.update(held_by(pids(), shm))
            if stop.wait(interval):
                return

    thread = threading.Thread(target=loop, name="pwdeploy-shm", daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join()


def remove_left_behind(
    before: dict[str, int], seen: set[int], shm: Path = SHM, *, settle: float = SETTLE_SECONDS
) -> Cleanup:
    """Unlink the files the job left in ``shm`` (see the module's docstring); ``seen``: inodes its processes held."""
    candidates, busy = _unused(_new_files(before, shm), shm)
    if not candidates:
        return Cleanup()
    time.sleep(settle)
    again, busy_again = _unused(_new_files(before, shm), shm)
    candidates &= again
    mine = candidates if not (busy or busy_again) else {(n, i) for n, i in candidates if i in seen}
    removed = []
    for name, inode in sorted(mine):
        path = shm / name
        with contextlib.suppress(OSError):
            if os.lstat(path).st_ino == inode:
                path.unlink()
                removed.append(name)
    return Cleanup(tuple(removed), len(candidates - mine))


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


def _unused(files: set[tuple[str, int]], shm: Path) -> tuple[set[tuple[str, int]], bool]:
    """(the ``files`` no process that this user may inspect has open or mapped; whether any process holds anything
    in ``shm``, unlinked files included)."""
    if not files:
        return files, False
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    in_use = held_by(pids, shm)
    # A process whose files this user may not look at (another user's, a setuid one) could hold anything: then
    # only the files seen in the job's hands are known to be the job's.
    return {(name, inode) for name, inode in files if inode not in in_use}, bool(in_use) or not _all_visible(pids)


def _all_visible(pids: Iterable[int]) -> bool:
    """Whether this user may list the open files of every process (gone ones do not count)."""
    for pid in pids:
        try:
            os.listdir(f"/proc/{pid}/fd")
        except PermissionError:
            return False
        except OSError:  # ended meanwhile
            continue
    return True
