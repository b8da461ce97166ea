"""The example resumes: a run killed at a step and started again ends with the loss of a run never killed.

Each killed run gets `local run`'s environment for the example (pwdeploy.local.env.plan) plus
PWDEPLOY_FAIL_AT_STEP, in a process group of its own (runtime.step_done SIGKILLs the whole group, Grain workers
included, as a lost slice would end the job); the restart is the same command with PWDEPLOY_RESTART_ATTEMPT=1.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from pwdeploy.config import load_job
from pwdeploy.local.env import plan
from tests.conftest import JAX_VERSION, REPO
from tests.shm_watch import SHM, held, left_behind, run_watched

EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"
SIDECAR_EXAMPLE = REPO / "examples" / "data_parallel" / "sidecar" / "job.yaml"
TRAIN = EXAMPLE.parent / "train.py"
STEPS = 12


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Compile cache and records shared by these runs, outside the checkout."""
    return tmp_path_factory.mktemp("resume-state")


def job_env(state: Path, devices: int, workers: int, config: Path = EXAMPLE) -> dict[str, str]:
    """The environment `local run -f config --devices N --data-workers W` gives the job."""
    job = load_job(
        config,
        {
            "local.devices": devices,
            "main.data_workers": workers,
            "local.compile_cache": str(state / "cache"),
            "local.hlo_dir": str(state / "hlo"),
        },
        installed_jax=lambda: JAX_VERSION,
    )
    return {**os.environ, **plan(job, cwd=config.parent, cores=2, environ=os.environ).env}


def train(
    env: dict[str, str], checkpoints: Path | None, *args: str, fail_at: int = 0, attempt: int = 0
) -> subprocess.CompletedProcess[str]:
    done, _ = train_watched(env, checkpoints, *args, fail_at=fail_at, attempt=attempt)
    return done


