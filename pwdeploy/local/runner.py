"""Run the job's command once, as the main process of a process tree that `local run` owns, and say how it ended.

The main process starts in a session of its own (see ``pwdeploy.local.tree``). SIGINT (a terminal's Ctrl-C),
SIGTERM and SIGHUP sent to pwdeploy are passed to the job's main process alone, as Kubernetes sends SIGTERM to a
container's main process; it gets ``stop_grace`` seconds to end, then the whole tree is killed (at once on a
second signal). Whatever ended the main process, what is left of its tree is sent SIGTERM, given a short grace,
then SIGKILL, and reaped; the shared-memory files the run left in /dev/shm are removed.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from pwdeploy.errors import LocalRunError
from pwdeploy.local import shm
from pwdeploy.local.eviction import Evicted, Eviction, begin
from pwdeploy.local.stop_signals import STOP_GRACE_SECONDS, Stops, say_now, stop_signals
from pwdeploy.local.tree import LEFTOVER_GRACE_SECONDS, JobTree, subreaper, wait_for_exit
from pwdeploy.local.unshare import Private, Reports
from pwdeploy.local.watchdog import watchdog

Spawn = Callable[..., "subprocess.Popen[bytes]"]


@dataclass(frozen=True)
class Running:
    """What a sampler watches while an attempt runs."""

    pid: int  # the job's main process; with ``init``, the init of the job's PID namespace (not the job's)
    shm: Path  # the /dev/shm the job writes to, as pwdeploy reaches it
    init: bool = False


Watch = Callable[[Running], AbstractContextManager[object]]  # entered once the job started, held while it runs
TICK_SECONDS = 0.05
_HINT = "check main.command in the config, or the command after --"
# execve's E2BIG: the command's words and the environment together are more than the kernel copies into a new
# program (ARG_MAX: a quarter of the stack limit, `ulimit -s`; execve(2)). Each one alone is checked with the config.
_TOO_BIG = os.strerror(errno.E2BIG)
_TOO_BIG_HINT = (
    "the command line and the environment (main.env, and what pwdeploy and this shell set) together are more than "
    "the kernel passes to a program (ARG_MAX, a quarter of `ulimit -s`); the container has such a limit too: pass "
    "large values in a file"
)


def _start_hint(error: str) -> str:
    return _TOO_BIG_HINT if _TOO_BIG in error else _HINT


def exit_status(returncode: int) -> int:
    """A shell-style status: a child killed by signal N gives 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass(frozen=True)
class Ended:
    """How one run of the job ended."""

    returncode: int  # the main process's, as subprocess gives it: -N when signal N killed it
    stopped_by: int | None = None  # the signal pwdeploy received that stopped the run (SIGINT, SIGTERM, SIGHUP)
    killed_after: float | None = None  # the --kill-after seconds, when that killed the tree
    leftovers: int = 0  # processes of the tree still running once the main process had ended
    shm_removed: tuple[str, ...] = ()  # files the run left in /dev/shm, removed
    shm_left_alone: int = 0  # new files in /dev/shm nobody holds, not known to be the job's: left alone
    private_shm: bool = False  # the job had a /dev/shm of its own, gone with it
    evicted: Evicted | None = None  # a --evict-* fault stopped it from outside
    next_run: str | None = None  # how the run after this one started: "restart", "requeue" or "replace"

    @property
    def status(self) -> int:
        """The exit status: the main process's, or 128 + N when pwdeploy was stopped by signal N."""
        return 128 + self.stopped_by if self.stopped_by else exit_status(self.returncode)

    @property
    def failed(self) -> bool:
        """The job died (a non-zero exit, a signal) rather than succeeded or was stopped on request."""
        return self.stopped_by is None and self.returncode != 0

    def cause(self) -> str:
        if self.evicted is not None and self.evicted.killed:
            return f"killed with SIGKILL at the end of the grace period (exit status {self.status})"
        if self.killed_after is not None:
            return f"killed with SIGKILL by --kill-after {self.killed_after:g} (exit status {self.status})"
        if self.returncode < 0:
            return f"killed by {signal.Signals(-self.returncode).name} (exit status {self.status})"
        return f"exited with status {self.returncode}"


def check_startable(command: Sequence[str], *, cwd: Path, env: Mapping[str, str]) -> None:
    """LocalRunError unless ``command`` can start in ``cwd``: checked before a run creates any directory."""
    if not cwd.is_dir():
        raise LocalRunError(f"cannot start the job: working directory {cwd} does not exist")
    program = command[0]
    if os.sep not in program:
        if shutil.which(program, path=env.get("PATH", os.defpath)) is None:
            raise LocalRunError(
                f"cannot start the job: {program!r} not found on PATH (working directory {cwd})", hint=_HINT
            )
        return
    path = cwd / program  # a path with a separator is relative to the working directory, as exec sees it
    if not path.exists():
        raise LocalRunError(f"cannot start the job: {program!r} not found (working directory {cwd})", hint=_HINT)
    if path.is_dir() or not os.access(path, os.X_OK):
        raise LocalRunError(f"cannot start the job: {program!r} is not executable", hint=_HINT)


