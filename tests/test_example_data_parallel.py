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
SIDECAR_EXAMPLE = REPO / "examples" / "data_parallel" / "sidecar" / "job.yaml"
CONTRACT = {
    "devices", "steps", "final_loss", "examples_per_second", "strategy", "loader", "data_workers", "mesh",
    "start_step", "restarts",
}  # fmt: skip


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Compile cache and HLO directory of these runs, outside the checkout."""
    return tmp_path_factory.mktemp("local-state")


def local_run(state: Path, devices: int, *train_args: str, workers: int = 0, config: Path = EXAMPLE) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(config), "--devices", str(devices),
            "--compile-cache", str(state / "cache"), "--local-hlo-dir", str(state / "hlo"),
            "--data-workers", str(workers), "--", "python3", str(EXAMPLE.parent / "train.py"),
            "--data-dir", str(state / "data"), *train_args,
        ],
        cwd=config.parent, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])  # the output contract: the last line
    return result


@pytest.mark.slow
def test_one_device_eight_devices_and_pmap_train_alike(state: Path) -> None:
    one = local_run(state, 1, "--steps", "30")
    eight = local_run(state, 8, "--steps", "30")
    pmap = local_run(state, 8, "--steps", "30", "--strategy", "pmap")
    for result in (one, eight, pmap):
        assert set(result) >= CONTRACT
        assert result["steps"] == 30 and result["examples_per_second"] > 0
        assert (result["start_step"], result["restarts"]) == (0, 0)  # no checkpoint directory: a fresh start
    assert (one["devices"], eight["devices"], pmap["devices"]) == (1, 8, 8)
    assert (one["strategy"], eight["strategy"], pmap["strategy"]) == ("jit", "jit", "pmap")
    # The example targets 2 slices: a (slice, data) mesh; one device is the degenerate 1 x 1 mesh.
    assert (one["mesh"], eight["mesh"], pmap["mesh"]) == ({"slice": 1, "data": 1}, {"slice": 2, "data": 4}, {"data": 8})
    assert {r["loader"] for r in (one, eight, pmap)} == {"grain"} and one["data_workers"] == 0
    assert abs(one["final_loss"] - eight["final_loss"]) <= 1e-5
    assert abs(one["final_loss"] - pmap["final_loss"]) <= 1e-5
    assert 0 < one["final_loss"] < local_run(state, 1, "--steps", "1")["final_loss"]  # it does learn


@pytest.mark.slow
def test_two_grain_workers_and_colocated_python_give_the_same_loss(state: Path) -> None:
    in_process = local_run(state, 8, "--steps", "20")
    workers = local_run(state, 8, "--steps", "20", workers=2)
    colocated = local_run(state, 8, "--steps", "20", "--loader", "colocated_python", config=SIDECAR_EXAMPLE)
    colocated_pmap = local_run(
        state, 8, "--steps", "20", "--loader", "colocated_python", "--strategy", "pmap", config=SIDECAR_EXAMPLE
    )
    assert (in_process["data_workers"], workers["data_workers"], colocated["data_workers"]) == (0, 2, 0)
    assert workers["loader"] == "grain" and workers["prefetch_buffer"] >= 1
    assert colocated["loader"] == "colocated_python" and colocated["colocated_calls"] == 20
    assert colocated["mesh"] == {"slice": 2, "data": 4}
    for other in (workers, colocated, colocated_pmap):
        assert abs(other["final_loss"] - in_process["final_loss"]) <= 1e-5


@pytest.mark.slow
def test_colocated_batches_are_the_records_batches() -> None:
    """The two loaders' data, compared directly: the colocated shards are the ArrayRecord file's batches."""
    import numpy as np

    sys.path.insert(0, str(SIDECAR_EXAMPLE.parent / "src"))
    try:
        import dp_data
    finally:
        sys.path.remove(str(SIDECAR_EXAMPLE.parent / "src"))
    x, y = dp_data.examples(3)
    rows_x, rows_y = dp_data.batch_rows(3, 9, 64, slice(16, 32))  # step 9 of 8 per epoch: the 2nd batch again
    assert np.array_equal(rows_x, x[80:96]) and np.array_equal(rows_y, y[80:96])


def test_records_are_written_once_and_deterministic(tmp_path: Path) -> None:
    folders = [str(EXAMPLE.parent), str(EXAMPLE.parent / "sidecar" / "src")]  # where train.py finds them
    sys.path[:0] = folders
    try:
        import dp_data
        import loaders
    finally:
        del sys.path[: len(folders)]
    first = loaders.write_records(tmp_path / "a", 5)
    second = loaders.write_records(tmp_path / "b", 5)
    assert first.read_bytes() == second.read_bytes()
    mtime = first.stat().st_mtime_ns
    assert loaders.write_records(tmp_path / "a", 5) == first and first.stat().st_mtime_ns == mtime
    batches, buffer, _ = loaders.grain_batches(first, batch=64, steps=9, workers=0)
    loaded = list(batches)
    x, y = dp_data.examples(5)
    assert len(loaded) == 9 and buffer == 0
    assert (loaded[8][0] == x[:64]).all() and (loaded[1][1] == y[64:128]).all()  # in order, cycling


@pytest.mark.slow
def test_sharded_loop_back_to_back_on_eight_devices_finishes(state: Path) -> None:
    """Dead-lock guard: without PJRT_NPROC this loop hangs in an XLA CPU all-reduce and aborts after ~60 s."""
    result = local_run(state, 8, "--steps", "200", "--log-every", "0")
    assert result["steps"] == 200 and result["devices"] == 8


@pytest.mark.slow
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


@pytest.mark.slow
def test_checkpoint_and_profile_land_in_local_directories_beside_the_config(tmp_path: Path) -> None:
    """gs:// checkpoint and profile locations become directories under .pwdeploy/ of the config's folder."""
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    config = project / "job.yaml"
    config.write_text(EXAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(config), "--devices", "2",
            "--checkpoint-dir", "gs://bkt/ckpt", "--profile-dir", "gs://bkt/prof", "--compile-cache", "",
            "--data-workers", "0", "--", "python3", str(EXAMPLE.parent / "train.py"), "--steps", "3",
            "--checkpoint-every", "1", "--data-dir", str(tmp_path / "data"),
        ],
        cwd=elsewhere, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["steps"] == 3 and result["checkpoints_saved"] == [1, 2, 3]
    assert not (elsewhere / ".pwdeploy").exists()
    state = project / ".pwdeploy"
    assert (state / "checkpoints" / "3" / "params").is_dir(), "Orbax saved no checkpoint"
    assert sorted(p.name for p in (state / "checkpoints").iterdir()) == ["1", "2", "3"]
    assert list((state / "profiles").rglob("*.xplane.pb")), "the profiler wrote no trace"
