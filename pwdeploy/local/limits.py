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
from pwdeploy.quantity import amount, whole_bytes

SHM = Path("/dev/shm")
INTERVAL_SECONDS = 0.1  # a few hundred psutil reads a second would cost the job a core; 10 do not
DETAIL_EVERY = 20  # samples between two reads of every process's smaps_rollup (2 s): see Tree
MEMBERS_EVERY = 5  # samples between two listings of the tree's processes (a scan of every process's stat)
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass
class Usage:
    """Peaks seen while the job ran."""

    memory_bytes: int = 0  # what the container would be charged: the tree's memory plus /dev/shm, at one instant
    shm_bytes: int = 0  # /dev/shm used beyond what was used when the job started
    samples: int = 0
    children: int = 0  # processes under the job at once (its data workers, multiprocessing's helpers)


def shm_used(path: Path = SHM) -> int:
    """Bytes in use in a /dev/shm: the larger of what the filesystem counts (statvfs, which also counts a file
    unlinked while still open or mapped) and the blocks of the files there. A tmpfs mounted without a size limit
    (``size=0``) reports no blocks at all (``f_blocks`` 0: tmpfs(5)), so there the files are what tells."""
    stat = os.statvfs(path)
    return max((stat.f_blocks - stat.f_bfree) * stat.f_frsize, files_blocks(path))


def files_blocks(folder: Path) -> int:
    """Bytes the files under ``folder`` take, from their blocks (``st_blocks``: 512-byte units whatever the block
    size), so a sparse file counts what it holds, not its length; links are not followed, and what cannot be read
    (another user's folder, a file gone meanwhile) counts nothing."""
    total, folders = 0, [str(folder)]
    while folders:
        with suppress(OSError), os.scandir(folders.pop()) as entries:
            for entry in entries:
                with suppress(OSError):
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        total += entry.stat(follow_symlinks=False).st_blocks * 512
    return total


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


def _anonymous(pid: int) -> int | None:
    """The process's resident anonymous memory in bytes (``resident - shared`` of /proc/PID/statm: counters the
    kernel keeps, read without walking the page tables or taking the memory-map lock); None where unreadable."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            fields = statm.read().split()
        return (int(fields[1]) - int(fields[2])) * PAGE
    except (OSError, IndexError, ValueError):
        return None


class Tree:
    """The memory of a process tree, sampled cheaply.

    ``smaps_rollup`` gives what the container is charged (proportional: a page shared by forked workers counts
    once) but walks every page table under the process's memory-map lock: at 10 Hz on a JAX process it slowed the
    job's own steps by 13-16% (docs/benchmarks.md). So it is read for every process when the tree's members change
    (a fork shares pages: every member's share changes) and every ``DETAIL_EVERY`` samples; in between, each
    process counts its last proportional figure plus the change of its resident anonymous memory since (statm),
    which is what a process's own allocations change: new pages are its own until it forks again. The tree's
    processes are listed every ``MEMBERS_EVERY`` samples (psutil reads every process's stat to find them: about
    10 ms on a busy machine); a process started in between counts from the next listing, its parent's figure
    standing for the pages they share until then.
    """

    def __init__(self, pid: int, *, init: bool = False) -> None:
        self.pid = pid
        self.init = init  # ``pid`` is the init of the job's PID namespace: not the job's, not counted
        self.samples = 0
        self._members: tuple[int, ...] = ()
        self._detail: dict[int, tuple[int, int]] = {}  # pid -> (its proportional bytes, its anonymous bytes then)

    def members(self) -> list[int]:
        """The tree's processes now (gone: empty)."""
        import psutil

        try:
            root = psutil.Process(self.pid)
            found = [p.pid for p in root.children(recursive=True)]
        except psutil.Error:
            return []
        return found if self.init else [self.pid, *found]

    def read(self) -> tuple[int, int]:
        """(bytes the tree holds, each page once; how many processes the job has beside its main one)."""
        listed = self.samples % MEMBERS_EVERY == 0 or not self._members
        members = tuple(self.members()) if listed else self._members
        detailed = members != self._members or self.samples % DETAIL_EVERY == 0
        self._members = members
        self.samples += 1
        total = 0
        for pid in members:
            anonymous = _anonymous(pid)
            if detailed or pid not in self._detail or anonymous is None:
                whole = _proportional(pid)
                if whole is None:
                    whole = _resident(pid)
                self._detail[pid] = (whole, anonymous or 0)
                total += whole
                continue
            whole, then = self._detail[pid]
            total += max(0, whole + anonymous - then)
        self._detail = {pid: self._detail[pid] for pid in members if pid in self._detail}
        return total, max(0, len(members) - 1)


def _resident(pid: int) -> int:
    import psutil

    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.Error:
        return 0


@contextmanager
def sampled(pid: int, *, interval: float = INTERVAL_SECONDS, shm: Path = SHM, init: bool = False) -> Iterator[Usage]:
    """Sample ``pid``'s tree every ``interval`` seconds on a daemon thread until the block ends. ``init``: ``pid``
    is the init of the job's PID namespace, and ``shm`` its private /dev/shm (empty when the job starts)."""
    usage = Usage()
    baseline = 0 if init else shm_used(shm)
    stop = threading.Event()
    tree = Tree(pid, init=init)

    def sample(*, processes: bool = True) -> None:
        try:
            in_shm = max(0, shm_used(shm) - baseline)
        except OSError:  # the private /dev/shm is gone already
            in_shm = 0
        memory, children = tree.read() if processes else (0, 0)
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
        sample(processes=False)


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
    shm_limit = whole_bytes(amount(job.main.shm_size, "main.shm_size"))
    if usage.shm_bytes > shm_limit:
        problems.append(
            f"main.shm_size: the job used {human(usage.shm_bytes)} of /dev/shm, more than {job.main.shm_size}; "
            "on the cluster it would die of SIGBUS: raise main.shm_size (--shm-size) or lower main.data_workers"
        )
    memory_limit = whole_bytes(amount(job.main.memory, "main.memory"))
    if usage.memory_bytes > memory_limit:
        problems.append(
            f"main.memory: the job held {human(usage.memory_bytes)} (its processes and /dev/shm), more than "
            f"{job.main.memory}; on the cluster the kernel's OOM killer would end main (exit code 137, reason "
            f"OOMKilled) and {_after_oom_kill(job)}: raise main.memory (--main-memory)"
        )
    return problems


def _after_oom_kill(job: JobConfig) -> str:
    """What the JobSet `render` prints for the job does when main is OOM-killed, by the failure evaluator."""
    import signal

    from pwdeploy import identifiers as ids
    from pwdeploy.local.restarts import rendered_jobset
    from pwdeploy.manifests.failure_policy import PodFailure, decide

    killed = PodFailure(ids.HEAD_JOB, signal=signal.SIGKILL, container=ids.MAIN_CONTAINER)
    return decide(rendered_jobset(job), [killed]).why


def filled(size: int) -> int:
    """The /dev/shm use at which a tmpfs of ``size`` bytes is full (it counts whole pages: one, at least)."""
    return max(PAGE, size - PAGE)


def human(size: float) -> str:
    """1.3 GiB, 48 MiB, 12 KiB, 0 B."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}" if unit == "GiB" else f"{size / scale:.0f} {unit}"
    return f"{size:.0f} B"
