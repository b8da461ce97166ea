"""A job's processes, found from outside. A local run may give the job a PID namespace of its own, where the pids
it sees (``os.getpid()``) name other processes here: so a test finds the job's processes by what they share with
nothing else on the machine, the test's own temporary folder as their working directory."""

from __future__ import annotations

import os
from pathlib import Path

import psutil


def in_folder(folder: Path) -> list[psutil.Process]:
    """The live processes (zombies excluded) whose working directory is ``folder`` or under it, but this one."""
    root = str(folder.resolve())
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            cwd = process.cwd()
            if (cwd == root or cwd.startswith(root + os.sep)) and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.Error:
            continue
    return found
