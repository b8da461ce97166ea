"""Checking a local run against the limits its container would have on the cluster.

While the job runs, a sampling thread reads the job's whole process tree (the program and every worker it
starts): resident memory summed over the tree, and /dev/shm in use beyond what was used when the job started.
After the job, the peaks are compared with ``main.memory`` and ``main.shm_size``: more /dev/shm than the
container's memory-backed volume is a SIGBUS on the cluster, more memory an OOM kill.
psutil is imported here only, and this module only by ``local run``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from pwdeploy.config import JobConfig
from pwdeploy.quantity import parse_quantity

SHM = Path("/dev/shm")
INTERVAL_SECONDS = 0.1  # a few hundred psutil reads a second would cost the job a core; 10 do not


@dataclass
class Usage:
    """Peaks seen while the job ran."""

    memory_bytes: int = 0  # resident memory summed over the process tree
    shm_bytes: int = 0  # /dev/shm used beyond what was used when the job started
    samples: int = 0
    children: int = 0  # processes under the job at once (its data workers, multiprocessing's helpers)


def shm_used(path: Path = SHM) -> int:
    stat = os.statvfs(path)
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants (processes that end meanwhile count as 0)."""
    return tree_usage(pid)[0]


def tree_usage(pid: int) -> tuple[int, int]:
    """(resident bytes of ``pid`` and all its descendants, how many descendants it has now)."""
    import psutil

    try:
        root = psutil.Process(pid)
        children = root.children(recursive=True)
    except psutil.Error:
        return 0, 0
    total = 0
    for process in (root, *children):
        with suppress(psutil.Error):
            total += process.memory_info().rss
    return total, len(children)


@contextmanager
def sampled(pid: int, *, interval: float = INTERVAL_SECONDS, shm: Path = SHM) -> Iterator[Usage]:
    """Sample ``pid``'s tree every ``interval`` seconds on a daemon thread until the block ends."""
    usage = Usage()
    baseline = shm_used(shm)
    stop = threading.Event()

    def sample() -> None:
        memory, children = tree_usage(pid)
        usage.memory_bytes = max(usage.memory_bytes, memory)
        usage.children = max(usage.children, children)
        usage.shm_bytes = max(usage.shm_bytes, shm_used(shm) - baseline)
        usage.samples += 1

    def loop() -> None:
        while not stop.wait(interval):
            sample()

    sample()
    thread = threading.Thread(target=loop, name="pwdeploy-limits", daemon=True)
    thread.start()
    try:
        yield usage
    finally:
        stop.set()
        thread.join()


def summary(usage: Usage, job: JobConfig, *, cpus: int) -> str:
    """The one line printed after a checked run.

    main.data_workers is what the job was offered (PWDEPLOY_DATA_WORKERS); whether its loader started them shows
    in the child processes counted (a loader that works in-process, like colocated Python, starts none).
    """
    children = f"{usage.children} child process" + ("" if usage.children == 1 else "es")
    return (
        f"pwdeploy local: peak memory {human(usage.memory_bytes)} of main.memory {job.main.memory}, "
        f"peak /dev/shm {human(usage.shm_bytes)} of main.shm_size {job.main.shm_size}, "
        f"peak {children} (main.data_workers {job.main.data_workers}) on {cpus} local CPUs"
    )


def exceeded(usage: Usage, job: JobConfig) -> list[str]:
    """One line per limit the run went over, naming the field to raise (empty: within the limits)."""
    problems = []
    shm_limit = int(parse_quantity(job.main.shm_size, "main.shm_size"))
    if usage.shm_bytes > shm_limit:
        problems.append(
            f"main.shm_size: the job used {human(usage.shm_bytes)} of /dev/shm, more than {job.main.shm_size}; "
            "on the cluster it would die of SIGBUS: raise main.shm_size (--shm-size) or lower main.data_workers"
        )
    memory_limit = int(parse_quantity(job.main.memory, "main.memory"))
    if usage.memory_bytes > memory_limit:
        problems.append(
            f"main.memory: the job's processes held {human(usage.memory_bytes)}, more than {job.main.memory}; "
            "on the cluster it would be OOM-killed: raise main.memory (--main-memory)"
        )
    return problems


def human(size: float) -> str:
    """1.3 GiB, 48 MiB, 12 KiB, 0 B."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}" if unit == "GiB" else f"{size / scale:.0f} {unit}"
    return f"{size:.0f} B"
