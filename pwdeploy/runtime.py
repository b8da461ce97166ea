"""Helpers for job code, the same locally and on Pathways.

Import cost matters here: this module imports only the standard library at import time; jax is imported by
the functions that build device meshes, pathwaysutils only when the job runs on Pathways.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

DATA_WORKERS = "PWDEPLOY_DATA_WORKERS"  # the same name as pwdeploy.envcontract.DATA_WORKERS (kept import-free)
NUM_SLICES = "PWDEPLOY_NUM_SLICES"


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


def on_pathways(environ: Mapping[str, str] | None = None) -> bool:
    """Whether JAX is pointed at the Pathways IFRT proxy (``JAX_PLATFORMS`` names ``proxy``)."""
    env = os.environ if environ is None else environ
    return "proxy" in env.get("JAX_PLATFORMS", "").split(",")


def initialize() -> bool:
    """Call ``pathwaysutils.initialize()`` on Pathways; locally do nothing (its import alone costs ~1.5 s).

    Call it before the first use of jax devices. Returns whether Pathways was initialised.
    """
    if not on_pathways():
        return False
    import pathwaysutils

    pathwaysutils.initialize()
    return True


def data_mesh(axis: str = "data", *, slices: bool = False, slice_axis: str = "slice") -> Any:
    """A ``jax.sharding.Mesh`` over every device for data parallelism.

    With ``slices=True`` the mesh is (slices x devices per slice) with axes ``(slice_axis, axis)``: the slice
    count comes from the devices' ``slice_index`` on multi-slice TPUs, else from ``PWDEPLOY_NUM_SLICES``.
    """
    import jax
    import numpy as np
    from jax.sharding import Mesh

    devices = sorted(jax.devices(), key=lambda d: (getattr(d, "slice_index", 0) or 0, d.id))
    if not slices:
        return Mesh(np.array(devices), (axis,))
    count = slice_count(devices)
    if len(devices) % count:
        raise ValueError(f"{len(devices)} devices do not split into {count} slices of equal size")
    return Mesh(np.array(devices).reshape(count, len(devices) // count), (slice_axis, axis))


def slice_count(devices: list[Any], environ: Mapping[str, str] | None = None) -> int:
    """Slices among ``devices``: distinct ``slice_index`` values where devices have one, else the env."""
    indices = {getattr(d, "slice_index", None) for d in devices}
    if None not in indices:
        return len(indices)
    env = os.environ if environ is None else environ
    value = env.get(NUM_SLICES, "1")
    try:
        count = int(value)
    except ValueError:
        raise ValueError(f"{NUM_SLICES}={value!r} is not a whole number") from None
    return max(1, count)
