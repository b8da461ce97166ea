"""The /dev/shm files a job's own processes hold, seen while it runs. /dev/shm is the machine's: other programs
create, hand over and remove files there at any moment, so a test about a job's shared memory looks only at the
files its processes were seen holding (open or mapped), never at what appeared in the folder meanwhile."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

SHM = Path("/dev/shm")
INTERVAL = 0.05  # seconds between looks: Grain's blocks stay mapped for a batch, its semaphores for the run


def held(pids: Sequence[int]) -> set[str]:
    """Names under /dev/shm that the processes ``pids`` have open or mapped now (gone ones are skipped)."""
    names: set[str] = set()
    for pid in pids:
        proc = Path("/proc", str(pid))
        try:
            paths = [os.readlink(fd) for fd in (proc / "fd").iterdir()]
            paths += [line.split(maxsplit=5)[-1] for line in (proc / "maps").read_text().splitlines()]
        except OSError:
            continue
        names |= {p.removeprefix(f"{SHM}/").split(" ")[0] for p in paths if p.startswith(f"{SHM}/")}
    return names


class ShmWatch:
    """Collects, on a thread of its own, what ``root`` and its descendants hold under /dev/shm until stopped."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.names: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _tree(self) -> list[int]:
        try:
            root = psutil.Process(self.root)
            return [root.pid, *(child.pid for child in root.children(recursive=True))]
        except psutil.Error:
            return []

    def _run(self) -> None:
        while True:
            self.names |= held(self._tree())
            if self._stop.wait(INTERVAL):
                return

    def stop(self) -> set[str]:
        self._stop.set()
        self._thread.join()
        return self.names


def run_watched(
    argv: Sequence[str], *, timeout: float, **popen: Any
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """``subprocess.run(argv, capture_output=True, text=True)``, and the /dev/shm names its process tree held."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen) as proc:
        watch = ShmWatch(proc.pid)
        try:
            out, err = proc.communicate(timeout=timeout)
        finally:
            names = watch.stop()
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err), names


def left_behind(names: set[str]) -> set[str]:
    """Those of ``names`` that still exist."""
    return {name for name in names if (SHM / name).exists()}
