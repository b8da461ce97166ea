"""The job's process tree, owned by `local run`: found, signalled, given a grace period, killed and reaped.

The job's main process starts in a session of its own (its pid is the session and process-group id), so that a
fault that kills "the job's process group" (``runtime.step_done``) kills the job and not pwdeploy, and so that
a terminal's Ctrl-C reaches pwdeploy alone, which passes it to the job's main process only (its data workers get
no SIGINT, so they print no KeyboardInterrupt tracebacks).

While the job runs, pwdeploy is a child subreaper (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``): a process whose
parent died (a worker of a killed program, a daemon that forked twice) is re-parented to pwdeploy instead of
PID 1, so it is still found here, ended and reaped. The tree is: pwdeploy's descendants that did not exist
before the job started, plus every process in the job's session (in case a platform has no subreaper).
The tree is found from /proc (the kernel's lists of each thread's children, each process's stat and session);
psutil, imported here and in ``pwdeploy.local.limits`` only, acts on what is found (it checks that a pid still
names the same process before signalling it) and stands in for /proc where there is none. This module is
imported only by ``local run``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
PR_GET_CHILD_SUBREAPER = 37
# Seconds the processes still running when the main process ended get to end on their own before they count as
# left running (the same in pwdeploy.local.unshare's init, where the job has a PID namespace of its own).
SETTLE_SECONDS = 0.5
LEFTOVER_GRACE_SECONDS = 2.0  # after the main process ended: for a resource tracker to unlink what it tracks
_ROUNDS = 20  # a tree that keeps forking while it is killed is looked at again, this many times at most
_PROC = sys.platform.startswith("linux") and os.path.isdir("/proc/self/task")  # else psutil reads what /proc says


def wait_for_exit(child: subprocess.Popen[bytes], timeout: float) -> int | None:
    """``child``'s return code once it has exited, or None if ``timeout`` seconds pass first.

    The kernel makes a pidfd readable the moment its process exits (Linux 5.3+). ``Popen.wait(timeout=...)``
    instead polls, sleeping 0.5 ms, 1 ms, ... up to 50 ms between looks: every local run ended up to 50 ms after
    its job, and the namespace probe before it up to 30 ms after the probe. Where there is no pidfd, that wait.
    """
    if child.returncode is not None:  # reaped already: its pid may be another process's by now
        return child.returncode
    try:
        fd = os.pidfd_open(child.pid)
    except (AttributeError, OSError):  # no pidfd here, or the process is reaped already
        try:
            return child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
    try:
        select.select([fd], [], [], timeout)  # a signal handler that returns does not end it early (PEP 475)
    finally:
        os.close(fd)
    return child.poll()


@contextlib.contextmanager
def subreaper() -> Iterator[bool]:
    """Make this process a child subreaper while the block runs (Linux); yields whether it is one."""
    if not sys.platform.startswith("linux"):
        yield False
        return
    libc = ctypes.CDLL(None, use_errno=True)
    previous = ctypes.c_int(0)
    libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(previous), 0, 0, 0)
    done = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    try:
        yield done
    finally:
        if done and not previous.value:
            libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


class JobTree:
    """Every process of one run of the job, but its main process (``leader``), which the caller waits for."""

    def __init__(self) -> None:
        # pwdeploy's own descendants before the job existed (the watchdog), by pid and start time: read from /proc
        # where it can be, so that psutil (15 ms to import) is not imported before the job starts
        self._before = {pid: _started(pid) for pid in _descendants(os.getpid())}
        self.leader: int | None = None
        self._reaped = False  # once the main process is reaped, its pid (the group id) may name another process

    def started(self, leader: int) -> None:
        self.leader = leader

    def leader_reaped(self) -> None:
        self._reaped = True

    def processes(self) -> list[psutil.Process]:
        """The tree's live processes now (zombies excluded), without the main process."""
        pids = sorted(pid for pid in self._pids() if not _zombie(pid))
        if not pids:
            return []  # the usual end: nothing left, and psutil not needed for it
        import psutil

        found = []
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                process = psutil.Process(pid)
                if _alive(process):
                    found.append(process)
        return found

    def _pids(self) -> set[int]:
        """The tree's processes now, zombies included, without the main process: pwdeploy's descendants that were
        not there before the job, and the processes of the job's session."""
        pids = {pid for pid in _descendants(os.getpid()) if not self._mine(pid)}
        if self.leader is not None:
            pids.update(_in_session(self.leader))
            pids.discard(self.leader)
        return pids

    def _mine(self, pid: int) -> bool:
        """Whether ``pid`` is one of pwdeploy's own processes, there before the job (the same pid, started at the
        same time: a pid alone may be reused)."""
        return pid in self._before and self._before[pid] == _started(pid)

    def kill(self) -> None:
        """SIGKILL the main process, its process group and every other process of the tree, at once."""
        if self.leader is not None and not self._reaped:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.leader, signal.SIGKILL)
        _signal(self.processes(), kill=True)

    def end(self, grace: float = LEFTOVER_GRACE_SECONDS) -> int:
        """SIGTERM what is left of the tree, wait up to ``grace`` seconds, SIGKILL the rest; reap them all.

        Call once the main process has ended. Returns how many processes were left running when it ended.
        """
        left = self.processes()
        if left:  # about to end on their own (multiprocessing's resource tracker): not left running
            _wait(left, min(grace, SETTLE_SECONDS))
            left = self.processes()
        seen = {_key(p) for p in left}
        _signal(left, kill=False)
        _wait(left, grace)
        for _ in range(_ROUNDS):
            alive = self.processes()
            if not alive:
                break
            seen |= {_key(p) for p in alive}
            _signal(alive, kill=True)
            _wait(alive, 1.0)
        self.reap()
        return len(seen)

    def reap(self, timeout: float = 1.0) -> None:
        """Collect the exit status of the tree's processes re-parented to pwdeploy once they ended: no zombie is
        left behind (a zombie whose parent is dying is re-parented a moment later, so look again a while)."""
        deadline = time.monotonic() + timeout
        while self._reap_once() and time.monotonic() < deadline:
            time.sleep(0.01)

    def _reap_once(self) -> bool:
        """Reap the zombies among pwdeploy's new children; whether the tree still has a zombie somewhere."""
        for pid in _descendants(os.getpid()):
            if pid != self.leader and not self._mine(pid):
                with contextlib.suppress(ChildProcessError):  # a grandchild: not pwdeploy's to reap
                    os.waitpid(pid, os.WNOHANG)  # a child still running is left as it is
        return any(_zombie(pid) for pid in self._pids())


