"""A job's data loader on the head (its Grain worker processes): how many workers the container's CPUs allow, what
Grain's workers need to start, closing the loader without leaking /dev/shm, and the prefetch buffer /dev/shm can
hold. Job code reaches these through pwdeploy.runtime.

Import cost matters here as in pwdeploy.runtime: the standard library and pwdeploy.identifiers only at import time.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pwdeploy import identifiers as ids  # names only, no imports of its own

DATA_WORKERS = ids.DATA_WORKERS_ENV
SHM_PATH = Path("/dev/shm")
SHM_HEADROOM = 1.25  # keep the measured peak under 80% of /dev/shm: other processes use it too
MAX_PREFETCH_BUFFER = 4


def data_workers(
    environ: Mapping[str, str] | None = None,
    *,
    root: Path = Path("/"),
    affinity: Callable[[], int] | None = None,
) -> int:
    """Data-loader worker processes: ``PWDEPLOY_DATA_WORKERS``, else CPUs - 1 (one CPU for the training loop).

    CPUs are the container's cgroup CPU quota (v2 ``cpu.max``, else v1 ``cpu.cfs_quota_us``), else the CPUs
    this process may run on. Never ``os.cpu_count()``: in a container that is the node's count, not the
    container's limit. ``root`` and ``affinity`` exist for tests.
    """
    env = os.environ if environ is None else environ
    value = env.get(DATA_WORKERS, "").strip()
    if value:
        try:
            workers = int(value)
        except ValueError:
            raise ValueError(f"{DATA_WORKERS}={value!r} is not a whole number") from None
        if workers < 0:
            raise ValueError(f"{DATA_WORKERS}={value!r} must be 0 or more")
        return workers
    cpus = cgroup_cpus(root)
    if cpus is None:
        cpus = (affinity or _affinity)()
    return max(1, cpus - 1)


def cgroup_cpus(root: Path = Path("/")) -> int | None:
    """Whole CPUs of the cgroup's quota (rounded up), or None when no quota is set or readable."""
    cgroup = root / "sys/fs/cgroup"
    v2 = _read(cgroup / "cpu.max")
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        return _cpus(quota, period or "100000")
    for v1 in (cgroup / "cpu", cgroup / "cpu,cpuacct"):
        quota_text = _read(v1 / "cpu.cfs_quota_us")
        if quota_text is not None:
            return _cpus(quota_text, _read(v1 / "cpu.cfs_period_us") or "100000")
    return None


def _cpus(quota: str, period: str) -> int | None:
    if quota in ("max", "-1"):
        return None
    try:
        quota_us, period_us = int(quota), int(period)
    except ValueError:
        return None
    if quota_us <= 0 or period_us <= 0:
        return None
    return max(1, math.ceil(quota_us / period_us))


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _affinity() -> int:
    return len(os.sched_getaffinity(0))


class SharedMemoryTooSmall(RuntimeError):
    """/dev/shm cannot hold the loader's batches even with the smallest prefetch buffer."""


def prepare_data_workers(workers: int) -> None:
    """Make Grain's worker processes (``worker_count`` = ``workers``) start; call it before building the loader.

    - Grain reads an absl flag in each worker; without parsed absl flags that read fails
      (``UnparsedFlagAccessError``), so they are marked parsed here, where no absl app parsed them.
    - Workers start with spawn, which imports the main script again in each worker: a script whose loader is
      built at module level (no ``if __name__ == "__main__":`` guard) would start workers from the workers.
      Here that case stops at once with the fix, instead of multiprocessing's bootstrapping error.
    """
    if workers <= 0:
        return
    import multiprocessing.process

    if getattr(multiprocessing.process.current_process(), "_inheriting", False):
        raise RuntimeError(
            "a data-loader worker was asked to start more workers: the main script builds its loader at module "
            'level; put the training code under `if __name__ == "__main__":` (workers start with spawn and '
            "import the script again)"
        )
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


def close_data_loader(iterator: Any) -> None:
    """Stop a Grain loader's workers and free the /dev/shm blocks it still holds; call it once the loop is done.

    Grain's prefetch threads end on an exception whose traceback keeps each worker's last batch alive in a
    reference cycle, and Grain unlinks the blocks of batches it received on a background thread. Without a
    collection and a wait for that thread, those blocks outlive the job and Python reports them at exit as
    ``resource_tracker: There appear to be N leaked shared_memory objects``.
    """
    import gc
    import importlib

    iterator.close()
    gc.collect()
    try:
        arrays = importlib.import_module("grain._src.python.ipc.shared_memory_array")
    except ImportError:  # another Grain layout: nothing to wait for that can be named
        return
    pending = getattr(arrays.SharedMemoryArray, "_del_thread_pool", None)
    if pending is not None:
        pending.apply(int)  # one thread, first in first out: returns once every queued unlink has run


def shm_peak_bytes(batch_bytes: int, workers: int, buffer: int) -> int:
    """Peak /dev/shm use of a Grain loader, as measured: ``(workers x (2 x buffer + 1) + 3) x batch_bytes``."""
    return (workers * (2 * buffer + 1) + 3) * batch_bytes


def shm_free_bytes(path: Path = SHM_PATH) -> int:
    """Bytes free in the (memory-backed) /dev/shm of this container."""
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def prefetch_buffer(
    batch_bytes: int,
    workers: int,
    *,
    shm_bytes: int | None = None,
    max_buffer: int = MAX_PREFETCH_BUFFER,
    headroom: float = SHM_HEADROOM,
) -> int:
    """The largest per-worker prefetch buffer (1 .. ``max_buffer``) whose peak /dev/shm use, times ``headroom``,
    fits in ``shm_bytes`` (default: what /dev/shm has free now). 0 workers load in-process: no /dev/shm.

    Raises SharedMemoryTooSmall, with the numbers and the config field to raise, when even a buffer of 1 does not
    fit: a Grain worker would otherwise die of SIGBUS mid-run.
    """
    if workers <= 0:
        return max_buffer
    free = shm_free_bytes() if shm_bytes is None else shm_bytes
    for buffer in range(max_buffer, 0, -1):
        if shm_peak_bytes(batch_bytes, workers, buffer) * headroom <= free:
            return buffer
    need = math.ceil(shm_peak_bytes(batch_bytes, workers, 1) * headroom)
    raise SharedMemoryTooSmall(
        f"/dev/shm has {_mib(free)} free, but {workers} data workers with {_mib(batch_bytes)} batches need "
        f"{_mib(need)} (({workers} x 3 + 3) batches, x{headroom} headroom): raise main.shm_size to at least "
        f"{math.ceil(need / 2**20)}Mi, or lower main.data_workers or the batch size"
    )


def _mib(size: float) -> str:
    return f"{size / 2**20:.1f} MiB"
