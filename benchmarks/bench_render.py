"""Render speed, measured side by side in one run.

1. `pwdeploy render` as a whole process (default: with validation; `--no-validate` measured too) against
   `python -c "import click, yaml"`, the floor any click+YAML tool pays. Target: <= 1.5x.
2. Rendering (build + serialise + validate, in process) for 256 slices against 1 slice. Target: <= 1.1x.

Runs are interleaved and the median is reported, so machine noise hits every variant alike.
Usage: python3 benchmarks/bench_render.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "data_parallel" / "job.yaml"


def _time_process(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def compile_package() -> None:
    """Byte-compile pwdeploy as a regular `pip install` does (an editable install, or PYTHONDONTWRITEBYTECODE,
    would otherwise make every run compile the sources, which click and yaml, installed normally, never pay)."""
    import compileall

    import pwdeploy

    compileall.compile_dir(Path(pwdeploy.__file__).parent, quiet=1)


def process_times(runs: int) -> dict[str, float]:
    render = [sys.executable, "-m", "pwdeploy", "render", "-f", str(EXAMPLE)]
    variants = {
        "import click, yaml": [sys.executable, "-c", "import click, yaml"],
        "pwdeploy render": render,
        "pwdeploy render --no-validate": [*render, "--no-validate"],
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for argv in variants.values():  # warm the file cache once
        _time_process(argv)
    for _ in range(runs):
        for name, argv in variants.items():
            samples[name].append(_time_process(argv))
    return {name: statistics.median(values) for name, values in samples.items()}


def slice_times(runs: int) -> dict[int, float]:
    from pwdeploy import manifests
    from pwdeploy.config import load_job
    from pwdeploy.validation.validate import validate_objects

    jobs = {n: load_job(EXAMPLE, {"tpu.slices": n}) for n in (1, 256)}
    samples: dict[int, list[float]] = {n: [] for n in jobs}
    validate_objects(manifests.build(jobs[1]))  # load the schemas once, as a process does
    for _ in range(runs):
        for n, job in jobs.items():
            start = time.perf_counter()
            objects = manifests.build(job)
            manifests.to_yaml(objects)
            validate_objects(objects)
            samples[n].append(time.perf_counter() - start)
    return {n: statistics.median(values) for n, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs
    compile_package()

    proc = process_times(runs)
    floor = proc["import click, yaml"]
    print(f"whole process, median of {runs} interleaved runs:")
    for name, seconds in proc.items():
        print(f"  {name:32s} {seconds * 1000:7.1f} ms   {seconds / floor:5.2f}x")
    ratio = proc["pwdeploy render"] / floor
    print(f"render / import click,yaml = {ratio:.2f}x (target <= 1.5x): {'ok' if ratio <= 1.5 else 'MISSED'}")

    per_slices = slice_times(runs * 4)
    ratio = per_slices[256] / per_slices[1]
    print(f"in-process render+validate, median of {runs * 4}:")
    print(f"  1 slice    {per_slices[1] * 1000:7.2f} ms\n  256 slices {per_slices[256] * 1000:7.2f} ms")
    print(f"256 slices / 1 slice = {ratio:.2f}x (target <= 1.1x): {'ok' if ratio <= 1.1 else 'MISSED'}")


if __name__ == "__main__":
    main()
