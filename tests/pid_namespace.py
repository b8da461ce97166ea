"""Processes in real PID namespaces, as a container runtime makes them, for the tests that prove what the kernel does
to a container's processes when the kubelet stops it.

A runtime starts a container either in a PID namespace of its own, whose first process (PID 1, the namespace's init)
is the container's command, or, for a pod with ``shareProcessNamespace: true``, in the pod sandbox's namespace,
whose PID 1 is the pause container (runc joins it with setns(2); kubernetes build/pause/linux/pause.c). ``Launched``
starts a command either way: ``as_init`` makes it PID 1 of a new namespace (unshare(2) with CLONE_NEWPID, then
fork: the first child is the init, pid_namespaces(7)), ``joined`` makes it an ordinary process of the namespace
whose init is ``init_pid`` (setns(2) on /proc/PID/ns/pid, then fork). A small launcher outside the namespace does
this and reports the process's pid as this machine sees it (``pid N``) and, once it ended, its wait status as
Python gives it (``status -15`` for SIGTERM). ``PAUSE`` is pause.c's behaviour in Python: it handles SIGINT and
SIGTERM (exit 0) and SIGCHLD (reap), and does nothing else.

Linux only, and root or user namespaces: ``why_not()`` says why not here.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Sequence

LAUNCHER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
mode = sys.argv[1]
if mode == "init":
    argv = sys.argv[2:]
    if libc.unshare(0x20000000 | 0x00020000):  # CLONE_NEWPID | CLONE_NEWNS
        print("error unshare", os.strerror(ctypes.get_errno()), flush=True)
        os._exit(2)
else:
    fd = os.open(f"/proc/{int(sys.argv[2])}/ns/pid", os.O_RDONLY)
    argv = sys.argv[3:]
    if libc.setns(fd, 0x20000000):  # CLONE_NEWPID: the children this process forks join the namespace
        print("error setns", os.strerror(ctypes.get_errno()), flush=True)
        os._exit(2)
pid = os.fork()
if pid == 0:
    if mode == "init":  # the namespace's own /proc, as a runtime mounts one (without it, the machine's)
        libc.mount(b"none", b"/", None, 0x4000 | 0x40000, None)  # MS_REC | MS_PRIVATE
        libc.mount(b"proc", b"/proc", b"proc", 0, None)
    os.execvp(argv[0], argv)
print(f"pid {pid}", flush=True)
print(f"status {os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])}", flush=True)
"""

PAUSE = r"""
import os, signal, sys
def down(signum, frame):
    os._exit(0)
def reap(signum, frame):
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
signal.signal(signal.SIGINT, down)
signal.signal(signal.SIGTERM, down)
signal.signal(signal.SIGCHLD, reap)
print("paused", flush=True)
while True:
    signal.pause()
"""


class Launched:
    """A command started in a PID namespace: ``pid`` as this machine sees it, ``status()`` once it ended."""

    def __init__(self, launcher_argv: Sequence[str], *, stdin: bool = False) -> None:
        self.launcher = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", LAUNCHER, *launcher_argv],
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.launcher.stdout is not None
        first = self.launcher.stdout.readline().split()
        if first[:1] != ["pid"]:
            self.launcher.kill()
            raise RuntimeError(f"the launcher said {first} ({self.launcher.communicate()[1][-500:]})")
        self.pid = int(first[1])
        self._ended: str | None = None  # the launcher's last line, once read

    @classmethod
    def as_init(cls, argv: Sequence[str], *, stdin: bool = False) -> Launched:
        """``argv`` as PID 1 of a new PID namespace: a container of its own."""
        return cls(["init", *argv], stdin=stdin)

    @classmethod
    def joined(cls, init_pid: int, argv: Sequence[str], *, stdin: bool = False) -> Launched:
        """``argv`` in the PID namespace of ``init_pid``: a container of a pod that shares its process namespace."""
        return cls(["join", str(init_pid), *argv], stdin=stdin)

    def line(self) -> str:
        """The next line the command wrote to its stdout, "" once it ended (its stdout is the launcher's: the
        command's lines come between ``pid N`` and ``status S``)."""
        assert self.launcher.stdout is not None
        if self._ended is not None:
            return ""
        line = self.launcher.stdout.readline().strip()
        if line.startswith("status ") or not line:
            self._ended = line
            return ""
        return line

    def send(self, text: str) -> None:
        """Write ``text`` to the command's stdin (nothing once it ended)."""
        assert self.launcher.stdin is not None
        try:
            self.launcher.stdin.write(text)
            self.launcher.stdin.flush()
        except BrokenPipeError:
            pass

    def status(self, timeout: float = 30) -> int:
        """The command's wait status as Python gives it (-N: killed by signal N), once it ended."""
        out, err = self.launcher.communicate(timeout=timeout)
        said = [line for line in [self._ended or "", *out.splitlines()] if line.startswith("status ")]
        assert said, f"no status from the launcher: {out[-500:]} {err[-500:]}"
        return int(said[-1].split()[1])

    def stop(self) -> None:
        """Kill what is left (the command, the launcher) and close the pipes, for a test's clean-up."""
        if self.launcher.poll() is None:  # once it reaped the command, nothing is left and the pid may be reused
            for pid in (self.pid, self.launcher.pid):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        self.launcher.communicate()


def why_not() -> str | None:
    """None when a process can be PID 1 of a new PID namespace here, else why not."""
    if not sys.platform.startswith("linux"):
        return "PID namespaces are Linux only"
    probe = subprocess.run(
        [sys.executable, "-I", "-S", "-c", LAUNCHER, "init", "true"], capture_output=True, text=True, timeout=30
    )
    if "status 0" in probe.stdout:
        return None
    return (probe.stdout + probe.stderr).strip()[-200:] or f"the launcher exited {probe.returncode}"
