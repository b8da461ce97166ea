"""What an emulated slice loss costs the example, measured through `pwdeploy local run` (medians of several runs).

The example job (2 slices of 4 emulated devices, `--elastic-slices 1`) loses slice 1 at --lose step and gets it
back at --restore step (`--lose-slice 1@L --restore-slice 1@R`); the run's JSON summary (--summary-json) gives,
for each event, the seconds from it to the next step done on the slices it leaves (the job's own clock:
`time.monotonic()` in runtime.step_done) and the steps done again. Measured for each --elastic-keep-every given
(how often the example copies its state to host memory: the steps since the last copy are re-done).

1. loss -> next step on slice 0: the failed read, the manager's health check of every slice, a new mesh,
   the step jitted again, the loader started again from the kept position.
2. return -> first step on both slices: the state copied, ScaleUpSignalError, the same again over 2 slices.
3. steps re-done per event.

Usage: python3 benchmarks/bench_elastic.py [--runs N] [--steps N] [--lose L] [--restore R] [--keep-every N ...]
       [--data-workers N]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"


def run(args: argparse.Namespace, state: Path, keep_every: int) -> list[dict[str, Any]]:
    summary = state / "summary.json"
    argv = [
        sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(EXAMPLE), "--elastic-slices", "1",
        "--compile-cache", str(state / "cache"), "--local-hlo-dir", str(state / "hlo"),
        "--data-workers", str(args.data_workers), "--summary-json", str(summary),
        "--lose-slice", f"1@{args.lose}", "--restore-slice", f"1@{args.restore}", "--",
        sys.executable, "train.py", "--steps", str(args.steps), "--data-dir", str(state / "data"),
        "--elastic-keep-every", str(keep_every),
    ]  # fmt: skip
    done = subprocess.run(argv, cwd=EXAMPLE.parent, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {shlex.join(argv)}\n{done.stderr[-2000:]}")
    events: list[dict[str, Any]] = json.loads(summary.read_text())["elastic_events"]
    if [e["event"] for e in events] != ["lost", "returned"]:
        raise SystemExit(f"expected a loss and a return, the run reported {events}")
    return events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--lose", type=int, default=20)
    parser.add_argument("--restore", type=int, default=40)
    parser.add_argument("--keep-every", type=int, nargs="+", default=[1, 7])
    parser.add_argument("--data-workers", type=int, default=0)
    args = parser.parse_args()
    measured: dict[int, list[list[dict[str, Any]]]] = {every: [] for every in args.keep_every}
    with tempfile.TemporaryDirectory(prefix="bench-elastic-") as tmp:
        state = Path(tmp)
        run(args, state, 1)  # records written, compile cache warm: every run starts alike
        for _ in range(args.runs):
            for every in args.keep_every:  # interleaved
                measured[every].append(run(args, state, every))
    print(
        f"runs: {args.runs} (medians), {args.steps} steps, slice 1 lost at step {args.lose} and back at "
        f"{args.restore}, 2 slices x 4 emulated devices, data workers: {args.data_workers}, "
        f"cores: {len(os.sched_getaffinity(0))}"
    )
    for every, runs in measured.items():
        lost = [events[0] for events in runs]
        back = [events[1] for events in runs]
        print(
            f"--elastic-keep-every {every}: "
            f"1. loss -> next step on slice 0: {_median(lost, 'seconds_to_next_step'):.2f} s "
            f"({_all(lost, 'seconds_to_next_step')}); "
            f"2. return -> first step on both slices: {_median(back, 'seconds_to_next_step'):.2f} s "
            f"({_all(back, 'seconds_to_next_step')}); "
            f"3. steps re-done: loss {_median(lost, 'steps_redone'):g}, return {_median(back, 'steps_redone'):g} "
            f"(runs: {_all(lost, 'steps_redone')} / {_all(back, 'steps_redone')})"
        )


def _median(events: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(float(e[key]) for e in events))


def _all(events: list[dict[str, Any]], key: str) -> str:
    return ", ".join(f"{float(e[key]):.2f}".rstrip("0").rstrip(".") for e in events)


if __name__ == "__main__":
    main()
