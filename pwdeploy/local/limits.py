"""Checking a local run against the limits its container would have on the cluster.

While the job runs, a sampling thread reads the job's whole process tree (the program and every worker it
starts) and /dev/shm in use beyond what was used when the job started. A container's memory limit is charged
what its processes hold, each page once, plus its memory-backed volumes, so the memory figure is the tree's
proportional set size (a page shared by n processes counts 1/n in each: forked Grain workers are not counted
n times) without the shared-memory pages it maps, plus the /dev/shm in use. After the job, the peaks are compared
with ``main.memory`` and ``main.shm_size``: more /dev/shm than the container's memory-backed volume is a SIGBUS on
the cluster, more memory an OOM kill.
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

    memory_bytes: int = 0  # what the container would be charged: the tree's memory plus /dev/shm, at one instant
    shm_bytes: int = 0  # /dev/shm used beyond what was used when the job started
    samples: int = 0
    children: int = 0  # processes under the job at once (its data workers, multiprocessing's helpers)


def shm_used(path: Path = SHM) -> int:
    stat = os.statvfs(path)
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize


def tree_memory(pid: int) -> tuple[int, int]:
    """(bytes ``pid`` and all its descendants hold, each page once; how many descendants it has now).

    Processes that end meanwhile count as 0. Linux: proportional set size without shared-memory pages
    (``Pss_Anon + Pss_File`` of smaps_rollup), so /dev/shm, which is counted on its own, is not counted twice;
    elsewhere resident memory.
    """
    import psutil

    try:
        root = psutil.Process(pid)
        children = root.children(recursive=True)
    except psutil.Error:
        return 0, 0
    total = 0
    for process in (root, *children):
        with suppress(psutil.Error, OSError):
            total += _proportional(process.pid) or process.memory_info().rss
    return total, len(children)


def _proportional(pid: int) -> int | None:
    """``Pss_Anon + Pss_File`` of /proc/PID/smaps_rollup in bytes; None where the kernel does not give them."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text(encoding="ascii")
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines()[1:] if ":" in line)
    if "Pss_Anon" not in fields or "Pss_File" not in fields:
        return None
    return sum(int(fields[name].split()[0]) * 1024 for name in ("Pss_Anon", "Pss_File"))


@contextmanager
def sampled(pid: int, *, interval: float = INTERVAL_SECONDS, shm: Path = SHM) -> Iterator[Usage]:
    """Sample ``pid``'s tree every ``interval`` seconds on a daemon thread until the block ends."""
    usage = Usage()
    baseline = shm_used(shm)
    stop = threading.Event()

    def sample(*, tree: bool = True) -> None:
        in_shm = max(0, shm_used(shm) - baseline)
        memory, children = tree_memory(pid) if tree else (0, 0)
        usage.memory_bytes = max(usage.memory_bytes, memory + in_shm)
        usage.children = max(usage.children, children)
        usage.shm_bytes = max(usage.shm_bytes, in_shm)
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
        # Once more after the job exited (the block ends then) and before its files are removed: what it left in
        # /dev/shm is still charged to the container, and a job that fills it and exits at once was seen at 0 B.
        # The tree is not read: its pid may name another process by now.
        sample(tree=False)


def merged(usages: list[Usage]) -> Usage:
    """The peaks over several attempts of one run: the limits verdict covers every attempt."""
    return Usage(
        memory_bytes=max((u.memory_bytes for u in usages), default=0),
        shm_bytes=max((u.shm_bytes for u in usages), default=0),
        samples=sum(u.samples for u in usages),
        children=max((u.children for u in usages), default=0),
    )


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
            f"main.memory: the job held {human(usage.memory_bytes)} (its processes and /dev/shm), more than "
            f"{job.main.memory}; "
            "on the cluster it would be OOM-killed: raise main.memory (--main-memory)"
        )
    return problems


def human(size: float) -> str:
    """1.3 GiB, 48 MiB, 12 KiB, 0 B."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}" if unit == "GiB" else f"{size / scale:.0f} {unit}"
    return f"{size:.0f} B"
