"""Host<->device transfers per training step, measured in the job's process while it runs (`local run`).

The probe (``pwdeploy/local/transfer_probe/sitecustomize.py``, first on the job's PYTHONPATH) wraps JAX's transfer
entry points and ``pwdeploy.runtime.step_done``, and each process that reported steps leaves its counts in a
folder of the run. A step is what happens between two ``step_done`` calls, so the first step (which also holds
the set-up: parameters placed, the program compiled) is left out of the per-step figures when there are more.
On Pathways every one of those bytes and syncs goes through the IFRT proxy: a step that moves more than
``WARN_BYTES_PER_STEP`` gets a warning.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any, NamedTuple

PROBE_DIR = Path(__file__).resolve().parent / "transfer_probe"
REPORT_ENV = "PWDEPLOY_TRANSFER_REPORT"  # the folder the probe writes <pid>.json into
WARN_BYTES_PER_STEP = 64 * 2**20  # through the proxy's gRPC stream this is tens of milliseconds a step at best
MAX_REPORT_BYTES = 16 * 2**20  # a report is a few numbers per step


@dataclass(frozen=True)
class Transfers:
    steps: int  # steps the figures are averaged over
    host_to_device_bytes_per_step: float
    device_to_host_bytes_per_step: float
    host_syncs_per_step: float
    max_bytes_per_step: int  # the most one step moved, both ways

    def as_json(self) -> dict[str, Any]:
        return {
            "host_to_device_bytes_per_step": round(self.host_to_device_bytes_per_step, 1),
            "device_to_host_bytes_per_step": round(self.device_to_host_bytes_per_step, 1),
            "host_syncs_per_step": round(self.host_syncs_per_step, 2),
            "max_transfer_bytes_per_step": self.max_bytes_per_step,
            "transfer_steps_measured": self.steps,
        }


@contextmanager
def probed(env: dict[str, str]) -> Iterator[tuple[dict[str, str], Path]]:
    """(the job's environment with the probe first on PYTHONPATH, the folder its reports go to), removed after."""
    folder = Path(tempfile.mkdtemp(prefix="pwdeploy-transfers-"))
    path = os.pathsep.join(p for p in (str(PROBE_DIR), env.get("PYTHONPATH", "")) if p)
    try:
        yield {**env, "PYTHONPATH": path, REPORT_ENV: str(folder)}, folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _windows(report: dict[str, Any]) -> list[tuple[int, int, int]]:
    """(h2d, d2h, syncs) of each step after the first; the first alone when it is the only one."""
    points = [(0, 0, 0, 0), *[tuple(int(v) for v in point) for point in report.get("steps", [])]]
    deltas = [tuple(b - a for a, b in zip(p[1:], q[1:], strict=True)) for p, q in pairwise(points)]
    steps = [(d[0], d[1], d[2]) for d in deltas]
    return steps[1:] if len(steps) > 1 else steps


def measured(folder: Path) -> Transfers | None:
    """The per-step figures over every attempt that reported steps; None when none did."""
    windows: list[tuple[int, int, int]] = []
    for path in sorted(folder.glob("*.json")):
        try:
            if path.stat().st_size > MAX_REPORT_BYTES:
                continue
            windows += _windows(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            continue  # a process killed while writing: its attempt is not measured
    if not windows:
        return None
    count = len(windows)
    return Transfers(
        steps=count,
        host_to_device_bytes_per_step=sum(w[0] for w in windows) / count,
        device_to_host_bytes_per_step=sum(w[1] for w in windows) / count,
        host_syncs_per_step=sum(w[2] for w in windows) / count,
        max_bytes_per_step=max(w[0] + w[1] for w in windows),
    )


class Seen(NamedTuple):
    """What the job's processes said besides the figures: whether any imported jax, and the compilation caches
    they ended with."""

    jax: bool
    cache_dirs: tuple[str, ...]


def seen(folder: Path) -> Seen:
    jax, caches = False, []
    for path in sorted(folder.glob("*.json")):
        try:
            if path.stat().st_size > MAX_REPORT_BYTES:
                continue
            report = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(report, dict):
            continue
        jax = jax or report.get("jax") is True
        if isinstance(report.get("cache_dir"), str):
            caches.append(report["cache_dir"])
    return Seen(jax, tuple(dict.fromkeys(caches)))


def warning(transfers: Transfers, limit: int = WARN_BYTES_PER_STEP) -> str | None:
    if transfers.max_bytes_per_step <= limit:
        return None
    return (
        f"a training step moved up to {transfers.max_bytes_per_step} bytes between host and device, more than "
        f"{limit}: on Pathways all of it goes through the IFRT proxy; load batches next to the accelerators "
        "(colocated Python) and read values every N steps"
    )
