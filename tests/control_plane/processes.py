"""The control plane's processes: each in its own process group (a Ctrl-C at the terminal reaches only pytest,
which then stops them in order), with its output in ``<logs>/<name>.log``, and killed by the kernel should the
process that started them die without stopping them (PR_SET_PDEATHSIG)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

PR_SET_PDEATHSIG = 1  # linux/prctl.h


class StartError(RuntimeError):
    """A component did not start; the message names it and its log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class Process:
    name: str
    argv: Sequence[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self, env: dict[str, str] | None = None) -> Process:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                list(self.argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
                env=env,
            )
        return self

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, grace: float = 5.0) -> None:
        popen = self.popen
        if popen is None or popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGTERM)
        try:
            popen.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGKILL)
            popen.wait()

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def failed(self, what: str) -> StartError:
        exited = f" (exited {self.popen.returncode})" if self.popen is not None and not self.running() else ""
        return StartError(f"{self.name} {what}{exited}; its log: {self.log}\n{self.tail()}")


def wait_until(process: Process, ready: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``ready`` until it holds; StartError naming the process and its log when the process exits or the
    time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        if not process.running():
            raise process.failed(f"exited before {what}")
        if ready():
            return
        if time.monotonic() > deadline:
            raise process.failed(f"not {what} after {timeout:.0f} s")
        time.sleep(0.1)


def https_ok(url: str, context: ssl.SSLContext) -> Callable[[], bool]:
    """True once ``url`` answers 200."""

    def probe() -> bool:
        try:
            with urllib.request.urlopen(url, context=context, timeout=2) as answer:
                return int(answer.status) == 200
        except (OSError, urllib.error.URLError, ssl.SSLError):
            return False

    return probe


def port_open(port: int) -> Callable[[], bool]:
    def probe() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False

    return probe
