"""A private /dev/shm for each attempt of a local run: the job runs in mount and PID namespaces of its own.

On the cluster the job's container has a memory-backed ``emptyDir`` of ``main.shm_size`` at /dev/shm, and its own
PID namespace. Here a small launcher (``python -I -S``, a few ms) started by pwdeploy calls ``unshare(2)`` with
``CLONE_NEWNS | CLONE_NEWPID`` (and ``CLONE_NEWUSER``, mapping the user to itself, when it is not root: tmpfs may
be mounted by the owner of a user namespace), makes every mount private (nothing it mounts reaches the machine),
binds the MTC stand-in's tmpfs where the job looks for it (``pwdeploy.local.mtc_stand_in``; a job with mtc.enabled),
mounts a tmpfs of ``main.shm_size`` bytes at /dev/shm, and forks the namespace's init, which mounts a /proc of the
namespace and forks the job's main process (in a session of its own, as today). So:

- a job writing more than ``main.shm_size`` to /dev/shm fails here where the pod would (ENOSPC on write, SIGBUS
  on touching a mapped page past the end), and ``os.statvfs('/dev/shm')`` in the job gives the pod's size;
- nothing the job writes to /dev/shm reaches the machine's; the tmpfs goes when the attempt ends;
- nothing the job starts outlives its init: when init exits, or is killed (``kill -9`` of pwdeploy kills the
  launcher and init through ``PR_SET_PDEATHSIG``), the kernel SIGKILLs every process of the namespace, those that
  called ``setsid()`` or double-forked included.

How the main process stands in its namespace is the rendered head pod's: with ``shareProcessNamespace: true``
(what pwdeploy renders) the pod's pause container is PID 1 and main an ordinary process, which init here stands
for; without it, main is PID 1 of its container, and so it is here (mode ``pid1``): the kernel then drops a signal
from outside the namespace that main has no handler for (pid_namespaces(7)), and when main ends the kernel kills
every other process of the namespace at once, as in a container of its own.

Init passes SIGINT, SIGTERM and SIGHUP on to the main process (the launcher passes them to init); when the main
process has ended, init writes its status to a pipe pwdeploy reads, sends SIGTERM to every other process of the
namespace, gives them ``leftover_grace`` seconds, and exits (the kernel kills the rest). Where unshare or the mount
is refused (no root and user namespaces off, a seccomp profile), ``available()`` says why and the run uses the
machine's /dev/shm as before. Linux only. Facts: unshare(2), user_namespaces(7) and pid_namespaces(7) of the
Linux man-pages (man-pages 6.x); tmpfs is mountable in a user namespace (``FS_USERNS_MOUNT``, torvalds/linux
mm/shmem.c); Kubernetes mounts a memory-backed emptyDir with ``sizeLimit`` as a tmpfs of that size
(kubernetes/kubernetes pkg/volume/emptydir/empty_dir.go, SizeMemoryBackedVolumes).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

RAMDISK_SOURCE_ENV = "PWDEPLOY_LOCAL_RAMDISK_SOURCE"  # read (and dropped) by the launcher: SCRIPT
RAMDISK_TARGET_ENV = "PWDEPLOY_LOCAL_RAMDISK_TARGET"
PROBE_SECONDS = 30  # the probe sets up the namespaces and exits: a few ms; a stuck one is given up
# argv: MODE SIZE GRACE FD PARENT [COMMAND...]; MODE "probe" sets up the namespaces and exits 0, "run" runs
# COMMAND as a child of the namespace's init (a pod sharing its process namespace: pause is PID 1), "pid1" runs it
# as the init itself (a container of its own). Every line written to FD is one of: "init PID" (init's pid as
# pwdeploy sees it), "main STATUS" (the main process's status, -N for signal N), "started" (the main process was
# forked), "leftovers N", "error TEXT".
SCRIPT = r"""
import ctypes, os, signal, sys, time
mode, size, grace, fd, parent = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
command = sys.argv[6:]
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
SETTLE = 0.5  # pwdeploy.local.tree.SETTLE_SECONDS: the processes left when main ended get to end on their own

def say(line):
    os.write(fd, (line + "\n").encode())

def fail(what):
    say(f"error {what}: {os.strerror(ctypes.get_errno())}")
    os._exit(127)

def die_with_parent():
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG

die_with_parent()
if os.getppid() != parent:  # pwdeploy died before that took effect
    os._exit(137)
