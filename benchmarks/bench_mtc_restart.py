"""What a restart costs the example locally, with and without multi-tier checkpointing, side by side in one run.

Each round runs `pwdeploy local run` four times, interleaved (the order alternates between rounds), with the same
steps, devices, warm compile cache and --checkpoint-every:

- `persistent`: examples/data_parallel/job.yaml (storage.checkpoints: a folder on disk standing in for the bucket),
  uninterrupted, and killed at --fail-at-step then restarted from its last complete checkpoint;
- `mtc`: examples/data_parallel/mtc/job.yaml (train.py --mtc: Orbax's MTC set-up against the stand-in of the MTC
  driver, saves to a tmpfs standing in for the ramdisk), the same two runs.

A restart's cost is the killed run's wall time minus the uninterrupted run's: the process tree started again, the
restore, the steps since the restored checkpoint trained again, and (mtc) Orbax's MTC handshake on the new start.
The JSON lines prove each pair ended with the same loss and say where the restart resumed.

Usage: python3 benchmarks/bench_mtc_restart.py [--rounds N] [--steps N] [--fail-at N] [--every N] [--devices N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "data_parallel"
TRAIN = EXAMPLE / "train.py"
MODES = {"persistent": (EXAMPLE / "job.yaml", ()), "mtc": (EXAMPLE / "mtc" / "job.yaml", ("--mtc",))}


def config(folder: Path, mode: str, steps: int, every: int) -> Path:
    """The mode's job config, its command pointed at the example with this run's steps and save interval."""
    source, flags = MODES[mode]
    text = source.read_text(encoding="utf-8")
    old = next(line for line in text.splitlines() if line.strip().startswith("command:"))
    command = " ".join(["python3", str(TRAIN), *flags, "--steps", str(steps), "--checkpoint-every", str(every)])
    path = folder / f"{mode}.yaml"
    path.write_text(text.replace(old, f"  command: {command}"), encoding="utf-8")
    return path


def run(path: Path, devices: int, cache: Path, fail_at: int | None) -> tuple[float, dict[str, Any]]:
    argv = [sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(path), "--no-check", "--devices", str(devices)]
    argv += ["--compile-cache", str(cache), "--data-workers", "0"]
    if fail_at:
        argv += ["--fail-at-step", str(fail_at)]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{path.name} failed:\n{done.stderr[-3000:]}")
    return seconds, json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--fail-at", type=int, default=35)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--devices", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-mtc-") as folder:
        paths = {mode: config(Path(folder), mode, args.steps, args.every) for mode in MODES}
        cache = Path(folder) / "cache"
        for path in paths.values():  # warm the compile cache, not measured
            run(path, args.devices, cache, None)
        costs: dict[str, list[float]] = {mode: [] for mode in MODES}
        for number in range(args.rounds):
            order = list(MODES) if number % 2 == 0 else list(reversed(MODES))
            for mode in order:
                whole, ran = run(paths[mode], args.devices, cache, None)
                killed, resumed = run(paths[mode], args.devices, cache, args.fail_at)
                assert resumed["final_loss"] == ran["final_loss"], (mode, resumed, ran)
                costs[mode].append(killed - whole)
                print(
                    f"round {number}: {mode:10s} uninterrupted {whole:6.1f} s, killed at {args.fail_at} and resumed "
                    f"at {resumed['start_step']}: {killed:6.1f} s, restart cost {killed - whole:5.1f} s",
                    flush=True,
                )
        for mode, values in costs.items():
            print(f"{mode:10s} restart cost: median {statistics.median(values):.1f} s over {len(values)} rounds")
        ratio = statistics.median(costs["mtc"]) / statistics.median(costs["persistent"])
        print(f"mtc / persistent restart cost: {ratio:.2f}")


if __name__ == "__main__":
    main()