def run_child(
    command: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    spawn: Spawn = subprocess.Popen,
    watch: Watch | None = None,
    stops: Stops | None = None,
    kill_after: float | None = None,
    stop_grace: float = STOP_GRACE_SECONDS,
    leftover_grace: float = LEFTOVER_GRACE_SECONDS,
    shm_dir: Path = shm.SHM,
    private: Private | None = None,
    eviction: Eviction | None = None,
) -> Ended:
    """Run ``command`` in ``cwd`` with ``env`` (the whole environment) until its whole process tree has ended.

    ``watch(pid)`` is entered once the main process has started and left once it has ended (e.g. a resource
    sampler). ``stops``: the stop signals' state when the caller runs several attempts (else installed here).
    ``kill_after``: SIGKILL the whole tree after that many seconds. ``private``: run it in namespaces of its own
    with a private /dev/shm (``pwdeploy.local.unshare``); the machine's ``shm_dir`` is then not looked at.
    ``eviction``: stop the job from outside when it is due, as the kubelet does (``pwdeploy.local.eviction``).
    """
    check_startable(command, cwd=cwd, env=env)
    if stops is None:
        with stop_signals(stop_grace) as own:
            return run_child(command, cwd=cwd, env=env, spawn=spawn, watch=watch, stops=own,
                             kill_after=kill_after, stop_grace=stop_grace, leftover_grace=leftover_grace,
                             shm_dir=shm_dir, private=private, eviction=eviction)  # fmt: skip
    how = _How(spawn, watch, stops, kill_after, stop_grace, leftover_grace, eviction)
    if private is not None:
        return _run_private(command, cwd, env, how, private)
    return _run_here(command, cwd, env, how, shm_dir)


class _How(NamedTuple):
    """How ``run_child`` runs the job (its arguments, but where it runs)."""

    spawn: Spawn
    watch: Watch | None
    stops: Stops
    kill_after: float | None
    stop_grace: float
    leftover_grace: float
    eviction: Eviction | None


def _run_here(command: Sequence[str], cwd: Path, env: Mapping[str, str], how: _How, shm_dir: Path) -> Ended:
    """``run_child`` among the machine's processes: its session ended at the end, and what it left in the
    machine's /dev/shm removed (the files its processes were seen holding)."""
    before = shm.snapshot(shm_dir)
    seen: set[int] | None = None  # inodes of /dev/shm files the job's processes were seen holding
    ok = False
    try:
        with subreaper(), watchdog() as guard:  # the watchdog first: JobTree counts it as pwdeploy's own
            tree = JobTree()
            child = _spawn(how.spawn, list(command), command, cwd=cwd, env=env)
            tree.started(child.pid)
            guard(child.pid, before.values())  # its session: ended even if pwdeploy is killed with SIGKILL
            how.stops.started(child)
            with shm.observed(lambda: _pids(child, tree), shm_dir) as seen:
                try:
                    with how.watch(Running(child.pid, shm_dir)) if how.watch is not None else nullcontext():
                        waited = _Waited(how.eviction, child.pid, emulate_pid_1=True)
                        returncode, killed_after = _wait(child, tree, how, waited)
                finally:  # also when pwdeploy fails meanwhile: the job never outlives it
                    leftovers = _end(child, tree, how.stops, seen, how.leftover_grace, shm_dir)
        ok = True
    finally:
        if not ok and seen is not None:  # pwdeploy failed meanwhile: what the job left in /dev/shm goes all the same
            shm.remove_left_behind(before, seen, shm_dir)
    cleanup = shm.remove_left_behind(before, seen, shm_dir)
    stopped_by = how.stops.received[0] if how.stops.received else None
    return Ended(returncode, stopped_by, killed_after, leftovers, cleanup.removed, cleanup.left_alone,
                 evicted=waited.evicted)  # fmt: skip


def _run_private(command: Sequence[str], cwd: Path, env: Mapping[str, str], how: _How, private: Private) -> Ended:
    """``run_child`` in namespaces of the job's own: its init ends what the job left when the main process ended,
    and the kernel kills the rest with init; the private /dev/shm goes with them."""
    read, write = os.pipe()
    reports = Reports(read)
    pinned = -1  # the private /dev/shm, held open so that it can be measured once the job has ended
    try:
        with subreaper(), watchdog() as guard:
            tree = JobTree()
            try:
                argv = private.argv(command, grace=how.leftover_grace, fd=write)
                child = _spawn(how.spawn, argv, command, cwd=cwd, env=env, pass_fds=(write,))
            finally:
                os.close(write)
            tree.started(child.pid)
            guard(child.pid, ())
            how.stops.started(child)
            try:
                reports.first()
                pinned, running, waited = _private_running(child.pid, reports, private, how.eviction)
                with how.watch(running) if how.watch is not None and pinned >= 0 else nullcontext():
                    returncode, killed_after = _wait(child, tree, how, waited)
            finally:
                _end_private(child, tree, how)
        reports.rest()
    finally:
        os.close(read)
        if pinned >= 0:
            os.close(pinned)
    if reports.error is not None and reports.main is None:
        raise LocalRunError(f"cannot start the job: {reports.error}", hint=_start_hint(reports.error))
    if reports.main is not None and returncode == 0:  # the launcher exits 0 when init did (else as init died)
        returncode = reports.main
    stopped_by = how.stops.received[0] if how.stops.received else None
    return Ended(returncode, stopped_by, killed_after, reports.leftovers, private_shm=True, evicted=waited.evicted)


