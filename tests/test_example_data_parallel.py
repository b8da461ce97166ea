"""The example data-parallel job, run through `pwdeploy local run` as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"
CONTRACT = {"devices", "steps", "final_loss", "examples_per_second", "strategy"}


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Compile cache and HLO directory of these runs, outside the checkout."""
    return tmp_path_factory.mktemp("local-state")


def local_run(state: Path, devices: int, *train_args: str) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(EXAMPLE), "--devices", str(devices),
            "--compile-cache", str(state / "cache"), "--local-hlo-dir", str(state / "hlo"),
            "--", "python3", "train.py", *train_args,
        ],
        cwd=EXAMPLE.parent, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])  # the output contract: the last line
    return result


def test_one_device_eight_devices_and_pmap_train_alike(state: Path) -> None:
    one = local_run(state, 1, "--steps", "30")
    eight = local_run(state, 8, "--steps", "30")
    pmap = local_run(state, 8, "--steps", "30", "--strategy", "pmap")
    for result in (one, eight, pmap):
        assert set(result) >= CONTRACT
        assert result["steps"] == 30 and result["examples_per_second"] > 0
    assert (one["devices"], eight["devices"], pmap["devices"]) == (1, 8, 8)
    assert (one["strategy"], eight["strategy"], pmap["strategy"]) == ("jit", "jit", "pmap")
    assert abs(one["final_loss"] - eight["final_loss"]) <= 1e-5
    assert abs(one["final_loss"] - pmap["final_loss"]) <= 1e-5
    assert 0 < one["final_loss"] < local_run(state, 1, "--steps", "1")["final_loss"]  # it does learn


def test_sharded_loop_back_to_back_on_eight_devices_finishes(state: Path) -> None:
    """Dead-lock guard: without PJRT_NPROC this loop hangs in an XLA CPU all-reduce and aborts after ~60 s."""
    result = local_run(state, 8, "--steps", "200", "--log-every", "0")
    assert result["steps"] == 200 and result["devices"] == 8


def test_compile_cache_is_reused_and_hlo_lands_locally(state: Path) -> None:
    def entries() -> set[str]:
        cache = state / "cache"
        return {p.name for p in cache.iterdir()} if cache.exists() else set()

    before = entries()
    local_run(state, 4, "--steps", "2", "--seed", "7")
    first = entries()
    assert first - before, "the first 4-device run wrote no compile-cache entries"
    local_run(state, 4, "--steps", "2", "--seed", "7")
    assert entries() == first  # every compile of the second run was a cache hit
    assert list((state / "hlo").glob("*.txt")), "storage.hlo_dump is set, so HLO text is dumped locally"


def test_checkpoint_and_profile_land_in_local_directories(tmp_path: Path) -> None:
    """gs:// checkpoint and profile locations become directories under .pwdeploy/ of the current directory."""
    done = subprocess.run(
        [
            sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(EXAMPLE), "--devices", "2",
            "--checkpoint-dir", "gs://bkt/ckpt", "--profile-dir", "gs://bkt/prof", "--compile-cache", "",
            "--", "python3", str(EXAMPLE.parent / "train.py"), "--steps", "3",
        ],
        cwd=tmp_path, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1])["steps"] == 3
    state = tmp_path / ".pwdeploy"
    assert (state / "checkpoints" / "step_3").is_dir(), "Orbax saved no checkpoint"
    assert list((state / "profiles").rglob("*.xplane.pb")), "the profiler wrote no trace"
