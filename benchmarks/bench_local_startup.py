"""`pwdeploy local run`'s fixed cost: a run of a program that does nothing, against that program run directly.

What `local run` adds to any job whatever its length: pwdeploy's start-up, the checks of the job and the program,
the namespace probe, the watchdog, the launcher and the job's init, the transfer probe in the job's interpreter,
and the end (the tree ended, the summary). Measured in turns with the direct run of the same program with the
same environment (the variables `pwdeploy local env` prints), from the example's folder with its job config;
medians of each round's own differences and ratios. `--baseline DIR` adds the same run with another checkout's
pwdeploy (DIR holds `pwdeploy/`, e.g. a `git worktree` of an older commit), in the same rounds.

Usage: python3 benchmarks/bench_local_startup.py [--runs N] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"
PROGRAM = ["python3", "-c", "pass"]


def run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the whole process tree) of one run, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=EXAMPLE.parent, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {shlex.join(argv)}\n{done.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--baseline", type=Path, default=None, help="a folder holding another checkout's pwdeploy/")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pwdeploy-bench-startup-") as folder:
        cache, hlo = Path(folder) / "cache", Path(folder) / "hlo"
        local = [sys.executable, "-m", "pwdeploy", "local"]
        flags = ["-f", str(EXAMPLE), "--devices", "8", "--compile-cache", str(cache), "--local-hlo-dir", str(hlo)]
        printed = subprocess.run([*local, "env", *flags], capture_output=True, text=True, check=True).stdout
        exports = [shlex.split(line)[1] for line in printed.splitlines() if line.startswith("export ")]
        env = {**os.environ, **dict(item.split("=", 1) for item in exports)}
        variants: dict[str, tuple[list[str], dict[str, str]]] = {
            "direct": (PROGRAM, env),
            "local run": ([*local, "run", *flags, "--", *PROGRAM], dict(os.environ)),
            "local run --no-check": ([*local, "run", *flags, "--no-check", "--", *PROGRAM], dict(os.environ)),
            "local run --no-limits-check": (
                [*local, "run", *flags, "--no-limits-check", "--", *PROGRAM],
                dict(os.environ),
            ),
        }
        if args.baseline is not None:  # the example's folder holds no pwdeploy/: PYTHONPATH decides which one runs
            variants["baseline local run"] = (
                [*local, "run", *flags, "--", *PROGRAM],
                {**os.environ, "PYTHONPATH": str(args.baseline.resolve())},
            )
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        for argv, variant_env in variants.values():  # warm the file cache and the byte-code caches once
            run(argv, variant_env)
        for round_ in range(args.runs):
            names = list(variants) if round_ % 2 == 0 else list(reversed(variants))
            for name in names:
                samples[name].append(run(*variants[name]))
    direct = samples["direct"]
    print(f"rounds: {args.runs}; program: {shlex.join(PROGRAM)} in {EXAMPLE.parent.name}/, cores: {os.cpu_count()}")
    print(f"direct: {statistics.median(w for w, _ in direct) * 1000:.1f} ms wall, "
          f"{statistics.median(c for _, c in direct) * 1000:.1f} ms CPU")  # fmt: skip
    for name, found in samples.items():
        if name == "direct":
            continue
        added = statistics.median((w - d) * 1000 for (w, _), (d, _) in zip(found, direct, strict=True))
        added_cpu = statistics.median((c - e) * 1000 for (_, c), (_, e) in zip(found, direct, strict=True))
        print(
            f"{name}: {statistics.median(w for w, _ in found) * 1000:.1f} ms wall, adds {added:.1f} ms wall and "
            f"{added_cpu:.1f} ms CPU to the direct run (medians of the rounds' own differences)"
        )
    if args.baseline is not None:
        ours, theirs = samples["local run"], samples["baseline local run"]
        ratio = statistics.median(w / b for (w, _), (b, _) in zip(ours, theirs, strict=True))
        cpu = statistics.median(c / b for (_, c), (_, b) in zip(ours, theirs, strict=True))
        print(f"local run / baseline local run: {ratio:.3f}x wall, {cpu:.3f}x CPU (medians of the rounds' ratios)")


if __name__ == "__main__":
    main()
