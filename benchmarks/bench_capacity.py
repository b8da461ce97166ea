"""Render time with each TPU capacity mode against on-demand, measured side by side in one run.

1. `pwdeploy render` as a whole process, per mode: the capacity modes must add no import cost.
2. Rendering in process (config load + build + serialise + validate), per mode.

Runs are interleaved and the median is reported, so machine noise hits every variant alike.
Usage: python3 benchmarks/bench_capacity.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_render import EXAMPLE, _time_process, compile_package

MODES: dict[str, list[str]] = {
    "on-demand": [],
    "spot": ["--capacity", "spot"],
    "reservation": ["--capacity", "reservation", "--reservation", "projects/owner-project/reservations/v5p-rsv"],
    "flex-start": ["--capacity", "flex-start", "--max-run-duration", "24h"],
    "queued": ["--capacity", "queued", "--queue", "team-a", "--max-run-duration", "7d"],
}
OVERRIDES: dict[str, dict[str, str]] = {
    "on-demand": {},
    "spot": {"tpu.capacity": "spot"},
    "reservation": {"tpu.capacity": "reservation", "tpu.reservation": "projects/owner-project/reservations/v5p-rsv"},
    "flex-start": {"tpu.capacity": "flex-start", "tpu.max_run_duration": "24h"},
    "queued": {"tpu.capacity": "queued", "scheduling.queue": "team-a", "tpu.max_run_duration": "7d"},
}


def process_times(runs: int) -> dict[str, float]:
    render = [sys.executable, "-m", "pwdeploy", "render", "-f", str(EXAMPLE)]
    samples: dict[str, list[float]] = {name: [] for name in MODES}
    for flags in MODES.values():  # warm the file cache once
        _time_process([*render, *flags])
    for _ in range(runs):
        for name, flags in MODES.items():
            samples[name].append(_time_process([*render, *flags]))
    return {name: statistics.median(values) for name, values in samples.items()}


def in_process_times(runs: int) -> dict[str, float]:
    from pwdeploy import manifests
    from pwdeploy.config import load_job
    from pwdeploy.validation.validate import validate_objects

    validate_objects(manifests.build(load_job(EXAMPLE)))  # load the schemas once, as a process does
    samples: dict[str, list[float]] = {name: [] for name in OVERRIDES}
    for _ in range(runs):
        for name, overrides in OVERRIDES.items():
            start = time.perf_counter()
            objects = manifests.build(load_job(EXAMPLE, overrides))
            manifests.to_yaml(objects)
            validate_objects(objects)
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=11)
    runs = parser.parse_args().runs
    compile_package()
    in_process = runs * 5
    measured = (
        ("pwdeploy render (process)", runs, process_times(runs)),
        ("in process", in_process, in_process_times(in_process)),
    )
    for title, n, times in measured:
        base = times["on-demand"]
        print(f"{title}, median of {n}:")
        for name, seconds in times.items():
            print(f"  {name:<12} {seconds * 1000:8.1f} ms  {seconds / base:5.2f}x on-demand")


if __name__ == "__main__":
    main()