def _descendants(pid: int) -> list[int]:
    """``pid``'s descendants now: from the kernel's list of each thread's children (Linux's
    /proc/PID/task/TID/children, a few small reads) where it keeps one, else psutil's scan of every process."""
    if not os.path.exists(f"/proc/{pid}/task/{pid}/children"):  # not Linux, or no CONFIG_PROC_CHILDREN
        return _descendants_psutil(pid)
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        with contextlib.suppress(OSError):  # a process or thread that ended meanwhile has no children
            for task in os.listdir(f"/proc/{parent}/task"):
                with contextlib.suppress(OSError, ValueError), open(f"/proc/{parent}/task/{task}/children", "rb") as f:
                    children = [int(word) for word in f.read().split()]
                    found += children
                    todo += children
    return found


def _descendants_psutil(pid: int) -> list[int]:
    import psutil

    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def _stat(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command's name (the state first); None for a process that is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _started(pid: int) -> float | None:
    """When ``pid`` started: clock ticks since boot (field 22 of /proc/PID/stat) on Linux, psutil's start time
    elsewhere; None for a process that is gone."""
    if _PROC:
        fields = _stat(pid)
        return int(fields[19]) if fields is not None and len(fields) > 19 and fields[19].isdigit() else None
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has ended and waits to be reaped (/proc/PID/stat's state; psutil's where there is none)."""
    if _PROC:
        fields = _stat(pid)
        return fields is not None and fields[0] == b"Z"
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _key(process: psutil.Process) -> tuple[int, float]:
    """A process's identity: its pid and start time (a pid alone may be reused)."""
    import psutil

    try:
        return process.pid, process.create_time()
    except psutil.Error:
        return process.pid, 0.0


def _alive(process: psutil.Process) -> bool:
    import psutil

    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _in_session(session: int) -> list[int]:
    """The processes whose session id is ``session`` (the job's main process started one)."""
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:  # no /proc
        import psutil

        pids = psutil.pids()
    found = []
    for pid in pids:
        with contextlib.suppress(OSError):
            if os.getsid(pid) == session:
                found.append(pid)
    return found


def _signal(processes: list[psutil.Process], *, kill: bool) -> None:
    """SIGKILL (``kill``) or SIGTERM each of ``processes``; psutil checks that each pid still names the same
    process."""
    if not processes:
        return
    import psutil

    for process in processes:
        with contextlib.suppress(psutil.Error):
            if kill:
                process.kill()
            else:
                process.terminate()


def _wait(processes: list[psutil.Process], timeout: float) -> None:
    """Wait until none of ``processes`` runs (zombies count as ended), at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in processes) and time.monotonic() < deadline:
        time.sleep(0.02)