uid, gid = os.getuid(), os.getgid()
if libc.unshare(0x00020000 | 0x20000000 | (0x10000000 if uid else 0)):  # CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUSER
    fail("unshare")
if uid:
    try:
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as out:
                out.write(text)
    except OSError as error:
        say(f"error writing /proc/self/{name}: {error.strerror}")
        os._exit(127)
if libc.mount(b"none", b"/", None, 0x4000 | 0x40000, None):  # MS_REC | MS_PRIVATE: nothing reaches the machine
    fail("making the mounts private")
# The MTC stand-in's tmpfs (a folder of the machine's /dev/shm, kept across attempts) where the job looks for it;
# bound before /dev/shm is covered. The variables are the launcher's own: the job does not get them.
ramdisk = os.environ.pop("PWDEPLOY_LOCAL_RAMDISK_SOURCE", ""), os.environ.pop("PWDEPLOY_LOCAL_RAMDISK_TARGET", "")
if ramdisk[0] and libc.mount(ramdisk[0].encode(), ramdisk[1].encode(), None, 0x1000, None):  # MS_BIND
    fail("binding the MTC stand-in's tmpfs")
if libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", 0x2 | 0x4, f"size={size},mode=1777".encode()):  # nosuid, nodev
    fail("mounting a tmpfs at /dev/shm")
if mode == "probe":
    os._exit(0)

def forward(to):
    def handler(signum, frame):
        try:
            os.kill(to, signum)
        except OSError:
            pass
    for signum in STOPS:
        signal.signal(signum, handler)

def start(command):
    for signum in STOPS:
        signal.signal(signum, signal.SIG_DFL)
    os.setsid()
    os.set_inheritable(fd, False)  # the job does not hold the report pipe
    try:
        os.execvp(command[0], command)
    except OSError as error:
        say(f"error cannot start the job: {command[0]!r}: {error.strerror}")
        os._exit(127)

if mode == "pid1":  # the main process is PID 1: the kernel drops a signal from outside it has no handler for
    init = os.fork()
    if init == 0:
        die_with_parent()
        libc.mount(b"proc", b"/proc", b"proc", 0x2 | 0x4 | 0x8, None)
        say("started")
        start(command)
    say(f"init {init}")
    forward(init)
    main_status = os.waitpid(init, 0)[1]  # the kernel killed the rest of the namespace as init ended
    say(f"main {os.waitstatus_to_exitcode(main_status)}")
    say("leftovers 0")
    os._exit(0)
init = os.fork()
if init:  # the launcher: outside the PID namespace, it waits for init
    say(f"init {init}")
    forward(init)
    status = os.waitpid(init, 0)[1]
    if os.WIFSIGNALED(status):  # init was killed (an OOM kill): so is the launcher, for pwdeploy to see
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(0)
die_with_parent()
libc.mount(b"proc", b"/proc", b"proc", 0x2 | 0x4 | 0x8, None)  # the namespace's own; without it, the machine's
main = os.fork()
if main == 0:
    start(command)
forward(main)
say("started")
while True:
    pid, status = os.waitpid(-1, 0)
    if pid == main:
        break
say(f"main {os.waitstatus_to_exitcode(status)}")
for signum in STOPS:
    signal.signal(signum, signal.SIG_IGN)

def others():
    # The namespace's processes but init, not counting those already ending (zombies, a SIGKILL pending: the
    # job's own fault kills its process group as it ends)
    found = []
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit() and p != "1"]
    except OSError:
        return found
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
            pending = int(fields["SigPnd"], 16) | int(fields["ShdPnd"], 16)
        except (OSError, KeyError, ValueError):
            continue
        if fields["State"].split()[0] not in ("Z", "X") and not pending & (1 << (signal.SIGKILL - 1)):
            found.append(pid)
    return found

def reap():
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return True
        except ChildProcessError:
            return False

# Processes about to end on their own (multiprocessing's resource tracker reads to the end of its pipe, then
# exits) are not the job's leftovers: they get a moment first.
settle = time.monotonic() + min(grace, SETTLE)
while reap() and others() and time.monotonic() < settle:
    time.sleep(0.01)
left = len(others())
say(f"leftovers {left}")
if left:
    try:
        os.kill(-1, signal.SIGTERM)
    except OSError:
        pass
    deadline = time.monotonic() + grace
    while reap() and time.monotonic() < deadline:
        time.sleep(0.02)
