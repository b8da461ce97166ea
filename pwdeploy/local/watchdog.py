"""A watchdog that ends the job when pwdeploy itself ends without being able to (``kill -9``, an OOM kill).

The job runs in a session of its own (``pwdeploy.local.tree``), so nothing the kernel does on pwdeploy's death
reaches it. A parent-death signal (``PR_SET_PDEATHSIG``) would reach the main process only: it is not inherited
across fork, so the job's data workers would stay. Instead a small process started by pwdeploy before the job
holds the read end of a pipe whose only write end pwdeploy holds: the kernel closes it however pwdeploy ends, and
on that end-of-file the watchdog SIGKILLs every process of the job's session (its id is the main process's pid,
written once the job started) and removes the /dev/shm files they held, as `local run` removes them itself when
it ends the job. On a normal end pwdeploy writes ``done`` first, after ending the tree itself, and
the watchdog exits without acting. It runs ``python -I -S`` (no site, no user paths: a few ms to start) in a
session of its own, so a terminal's Ctrl-C does not end it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress

from pwdeploy.local.tree import wait_for_exit

# Reads the session id, then waits for "done" or end-of-file; on end-of-file kills the session, three passes (a
# process forking meanwhile is caught by the next), then removes the /dev/shm files its processes held, and exits.
SCRIPT = r"""
import os, signal, sys
words = sys.stdin.readline().split()
if not words or not all(word.isdigit() for word in words):
    sys.exit(0)
session, before = int(words[0]), {int(word) for word in words[1:]}  # the /dev/shm inodes there before the job
if sys.stdin.readline().strip() == "done":
    sys.exit(0)

def members():
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                with open(f"/proc/{pid}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == session:
                yield int(pid)

def held(pid):
    found = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            found.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        with open(f"/proc/{pid}/maps") as maps:
            found.update(line.split(maxsplit=5)[-1].strip() for line in maps if "/dev/shm/" in line)
    except OSError:
        pass
    return {path.removesuffix(" (deleted)") for path in found if path.startswith("/dev/shm/")}

shm = set()
for _ in range(3):
    for pid in members():
        shm |= held(pid)
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
for path in shm:
    try:
        if os.stat(path).st_ino not in before:  # another program's file the job opened stays
            os.unlink(path)
    except OSError:
        pass
"""


@contextmanager
def watchdog() -> Iterator[Callable[[int, Iterable[int]], None]]:
    """Start the watchdog; yields ``guard(session, before)`` to call once the job's main process has started
    (``before``: the inodes of the /dev/shm files there before the job, never removed). Leaving the block (the
    job's tree already ended) tells it to exit without acting. Linux only: elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        yield lambda session, before: None
        return
    process = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", SCRIPT],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert process.stdin is not None
    pipe = process.stdin

    def guard(session: int, before: Iterable[int]) -> None:
        pipe.write((" ".join(map(str, (session, *before))) + "\n").encode())
        pipe.flush()

    try:
        yield guard
    finally:
        with suppress(OSError):  # BrokenPipeError: it ended already (killed by someone)
            pipe.write(b"done\n")
            pipe.close()
        # told at once when it exits (Popen.wait with a timeout polls with sleeps); never left behind, even on a
        # machine too loaded to start it in time
        if wait_for_exit(process, 5) is None:
            process.kill()
            process.wait()
