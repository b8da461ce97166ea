"""What checkpoints cost the example, measured in one run (interleaved rounds; medians reported).

1. Step time with a checkpoint every 10 steps against none: the training loop's seconds per step (the JSON
   line's examples_per_second), same steps, devices and environment (`local run`'s, from pwdeploy.local.env).
   Saves are asynchronous (Orbax), but Orbax starts a save only once the previous one is written: when saves
   come faster than a save is written (the example's steps take milliseconds), each costs a whole write.
   Printed also as the extra time per save.
   And the example's default, a checkpoint chosen by time (Orbax's ContinuousCheckpointingPolicy, at least
   --checkpoint-seconds apart, never while one is being written), against none over a longer run
   (--time-steps, long enough for several intervals). Target: <= 1.10x.
2. Time from a kill to the first resumed step: the job is killed at a step (PWDEPLOY_FAIL_AT_STEP, its whole
   process group SIGKILLed, as `local run --fail-at-step` does), and the restart (PWDEPLOY_RESTART_ATTEMPT=1)
   is started at once; measured from the moment the killed process is reaped to the moment the restart prints
   its first step (--log-every 1). Split into the restart's start-up to its first line and what it reports.

Usage: python3 benchmarks/bench_checkpoint.py [--runs N] [--steps N] [--time-steps N] [--devices N] [--fail-at N]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"
TRAIN = EXAMPLE.parent / "train.py"
EVERY = 10


def job_env(state: Path, devices: int) -> dict[str, str]:
    """The environment `pwdeploy local run -f job.yaml --devices N --data-workers 0` gives the job."""
    sys.path.insert(0, str(REPO))
    from pwdeploy.config import load_job
    from pwdeploy.local.env import plan

    overrides = {
        "local.devices": devices,
        "main.data_workers": 0,
        "local.compile_cache": str(state / "cache"),
        "local.hlo_dir": str(state / "hlo"),
    }
    job = load_job(EXAMPLE, overrides)
    env = {**os.environ, **plan(job, cwd=EXAMPLE.parent, cores=os.cpu_count() or 1, environ=os.environ).env}
    env.pop("PWDEPLOY_CHECKPOINT_DIR", None)
    return env


def run(env: dict[str, str], args: list[str], **extra: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(TRAIN), *args], env={**env, **extra}, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"train.py failed ({done.returncode}):\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def step_seconds(result: dict[str, Any]) -> float:
    return float(result["batch"]) / float(result["examples_per_second"])


def kill_and_resume(env: dict[str, str], args: list[str], checkpoints: Path, fail_at: int) -> dict[str, float]:
    """Seconds from the kill to the restart's first step, and the restart's own figures."""
    env = {**env, "PWDEPLOY_CHECKPOINT_DIR": str(checkpoints), "PWDEPLOY_FAIL_AT_STEP": str(fail_at)}
    killed = subprocess.run(
        [sys.executable, str(TRAIN), *args], env={**env, "PWDEPLOY_RESTART_ATTEMPT": "0"},
        capture_output=True, text=True, check=False, start_new_session=True,
    )  # fmt: skip
    reaped = time.perf_counter()
    if killed.returncode != -signal.SIGKILL:
        raise SystemExit(f"the job was not killed at step {fail_at} ({killed.returncode}):\n{killed.stderr[-2000:]}")
    restart = subprocess.Popen(
        [sys.executable, str(TRAIN), *args, "--log-every", "1"], env={**env, "PWDEPLOY_RESTART_ATTEMPT": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
    )  # fmt: skip
    assert restart.stdout is not None
    first_step = None
    lines = []
    for line in restart.stdout:
        lines.append(line)
        if first_step is None and line.startswith("step "):
            first_step = time.perf_counter()
    if restart.wait() != 0 or first_step is None:
        raise SystemExit(f"the restart failed ({restart.returncode}): {''.join(lines[-5:])}")
    result = json.loads(lines[-1])
    return {"kill_to_first_step": first_step - reaped, "start_step": result["start_step"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--fail-at", type=int, default=125, help="the step the job is killed at")
    parser.add_argument("--time-steps", type=int, default=3000, help="steps of the by-time comparison")
    args = parser.parse_args()
    plain: list[float] = []
    saving: list[float] = []
    long_plain: list[float] = []
    by_time: list[tuple[float, int]] = []
    resumes: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-checkpoint-") as tmp:
        state = Path(tmp)
        env = job_env(state, args.devices)
        common = ["--steps", str(args.steps), "--data-dir", str(state / "data")]
        run(env, [*common, "--steps", "2"])  # records written, compile cache warm: every round starts alike
        for round_ in range(args.runs):
            plain.append(step_seconds(run(env, common)))
            checkpoints = state / f"every-{round_}"
            with_saves = run(env, [*common, "--checkpoint-every", str(EVERY)], PWDEPLOY_CHECKPOINT_DIR=str(checkpoints))
            saving.append(step_seconds(with_saves))
            resume_args = [*common, "--checkpoint-every", str(EVERY)]
            resumes.append(kill_and_resume(env, resume_args, state / f"resume-{round_}", args.fail_at))
            longer = ["--steps", str(args.time_steps), "--data-dir", str(state / "data")]
            long_plain.append(step_seconds(run(env, longer)))
            timed = run(env, longer, PWDEPLOY_CHECKPOINT_DIR=str(state / f"by-time-{round_}"))
            by_time.append((step_seconds(timed), len(timed["checkpoints_saved"])))
    plain_s, saving_s = statistics.median(plain), statistics.median(saving)
    kill = statistics.median(r["kill_to_first_step"] for r in resumes)
    print(
        f"runs: {args.runs} (medians), {args.steps} steps, {args.devices} emulated devices, "
        f"cores: {len(os.sched_getaffinity(0))}"
    )
    per_save = (saving_s - plain_s) * args.steps / (args.steps // EVERY)
    print(
        f"1. step time, checkpoint every {EVERY} steps / none: {saving_s / plain_s:.2f}x "
        f"({saving_s * 1e3:.2f} ms vs {plain_s * 1e3:.2f} ms per step, {per_save * 1e3:.0f} ms per save; runs: "
        + ", ".join(f"{s / p:.2f}x" for s, p in zip(saving, plain, strict=True))
        + ")"
    )
    long_s, time_s = statistics.median(long_plain), statistics.median(s for s, _ in by_time)
    print(
        f"   checkpoint by time (the default) / none, {args.time_steps} steps: {time_s / long_s:.3f}x "
        f"({time_s * 1e3:.3f} ms vs {long_s * 1e3:.3f} ms per step; saves per run: "
        + ", ".join(str(n) for _, n in by_time)
        + "; runs: "
        + ", ".join(f"{s / p:.3f}x" for (s, _), p in zip(by_time, long_plain, strict=True))
        + "; target <= 1.10)"
    )
    starts = sorted({int(r["start_step"]) for r in resumes})
    print(
        f"2. kill at step {args.fail_at} to the first resumed step: {kill:.2f} s (resumed from step "
        f"{'/'.join(map(str, starts))}; runs: " + ", ".join(f"{r['kill_to_first_step']:.2f} s" for r in resumes) + ")"
    )


if __name__ == "__main__":
    main()
