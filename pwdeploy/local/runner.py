"""Start the job's command as a child process and pass its exit status through.

Ctrl-C in a terminal reaches the whole foreground process group, so the child gets it directly and stops the
way it chooses; the parent only waits. SIGTERM and SIGHUP sent to pwdeploy alone are forwarded to the child.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from pwdeploy.errors import LocalRunError

Spawn = Callable[..., "subprocess.Popen[bytes]"]
FORWARDED = (signal.SIGTERM, signal.SIGHUP)


def exit_status(returncode: int) -> int:
    """A shell-style status: a child killed by signal N gives 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def run_child(
    command: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    spawn: Spawn = subprocess.Popen,
) -> int:
    """Run ``command`` in ``cwd`` with ``env`` (the whole environment); return its exit status."""
    if not cwd.is_dir():
        raise LocalRunError(f"cannot start the job: working directory {cwd} does not exist")
    try:
        child = spawn(list(command), cwd=cwd, env=dict(env))
    except FileNotFoundError:
        where = "" if os.sep in command[0] else " on PATH"
        raise LocalRunError(
            f"cannot start the job: {command[0]!r} not found{where} (working directory {cwd})",
            hint="check main.command in the config, or the command after --",
        ) from None
    except PermissionError:
        raise LocalRunError(f"cannot start the job: {command[0]!r} is not executable") from None
    with _signals_to(child):
        return exit_status(child.wait())


@contextmanager
def _signals_to(child: subprocess.Popen[bytes]) -> Iterator[None]:
    def forward(signum: int, _frame: FrameType | None) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    previous: dict[signal.Signals, Any] = {signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN)}
    for signum in FORWARDED:
        previous[signum] = signal.signal(signum, forward)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