def _end_private(child: subprocess.Popen[bytes], tree: JobTree, how: _How) -> None:
    """The namespace's processes died with its init: only a straggler's reaping (and the launcher, if pwdeploy
    failed meanwhile: the job never outlives it)."""
    if child.poll() is None:
        tree.kill()
        child.wait()
    tree.leader_reaped()
    how.stops.ended()
    tree.end(how.leftover_grace)


def _pids(child: subprocess.Popen[bytes], tree: JobTree) -> list[int]:
    """The job's processes now: the main one while it runs (its pid is not reused before it is reaped)."""
    main = [child.pid] if child.returncode is None else []
    return main + [p.pid for p in tree.processes()]


def _spawn(
    spawn: Spawn, argv: list[str], command: Sequence[str], *, cwd: Path, env: Mapping[str, str], **more: Any
) -> subprocess.Popen[bytes]:
    """The job's process in a session of its own; exec failing though the checks passed (a bad interpreter line,
    a race) is a LocalRunError naming the command."""
    try:
        return spawn(argv, cwd=cwd, env=dict(env), start_new_session=True, **more)
    except OSError as exc:
        raise LocalRunError(
            f"cannot start the job: {command[0]!r}: {exc.strerror}", hint=_start_hint(exc.strerror or "")
        ) from None


def _private_running(
    child: int, reports: Reports, private: Private, eviction: Eviction | None
) -> tuple[int, Running, _Waited]:
    """(the private /dev/shm held open, -1 when it could not be; what the sampler watches; what the wait acts on)
    of a job in namespaces of its own."""
    pinned = -1
    if reports.init is not None:
        with suppress(OSError):
            pinned = os.open(f"/proc/{child}/root/dev/shm", os.O_RDONLY | os.O_DIRECTORY)
    # As PID 1 the main process is the namespace's init: the sampler counts it with its tree.
    running = Running(reports.init or child, Path(f"/proc/self/fd/{pinned}"), init=not private.pid1)
    main_pid = reports.init if private.pid1 else None
    return pinned, running, _Waited(eviction, main_pid, emulate_pid_1=False)


def _end(
    child: subprocess.Popen[bytes], tree: JobTree, stops: Stops, seen: set[int], grace: float, shm_dir: Path
) -> int:
    """End what is left of the tree once the main process has ended (killed first, if it still runs); the
    /dev/shm files the processes left running hold join ``seen``. Returns how many processes were left."""
    if child.poll() is None:  # pwdeploy failed meanwhile: look before the kill, the dead hold nothing
        seen.update(shm.held_by(_pids(child, tree), shm_dir))
        tree.kill()
        child.wait()
    tree.leader_reaped()
    stops.ended()
    seen.update(shm.held_by(_pids(child, tree), shm_dir))
    return tree.end(grace)


@dataclass
class _Waited:
    """The eviction of one attempt, if one was asked for: what it needs to begin, and how it went."""

    eviction: Eviction | None
    main_pid: int | None  # the job's main process as this machine sees it (None: not known)
    emulate_pid_1: bool  # no PID namespace of the job's own: the kernel's rule for a PID 1 is played here
    evicted: Evicted | None = None

    def step(self, child: subprocess.Popen[bytes], elapsed: float, now: float) -> bool:
        """Begin the eviction once it is due; True once its grace period is over (the tree is to be killed)."""
        if self.eviction is None:
            return False
        if self.evicted is None:
            if not self.eviction.due(elapsed):
                return False
            self.evicted = begin(self.eviction, child, self.main_pid, now, say_now, emulate_pid_1=self.emulate_pid_1)
        if now - self.evicted.at >= self.eviction.grace:
            self.evicted.killed = True
            return True
        return False


def _wait(child: subprocess.Popen[bytes], tree: JobTree, how: _How, waited: _Waited) -> tuple[int, float | None]:
    """Wait for the main process; kill the tree after ``how.kill_after`` s, when a stop is not heeded in time, or
    when an eviction's grace period is over."""
    started = time.monotonic()
    killed_after: float | None = None
    killed = False
    while True:
        returncode = wait_for_exit(child, TICK_SECONDS)
        if returncode is not None:
            return returncode, killed_after
        if killed:
            continue
        now = time.monotonic()
        if how.kill_after is not None and now - started >= how.kill_after:
            killed_after = how.kill_after
        if waited.step(child, now - started, now) or killed_after is not None or how.stops.overdue(how.stop_grace):
            tree.kill()
            killed = True
