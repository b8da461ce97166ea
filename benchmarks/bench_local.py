"""Local-run numbers, measured side by side in one run (interleaved; medians reported).

1. Data-parallel step throughput of the example on N emulated devices vs 1 device, same global batch.
   (On a 2-core machine N devices are not faster than one: local runs check correctness, not speed.)
2. Persistent compile cache: the training step's compile time in a second run / in a first run with an empty
   cache. Target: <= 0.3.
3. `pwdeploy local run` wall time vs running the script directly with the same environment (the variables
   `pwdeploy local env` prints), warm compile cache for both. Target: <= 1.1x. Fair pairs: both sides start from
   the same state, with no checkpoint (local run clears the folder it gives the job; the direct run gets the same
   folder cleared first, or it would resume from the checkpoint of the last step and train nothing), which each
   side's JSON line proves (start_step 0, the same final loss); the order within a pair alternates.
   Also the CPU seconds of each side's whole process tree (target: <= 1.2x) and the job's own steps per second
   (its examples/s, measured inside its training loop: target >= 0.97x of the direct run's).
   And `local run` with its limits check (the default: the job's process tree sampled) vs --no-limits-check.
   Target: <= 1.05x.
4. With --gcs: 2. with the cache in a bucket of the GCS emulator (gcp-storage-emulator, started here), measured
   in the same rounds as the local cache; and each first run's wall time, gs:// / local.

Usage: python3 benchmarks/bench_local.py [--runs N] [--devices N] [--steps N] [--data-workers N] [--gcs]
       [--local-run-only]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"


DATA_WORKERS = ["--data-workers", "0"]  # main: the example's Grain loader, in-process unless --data-workers


def pwdeploy_local(verb: str, devices: int, cache: Path | str, hlo: Path) -> list[str]:
    return [
        sys.executable, "-m", "pwdeploy", "local", verb, "-f", str(EXAMPLE), "--devices", str(devices),
        "--compile-cache", str(cache), "--local-hlo-dir", str(hlo), *DATA_WORKERS,
    ]  # fmt: skip


CPU: dict[str, float] = {}  # the CPU seconds (user + system) of the last timed run's whole process tree


def timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, dict[str, Any]]:
    """(wall seconds, the job's JSON line); the run's CPU seconds in ``CPU["last"]``: every process of its tree is
    reaped by the time it ends (by pwdeploy, or the job's init, or the job itself), so its children's usage is
    this process's."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=EXAMPLE.parent, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU["last"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {shlex.join(argv)}\n{done.stderr[-2000:]}")
    return seconds, json.loads(done.stdout.splitlines()[-1])


def train(
    devices: int, cache: Path | str, hlo: Path, steps: int, env: dict[str, str] | None = None
) -> tuple[float, dict[str, Any]]:
    argv = [*pwdeploy_local("run", devices, cache, hlo), "--", "python3", "train.py", "--steps", str(steps)]
    return timed(argv, env)


def start_emulator() -> Any:
    """The tests' GCS emulator (tests/gcs_emulator.py)."""
    sys.path.insert(0, str(REPO))
    from tests.gcs_emulator import GcsEmulator

    emulator = GcsEmulator()
    emulator.start()
    return emulator


def direct_env(devices: int, cache: Path, hlo: Path) -> dict[str, str]:
    printed = subprocess.run(
        pwdeploy_local("env", devices, cache, hlo), capture_output=True, text=True, check=True
    ).stdout
    exports = [shlex.split(line)[1] for line in printed.splitlines() if line.startswith("export ")]
    return {**os.environ, **dict(item.split("=", 1) for item in exports)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--devices", type=int, default=8)
    # 1000 steps: a loop of about 2 s here. At 200 (0.7 s) the direct runs' own rate moves 4-5% from run to run,
    # more than the 3% the steps-per-second target allows.
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--data-workers", type=int, default=0, help="the example's Grain worker processes")
    parser.add_argument("--gcs", action="store_true", help="also measure a gs:// cache on the GCS emulator")
    parser.add_argument(
        "--local-run-only",
        action="store_true",
        help="measure 3. alone: every round is the three runs of a pair, one after another (more rounds in the "
        "same time for the figures that move most with the machine's load)",
    )
    args = parser.parse_args()
    DATA_WORKERS[1] = str(args.data_workers)
    keys = (
        "eps_1",
        "eps_n",
        "cold",
        "warm",
        "wrapped",
        "unchecked",
        "direct",
        "cold_wall",
        "gcs_cold",
        "gcs_warm",
        "gcs_wall",
        *(f"{run}_{what}" for run in ("wrapped", "unchecked", "direct") for what in ("cpu", "eps")),
    )
    samples: dict[str, list[float]] = {k: [] for k in keys}
    emulator = start_emulator() if args.gcs else None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            measure(args, samples, Path(tmp), emulator)
    finally:
        if emulator is not None:
            emulator.stop()
    report(args, {k: statistics.median(v) for k, v in samples.items() if v})
    pairs(samples)


def pairs(samples: dict[str, list[float]]) -> None:
    """The same figures as medians of each round's own ratios: a round's three runs follow one another, so load
    that changes during the benchmark moves both sides of a ratio alike."""

    def paired(top: str, bottom: str) -> float:
        return statistics.median(a / b for a, b in zip(samples[top], samples[bottom], strict=True))

    print(
        f"   as medians of the {len(samples['direct'])} rounds' own ratios: local run / direct "
        f"{paired('wrapped', 'direct'):.3f}x wall, {paired('wrapped_cpu', 'direct_cpu'):.3f}x CPU, steps per second "
        f"{paired('wrapped_eps', 'direct_eps'):.3f}x; limits check on / off {paired('wrapped', 'unchecked'):.3f}x "
        f"wall, steps per second {paired('wrapped_eps', 'unchecked_eps'):.3f}x"
    )


def measure(args: argparse.Namespace, samples: dict[str, list[float]], tmp: Path, emulator: Any) -> None:
    n, steps = args.devices, str(args.steps)
    gcs_env = {**os.environ, "STORAGE_EMULATOR_HOST": emulator.url} if emulator is not None else None
    bucket = emulator.create_bucket("pwd-bench") if emulator is not None else ""
    hlo = tmp / "hlo"
    shared = tmp / "cache"
    train(n, shared, hlo, args.steps)  # warm the OS file cache and the shared compile cache
    env = direct_env(n, shared, hlo)
    for run in range(args.runs):
        if args.local_run_only:
            fair_pair(samples, n, shared, hlo, steps, env, direct_first=run % 2 == 1)
            continue
        samples["eps_1"].append(train(1, shared, hlo, args.steps)[1]["examples_per_second"])
        samples["eps_n"].append(train(n, shared, hlo, args.steps)[1]["examples_per_second"])
        fresh = tmp / f"cache-{run}"
        wall, cold = train(n, fresh, hlo, 1)
        samples["cold"].append(cold["compile_seconds"])
        samples["cold_wall"].append(wall)
        samples["warm"].append(train(n, fresh, hlo, 1)[1]["compile_seconds"])
        if emulator is not None:
            wall, cold = train(n, f"gs://{bucket}/cache-{run}", hlo, 1, gcs_env)
            if not emulator.list_objects(bucket, f"cache-{run}/"):
                raise SystemExit(f"the gs:// run wrote no cache entries to gs://{bucket}/cache-{run}")
            samples["gcs_cold"].append(cold["compile_seconds"])
            samples["gcs_wall"].append(wall)
            warm = train(n, f"gs://{bucket}/cache-{run}", hlo, 1, gcs_env)[1]
            samples["gcs_warm"].append(warm["compile_seconds"])
        fair_pair(samples, n, shared, hlo, steps, env, direct_first=run % 2 == 1)


def fair_pair(
    samples: dict[str, list[float]], n: int, cache: Path, hlo: Path, steps: str, env: dict[str, str], direct_first: bool
) -> None:
    """The wrapped, unchecked and direct runs of one round, each from no checkpoint (see 3. above)."""
    command = ["--", "python3", "train.py", "--steps", steps]

    def direct() -> tuple[float, dict[str, Any]]:
        checkpoints = env.get("PWDEPLOY_CHECKPOINT_DIR")
        if checkpoints:
            shutil.rmtree(checkpoints, ignore_errors=True)  # as local run clears it before each run
        return timed([sys.executable, "train.py", "--steps", steps], env)

    runs = {
        "wrapped": lambda: timed([*pwdeploy_local("run", n, cache, hlo), *command]),
        "unchecked": lambda: timed([*pwdeploy_local("run", n, cache, hlo), "--no-limits-check", *command]),
        "direct": direct,
    }
    order = ["direct", "wrapped", "unchecked"] if direct_first else ["wrapped", "unchecked", "direct"]
    results = {}
    for key in order:
        seconds, results[key] = runs[key]()
        samples[key].append(seconds)
        samples[f"{key}_cpu"].append(CPU["last"])
        samples[f"{key}_eps"].append(results[key]["examples_per_second"])
    starts = {key: result["start_step"] for key, result in results.items()}
    losses = {result["final_loss"] for result in results.values()}
    if set(starts.values()) != {0} or len(losses) != 1:
        raise SystemExit(f"not a fair pair: start steps {starts}, final losses {sorted(losses)}")


def report(args: argparse.Namespace, med: dict[str, float]) -> None:
    n = args.devices
    print(
        f"runs: {args.runs} (medians), devices: {n}, steps: {args.steps}, data workers: {args.data_workers}, "
        f"cores: {len(os.sched_getaffinity(0))}"
    )
    if "eps_1" in med:
        print(
            f"1. throughput, {n} devices / 1 device: {med['eps_n'] / med['eps_1']:.2f}x "
            f"({med['eps_n']:.0f} vs {med['eps_1']:.0f} examples/s)"
        )
        print(
            f"2. compile cache, warm / cold compile: {med['warm'] / med['cold']:.2f} "
            f"({med['warm']:.3f} s vs {med['cold']:.3f} s; target <= 0.3)"
        )
    print(
        f"3. pwdeploy local run / direct: {med['wrapped'] / med['direct']:.3f}x "
        f"({med['wrapped']:.2f} s vs {med['direct']:.2f} s; target <= 1.1)"
    )
    print(
        f"   CPU (the whole process tree): {med['wrapped_cpu'] / med['direct_cpu']:.3f}x "
        f"({med['wrapped_cpu']:.2f} s vs {med['direct_cpu']:.2f} s; target <= 1.2)"
    )
    print(
        f"   the job's own steps per second: {med['wrapped_eps'] / med['direct_eps']:.3f}x of the direct run's "
        f"({med['wrapped_eps']:.0f} vs {med['direct_eps']:.0f} examples/s; target >= 0.97)"
    )
    print(
        f"   limits check on / off: {med['wrapped'] / med['unchecked']:.3f}x wall, "
        f"{med['wrapped_cpu'] / med['unchecked_cpu']:.3f}x CPU, steps per second "
        f"{med['wrapped_eps'] / med['unchecked_eps']:.3f}x ({med['wrapped']:.2f} s vs {med['unchecked']:.2f} s; "
        "target <= 1.05)"
    )
    if "gcs_cold" in med:
        print(
            f"4. compile cache on gs:// (emulator), warm / cold compile: {med['gcs_warm'] / med['gcs_cold']:.2f} "
            f"({med['gcs_warm']:.3f} s vs {med['gcs_cold']:.3f} s; local: {med['warm'] / med['cold']:.2f}); "
            f"first-run wall time gs:// / local: {med['gcs_wall'] / med['cold_wall']:.2f}x "
            f"({med['gcs_wall']:.2f} s vs {med['cold_wall']:.2f} s)"
        )


if __name__ == "__main__":
    main()