os._exit(0)
"""


@dataclass(frozen=True)
class Private:
    """A private /dev/shm of ``size`` bytes for each attempt; ``pid1``: the job's main process is PID 1 of its
    namespace, as in a container of its own (a head pod without ``shareProcessNamespace``), rather than a child of
    an init that stands for the pod's pause container."""

    size: int
    pid1: bool = False

    def argv(self, command: Sequence[str], *, grace: float, fd: int) -> list[str]:
        """The launcher's command line that runs ``command``, writing its report lines to ``fd``."""
        mode = "pid1" if self.pid1 else "run"
        return [sys.executable, "-I", "-S", "-c", SCRIPT, mode, str(self.size), f"{grace:g}", str(fd),
                str(os.getpid()), *command]  # fmt: skip


def available(size: int) -> str | None:
    """None when a private /dev/shm can be set up here, else why not (one short clause)."""
    probe = Probe(size)
    try:
        return probe.answer()
    finally:
        probe.close()


class Probe:
    """The namespace probe, started at once and asked later (``answer``): `local run` starts it before checking
    the job and the program, so its few ms of start-up run beside that work rather than before the job. ``close``
    ends one never asked (pwdeploy failed meanwhile): nothing of it is left running."""

    def __init__(self, size: int) -> None:
        self.size = size  # bytes of the tmpfs it mounts
        self._answer: str | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._read = -1
        if not sys.platform.startswith("linux"):
            self._answer = "private namespaces are Linux only"
            return
        read, write = os.pipe()
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", SCRIPT, "probe", str(size), "0", str(write), str(os.getpid())],
                pass_fds=(write,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except OSError as exc:
            os.close(read)
            self._answer = f"the namespace probe did not run ({exc})"
            return
        finally:
            os.close(write)
        self._read = read

    def answer(self) -> str | None:
        """None when a private /dev/shm can be set up here, else why not (one short clause). Waits for the probe
        (a few ms; given up after ``PROBE_SECONDS``)."""
        probe = self._process
        if probe is None:
            return self._answer
        from pwdeploy.local.tree import wait_for_exit

        try:
            returncode = wait_for_exit(probe, PROBE_SECONDS)
            if returncode is None:
                self._answer = f"the namespace probe did not end within {PROBE_SECONDS:g} s"
                return self._answer
            said = _read_all(self._read)
        except OSError as exc:
            self._answer = f"the namespace probe did not run ({exc})"
            return self._answer
        finally:
            self.close()
        self._answer = _why_not(returncode, said)
        return self._answer

    def close(self) -> None:
        """Kill the probe if it still runs, reap it, and close its pipe (again: nothing happens)."""
        probe, self._process = self._process, None
        if probe is not None and probe.poll() is None:
            probe.kill()
            probe.wait()
        if self._read >= 0:
            os.close(self._read)
            self._read = -1


def _why_not(returncode: int, said: str) -> str | None:
    """The probe's answer from its exit status and what it wrote."""
    if returncode == 0:
        return None
    for line in said.splitlines():
        if line.startswith("error "):
            return line.removeprefix("error ")[:200]
    return f"the namespace probe exited with status {returncode}"


def _read_all(fd: int, limit: int = 65536) -> str:
    chunks = []
    total = 0
    while total < limit:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


class Reports:
    """The launcher's lines, read from its pipe as they come (pwdeploy holds the read end)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = b""
        self.init: int | None = None
        self.started = False  # init forked the main process
        self.main: int | None = None
        self.leftovers = 0
        self.error: str | None = None

    def first(self) -> None:
        """Block until the launcher named init and init said it started the main process, or an error came, or the
        launcher ended (bounded by the launcher and init: they write these lines before anything of the job runs,
        or exit). Two processes write these lines: init's "started" can come before the launcher's "init PID"."""
        while (not self.started or self.init is None) and self.error is None and self._read():
            pass

    def rest(self) -> None:
        """Read the remaining lines, up to end-of-file (call once the launcher has exited)."""
        while self._read():
            pass

    def _read(self) -> bool:
        chunk = os.read(self.fd, 4096)
        if not chunk:
            return False
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for raw in lines:
            word, _, value = raw.decode("utf-8", "replace").partition(" ")
            if word == "init" and value.isdigit():
                self.init = int(value)
            elif word == "started":
                self.started = True
            elif word == "main" and value.lstrip("-").isdigit():
                self.main = int(value)
            elif word == "leftovers" and value.isdigit():
                self.leftovers = int(value)
            elif word == "error":
                self.error = value[:500]
        return True
