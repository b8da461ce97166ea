"""Start the job's command as a child process and pass its exit status through.

Ctrl-C in a terminal reaches the whole foreground process group, so the child gets it directly and stops the
way it chooses; the parent only waits. SIGTERM and SIGHUP sent to pwdeploy alone are forwarded to the child.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from types import FrameType
from typing import Any

from pwdeploy.errors import LocalRunError

Spawn = Callable[..., "subprocess.Popen[bytes]"]
Watch = Callable[[int], AbstractContextManager[object]]  # given the child's pid, held while it runs
FORWARDED = (signal.SIGTERM, signal.SIGHUP)
_HINT = "check main.command in the config, or the command after --"


def exit_status(returncode: int) -> int:
    """A shell-style status: a child killed by signal N gives 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


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
) -> int:
    """Run ``command`` in ``cwd`` with ``env`` (the whole environment); return its exit status.

    ``watch(pid)`` is entered once the child has started and left once it has ended (e.g. a resource sampler).
    """
    check_startable(command, cwd=cwd, env=env)
    with _signals_forwarded() as started:
        try:
            child = spawn(list(command), cwd=cwd, env=dict(env))
        except OSError as exc:  # the checks above passed, yet exec failed (a bad interpreter line, a race)
            raise LocalRunError(f"cannot start the job: {command[0]!r}: {exc.strerror}", hint=_HINT) from None
        started(child)
        with watch(child.pid) if watch is not None else nullcontext():
            return exit_status(child.wait())


@contextmanager
def _signals_forwarded() -> Iterator[Callable[[subprocess.Popen[bytes]], None]]:
    """Installed before the child starts, so that no signal finds pwdeploy without its handlers.

    SIGINT gets a do-nothing handler rather than SIG_IGN: an ignored signal stays ignored in the child, a
    handled one is reset to the default at exec. A SIGTERM/SIGHUP that arrives before the child exists is
    delivered to it once it has started (the yielded callable reports the start).
    """
    children: list[subprocess.Popen[bytes]] = []
    pending: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        if not children:
            pending.append(signum)
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    def ignore(_signum: int, _frame: FrameType | None) -> None:
        """The terminal sent SIGINT to the child as well; the child decides how to stop."""

    def started(child: subprocess.Popen[bytes]) -> None:
        children.append(child)
        for signum in pending:
            child.send_signal(signum)

    previous: dict[int, Any] = {signal.SIGINT: signal.signal(signal.SIGINT, ignore)}
    for forwarded in FORWARDED:
        previous[forwarded] = signal.signal(forwarded, forward)
    try:
        yield started
    finally:
        for restored, handler in previous.items():
            signal.signal(restored, handler)
