"""Render speed, measured side by side in one run.

1. `pwdeploy render` as a whole process (default: with validation; `--no-validate` measured too) against
   `python -c "import click, yaml"`, the floor any click+YAML tool pays. `python -m pwdeploy` is the figure; the
   `pwdeploy` console script beside the interpreter, which users run (no `runpy`), is measured too when present.
   Target: <= 1.5x. Measured in pairs: each round runs the floor and then each variant, and the ratio is the median
   of the rounds' ratios, so load that changes during the run moves both sides of each pair alike. Wall time, and
   CPU time (user + system of the child), which other programs on a shared machine disturb less.
2. Rendering (build + serialise + validate, in process) for 256 slices against 1 slice. Target: <= 1.1x.

`--baseline DIR` adds `pwdeploy render` from another checkout's `pwdeploy` package (DIR holds `pwdeploy/`, e.g.
`git archive REV pwdeploy | tar -x -C DIR`), run from DIR through PYTHONPATH, in the same rounds: before and after
a change, side by side.

Usage: python3 benchmarks/bench_render.py [--runs N] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "data_parallel" / "job.yaml"


def _time_process(argv: list[str]) -> float:
    """Wall seconds of one run (bench_capacity.py uses it too)."""
    return _wall_and_cpu(argv)[0]


def _wall_and_cpu(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child: user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env, cwd=cwd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def compile_package(folder: Path | None = None) -> None:
    """Byte-compile pwdeploy as a regular `pip install` does (an editable install, or PYTHONDONTWRITEBYTECODE,
    would otherwise make every run compile the sources, which click and yaml, installed normally, never pay)."""
    import compileall

    import pwdeploy

    compileall.compile_dir(folder or Path(pwdeploy.__file__).parent, quiet=1)


class Variant(NamedTuple):
    argv: list[str]
    env: dict[str, str] | None = None
    cwd: Path | None = None


def process_times(runs: int, baseline: Path | None) -> dict[str, tuple[float, float, float, float]]:
    """Per variant: (median wall s, median CPU s, median wall ratio to the floor, median CPU ratio), in pairs."""
    render = [sys.executable, "-m", "pwdeploy", "render", "-f", str(EXAMPLE)]
    variants = {
        "import click, yaml": Variant([sys.executable, "-c", "import click, yaml"]),
        "pwdeploy render": Variant(render),
        "pwdeploy render --no-validate": Variant([*render, "--no-validate"]),
    }
    script = Path(sys.executable).parent / "pwdeploy"  # the console script pip installs: what users run
    if script.is_file():
        variants["console script: pwdeploy render"] = Variant([str(script), *render[3:]])
    if baseline is not None:
        # Run from DIR: `python -m` puts the working directory first on sys.path, before PYTHONPATH, so from this
        # checkout's root the "baseline" would import this checkout's pwdeploy.
        env = {**os.environ, "PYTHONPATH": str(baseline)}
        variants["baseline render"] = Variant(render, env, baseline.resolve())
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for variant in variants.values():  # warm the file cache once
        _wall_and_cpu(*variant)
    for _ in range(runs):
        for name, variant in variants.items():
            samples[name].append(_wall_and_cpu(*variant))
    floor = samples["import click, yaml"]
    found = {}
    for name, pairs in samples.items():
        walls, cpus = [w for w, _ in pairs], [c for _, c in pairs]
        wall_ratio = statistics.median(w / f[0] for (w, _), f in zip(pairs, floor, strict=True))
        cpu_ratio = statistics.median(c / f[1] for (_, c), f in zip(pairs, floor, strict=True))
        found[name] = (statistics.median(walls), statistics.median(cpus), wall_ratio, cpu_ratio)
    return found


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
    parser.add_argument("--baseline", type=Path, default=None, help="a folder holding another checkout's pwdeploy/")
    args = parser.parse_args()
    runs = args.runs
    compile_package()
    if args.baseline is not None:
        compile_package(args.baseline / "pwdeploy")

    proc = process_times(runs, args.baseline)
    print(f"whole process, {runs} rounds (each: the floor, then each variant); medians, ratios of pairs:")
    for name, (wall, cpu, wall_ratio, cpu_ratio) in proc.items():
        print(
            f"  {name:32s} wall {wall * 1000:7.1f} ms {wall_ratio:5.2f}x   CPU {cpu * 1000:7.1f} ms {cpu_ratio:5.2f}x"
        )
    wall_ratio, cpu_ratio = proc["pwdeploy render"][2:]
    verdict = "ok" if wall_ratio <= 1.5 else "MISSED"
    print(f"render / import click,yaml = {wall_ratio:.2f}x wall, {cpu_ratio:.2f}x CPU (target <= 1.5x): {verdict}")

    per_slices = slice_times(runs * 4)
    ratio = per_slices[256] / per_slices[1]
    print(f"in-process render+validate, median of {runs * 4}:")
    print(f"  1 slice    {per_slices[1] * 1000:7.2f} ms\n  256 slices {per_slices[256] * 1000:7.2f} ms")
    print(f"256 slices / 1 slice = {ratio:.2f}x (target <= 1.1x): {'ok' if ratio <= 1.1 else 'MISSED'}")


if __name__ == "__main__":
    main()