def train_watched(
    env: dict[str, str], checkpoints: Path | None, *args: str, fail_at: int = 0, attempt: int = 0
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """A run of the example, and the /dev/shm files its processes were seen holding."""
    env = dict(env, PWDEPLOY_RESTART_ATTEMPT=str(attempt))
    env.pop("PWDEPLOY_CHECKPOINT_DIR", None)
    if checkpoints is not None:
        env["PWDEPLOY_CHECKPOINT_DIR"] = str(checkpoints)
    if fail_at:
        env["PWDEPLOY_FAIL_AT_STEP"] = str(fail_at)
    return run_watched(
        [sys.executable, str(TRAIN), *args], env=env, timeout=240,
        start_new_session=True,  # step_done kills its process group: this run's, never pytest's
    )  # fmt: skip


def result(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr[-3000:]
    parsed: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return parsed


def finished_steps(directory: Path) -> list[int]:
    """Checkpoints Orbax finished (a killed save leaves only ``<step>.orbax-checkpoint-tmp*``)."""
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit()) if directory.exists() else []


def remove_what_the_killed_run_left(names: set[str]) -> None:
    """SIGKILL gives Grain no chance to free its /dev/shm blocks (`local run` cleans up after a kill; these runs
    are started without it): remove those of the killed run's own files that no process holds any more. Another
    program's files are never looked at."""
    for name in left_behind(names) - held([p.pid for p in psutil.process_iter()]):
        (SHM / name).unlink(missing_ok=True)


def kill_and_resume(
    env: dict[str, str], checkpoints: Path, fail_at: int, *args: str
) -> tuple[dict[str, Any], list[int]]:
    """(the resumed run's JSON line, the checkpoints finished when the killed run died)."""
    killed, names = train_watched(env, checkpoints, *args, fail_at=fail_at)
    remove_what_the_killed_run_left(names)
    assert killed.returncode == -signal.SIGKILL, f"not killed at step {fail_at}: {killed.stderr[-2000:]}"
    finished = finished_steps(checkpoints)
    # The killed attempt's PWDEPLOY_FAIL_AT_STEP stays set on the restart, as `local run` keeps the environment.
    resumed = result(train(env, checkpoints, *args, fail_at=fail_at, attempt=1))
    return resumed, finished


@pytest.mark.parametrize(
    ("devices", "workers", "loader", "fail_at"),
    [
        (1, 0, "grain", 7),
        (8, 0, "grain", 6),  # killed right after starting the save of step 6: a half-written checkpoint
        (8, 2, "grain", 7),
        (8, 0, "colocated_python", 8),
    ],
    ids=["grain-1-device", "grain-8-devices", "grain-2-workers", "colocated-python"],
)
@pytest.mark.slow
def test_a_run_killed_at_a_step_resumes_to_the_uninterrupted_loss(
    state: Path, tmp_path: Path, devices: int, workers: int, loader: str, fail_at: int
) -> None:
    config = SIDECAR_EXAMPLE if loader == "colocated_python" else EXAMPLE
    env = job_env(state, devices, workers, config)
    args = ("--steps", str(STEPS), "--loader", loader, "--data-dir", str(state / "data"))
    uninterrupted = result(train(env, None, *args))
    resumed, finished = kill_and_resume(env, tmp_path / "ckpt", fail_at, *args, "--checkpoint-every", "3")
    # Orbax starts a save only once the one before is committed: by step 7, checkpoint 3 is finished.
    assert finished and finished[-1] in (3, 6) and finished[-1] <= fail_at
    assert resumed["start_step"] == finished[-1] and resumed["restarts"] == 1
    assert resumed["checkpoints_saved"] == [s for s in (3, 6, 9, 12) if s > finished[-1]]
    assert (resumed["devices"], resumed["loader"], resumed["data_workers"]) == (devices, loader, workers)
    if loader == "colocated_python":
        assert resumed["colocated_calls"] == STEPS - finished[-1]  # only the steps after the checkpoint
    assert abs(resumed["final_loss"] - uninterrupted["final_loss"]) <= 1e-5
    assert uninterrupted["start_step"] == 0 and uninterrupted["restarts"] == 0


@pytest.mark.slow
def test_a_run_killed_before_its_first_checkpoint_starts_again_from_step_0(state: Path, tmp_path: Path) -> None:
    env = job_env(state, 2, 0)
    args = ("--steps", str(STEPS), "--data-dir", str(state / "data"), "--checkpoint-every", "5")
    resumed, finished = kill_and_resume(env, tmp_path / "ckpt", 2, *args)
    assert finished == []
    assert resumed["start_step"] == 0 and resumed["restarts"] == 1
    assert resumed["checkpoints_saved"] == [5, 10, 12]
    assert abs(resumed["final_loss"] - result(train(env, None, *args))["final_loss"]) <= 1e-5


@pytest.mark.slow
def test_a_run_started_again_after_it_finished_resumes_at_its_last_step(state: Path, tmp_path: Path) -> None:
    """As a resubmitted job on the cluster: the same checkpoint directory, nothing left to train."""
    env = job_env(state, 1, 0)
    args = ("--steps", "6", "--data-dir", str(state / "data"), "--checkpoint-every", "3")
    first = result(train(env, tmp_path / "ckpt", *args))
    again = result(train(env, tmp_path / "ckpt", *args))
    assert first["checkpoints_saved"] == [3, 6] and first["start_step"] == 0
    assert again["start_step"] == 6 and again["checkpoints_saved"] == [] and again["examples_per_second"] == 0
    assert again["final_loss"] == first["final_loss"]  # the loss the checkpoint recorded for its step


@pytest.mark.slow
def test_a_corrupted_latest_checkpoint_falls_back_to_the_one_before_with_a_warning(state: Path, tmp_path: Path) -> None:
    env = job_env(state, 2, 0)
    checkpoints = tmp_path / "ckpt"
    common = ("--data-dir", str(state / "data"), "--checkpoint-every", "5")
    assert result(train(env, checkpoints, "--steps", "10", *common))["checkpoints_saved"] == [5, 10]
    (checkpoints / "10" / "params" / "w1" / "0.0").write_bytes(b"")  # one chunk of one array truncated
    extended = train(env, checkpoints, "--steps", "20", *common)
    resumed = result(extended)
    assert f"train.py: warning: checkpoint 10 in {checkpoints} is unreadable" in extended.stderr
    assert resumed["start_step"] == 5 and resumed["checkpoints_saved"] == [10, 15, 20]
    assert finished_steps(checkpoints) == [10, 15, 20]  # the unreadable one replaced by a good one
    uninterrupted = result(train(env, None, "--steps", "20", *common))
    assert abs(resumed["final_loss"] - uninterrupted["final_loss"]) <= 1e-5


def test_a_grain_iterator_restored_from_its_state_goes_on_with_the_next_batch(tmp_path: Path) -> None:
    """No example seen twice or skipped: the batches after a restore are exactly the rest of the epoch."""
    import numpy as np

    folders = [str(EXAMPLE.parent), str(EXAMPLE.parent / "sidecar" / "src")]  # where train.py finds them
    sys.path[:0] = folders
    try:
        import loaders
    finally:
        del sys.path[: len(folders)]
    path = loaders.write_records(tmp_path, 3)
    whole, _, _ = loaders.grain_batches(path, batch=64, steps=11, workers=0)
    expected = [x for x, _ in whole]
    first, _, iterator = loaders.grain_batches(path, batch=64, steps=11, workers=0)
    head = [next(first)[0] for _ in range(5)]
    position = json.loads(json.dumps(iterator.get_state()))  # what a checkpoint stores: JSON
    first.close()
    rest, _, _ = loaders.grain_batches(path, batch=64, steps=11, workers=0, state=position)
    resumed = head + [x for x, _ in rest]
    assert len(resumed) == 11 and all(np.array_equal(a, b) for a, b in zip(resumed, expected, strict=True))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.slow
def test_local_run_fail_at_step_restarts_the_example_and_it_resumes(state: Path, tmp_path: Path, workers: int) -> None:
    """The issue's command, end to end: `local run --fail-at-step` kills attempt 0, restarts it, and the example
    resumes from its checkpoint to the loss of a run never killed; nothing of the killed attempt (Grain workers
    included) is left running or in /dev/shm; a second local run starts with no checkpoints."""
    import shutil

    project = tmp_path / "project"
    shutil.copytree(EXAMPLE.parent, project, ignore=shutil.ignore_patterns(".pwdeploy", "__pycache__", "*.lock"))
    args = ["--steps", str(STEPS), "--checkpoint-every", "3", "--data-dir", str(state / "data")]
    flags = ["--devices", "2", "--data-workers", str(workers), "--compile-cache", str(state / "cache")]

    def local_run(*extra: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
        argv = [sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(project / "job.yaml"), *flags, *extra]
        return run_watched([*argv, "--", "python3", "train.py", *args], cwd=project, timeout=240)

    killed, names = local_run("--fail-at-step", "7")
    resumed = result(killed)
    assert "attempt 0 killed by SIGKILL (exit status 137) at --fail-at-step 7" in killed.stderr
    assert resumed["restarts"] == 1 and resumed["start_step"] in (3, 6) and resumed["data_workers"] == workers
    left = [p for p in psutil.process_iter(["cwd"]) if p.info["cwd"] and p.info["cwd"].startswith(str(project))]
    assert left == []
    assert left_behind(names) == set(), "files the job's processes held and left in /dev/shm"
    assert names or workers == 0, "Grain's workers hand their batches over through /dev/shm"
    assert abs(resumed["final_loss"] - result(train(job_env(state, 2, 0), None, *args))["final_loss"]) <= 1e-5
    again, _ = local_run()
    assert "an earlier run's were cleared" in again.stderr
    assert result(again)["start_step"] == 0


@pytest.mark.slow
def test_local_run_evict_at_step_requeues_the_example_which_saves_on_sigterm_and_resumes(
    state: Path, tmp_path: Path
) -> None:
    """A Kueue eviction from step 7, as the rendered head pod takes it: train.py (runtime.stop_on_sigterm) saves
    the step it is at and exits 143 within the grace period, the job is requeued (not restarted), and it resumes
    from that step to the loss of a run never stopped."""
    import shutil

    project = tmp_path / "project"
    shutil.copytree(EXAMPLE.parent, project, ignore=shutil.ignore_patterns(".pwdeploy", "__pycache__", "*.lock"))
    args = ["--steps", str(STEPS), "--checkpoint-every", "100", "--data-dir", str(state / "data")]
    argv = [sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(project / "job.yaml"), "--devices", "2",
            "--data-workers", "0", "--compile-cache", str(state / "cache"), "--evict-at-step", "7",
            "--summary-json", str(tmp_path / "summary.json"), "--", "python3", "train.py", *args]  # fmt: skip
    evicted, _ = run_watched(argv, cwd=project, timeout=240)
    resumed = result(evicted)
    # The SIGTERM comes from outside, as the kubelet's does, while runtime.step_done(7) waits for it; the loop looks
    # at the stop at its next step boundary, once step 8 is done.
    stopped = re.search(r"stopped after step (\d+) \(SIGTERM\), checkpoint saved: exiting 143", evicted.stdout)
    assert stopped is not None and int(stopped.group(1)) == 8, evicted.stdout[-2000:]
    assert "attempt 0 exited with status 143 after the eviction (--evict-at-step 7 --evict-by kueue)" in evicted.stderr
    assert "requeued: Kueue admits the JobSet again" in evicted.stderr
    assert resumed["start_step"] == int(stopped.group(1)) and resumed["restarts"] == 0  # a requeue is no restart
    summary = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))
    assert (summary["requeues"], summary["restarts"]) == (1, 0)
    assert abs(resumed["final_loss"] - result(train(job_env(state, 2, 0), None, *args))["final_loss"]) <= 1e-5
