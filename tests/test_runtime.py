"""pwdeploy.runtime: the helpers job code imports, against fake cgroup files and real JAX devices."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pwdeploy import envcontract, runtime


def cgroup(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "sys/fs/cgroup" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n", encoding="ascii")
    return root


def never(*_: object) -> int:
    raise AssertionError("the affinity mask must not be consulted when a quota is set")


def test_the_env_var_wins(tmp_path: Path) -> None:
    root = cgroup(tmp_path, {"cpu.max": "400000 100000"})
    assert runtime.data_workers({"PWDEPLOY_DATA_WORKERS": "3"}, root=root, affinity=never) == 3
    assert runtime.data_workers({"PWDEPLOY_DATA_WORKERS": "0"}, root=root, affinity=never) == 0
    assert runtime.DATA_WORKERS == envcontract.DATA_WORKERS


@pytest.mark.parametrize(
    ("files", "workers"),
    [
        ({"cpu.max": "400000 100000"}, 3),  # 4 CPUs, one left for the training loop
        ({"cpu.max": "250000 100000"}, 2),  # 2.5 CPUs round up to 3
        ({"cpu.max": "50000 100000"}, 1),  # half a CPU still gets one worker
        ({"cpu/cpu.cfs_quota_us": "800000", "cpu/cpu.cfs_period_us": "100000"}, 7),  # cgroup v1
        ({"cpu,cpuacct/cpu.cfs_quota_us": "200000", "cpu,cpuacct/cpu.cfs_period_us": "50000"}, 3),
    ],
)
def test_cgroup_quota(tmp_path: Path, files: dict[str, str], workers: int) -> None:
    assert runtime.data_workers({}, root=cgroup(tmp_path, files), affinity=never) == workers


@pytest.mark.parametrize(
    "files",
    [
        {"cpu.max": "max 100000"},  # v2, no quota
        {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"},  # v1, no quota
        {"cpu.max": "garbage"},
        {},  # no cgroup files at all
    ],
)
def test_without_a_quota_the_affinity_mask_counts(tmp_path: Path, files: dict[str, str]) -> None:
    assert runtime.data_workers({}, root=cgroup(tmp_path, files), affinity=lambda: 6) == 5


def test_bad_env_value_names_the_variable() -> None:
    with pytest.raises(ValueError, match="PWDEPLOY_DATA_WORKERS='many' is not a whole number"):
        runtime.data_workers({"PWDEPLOY_DATA_WORKERS": "many"})


def test_on_pathways() -> None:
    assert runtime.on_pathways({"JAX_PLATFORMS": "proxy"})
    assert runtime.on_pathways({"JAX_PLATFORMS": "cpu,proxy"})
    assert not runtime.on_pathways({"JAX_PLATFORMS": "cpu"})
    assert not runtime.on_pathways({})


def python(code: str, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()[-1]


def test_initialize_locally_neither_imports_pathwaysutils_nor_jax() -> None:
    heavy = "('pathwaysutils', 'jax', 'click', 'yaml', 'grain', 'absl', 'psutil', 'array_record')"
    code = f"import sys; from pwdeploy import runtime; print(runtime.initialize(), sorted(m for m in sys.modules if m.split('.')[0] in {heavy}))"  # noqa: E501
    assert python(code, JAX_PLATFORMS="cpu") == "False []"


@pytest.mark.slow
def test_data_mesh_over_all_devices_and_slices() -> None:
    code = (
        "import json; from pwdeploy import runtime; a = runtime.data_mesh(); b = runtime.data_mesh(slices=True); "
        "print(json.dumps([dict(a.shape), dict(b.shape), [d.id for d in b.devices.flat]]))"
    )
    out = python(
        code, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4", PWDEPLOY_NUM_SLICES="2"
    )
    assert json.loads(out) == [{"data": 4}, {"slice": 2, "data": 2}, [0, 1, 2, 3]]


def test_slice_count_from_devices_or_env() -> None:
    class Dev:
        def __init__(self, slice_index: int | None) -> None:
            if slice_index is not None:
                self.slice_index = slice_index

    assert runtime.slice_count([Dev(0), Dev(0), Dev(1), Dev(1)], {}) == 2
    assert runtime.slice_count([Dev(None)], {"PWDEPLOY_NUM_SLICES": "4"}) == 4
    assert runtime.slice_count([Dev(None)], {}) == 1


def test_initialize_on_pathways_calls_pathwaysutils_stub(tmp_path: Path) -> None:
    """A stub pathwaysutils package, imported for real: the real one would connect to a proxy that does not exist."""
    (tmp_path / "pathwaysutils").mkdir()
    (tmp_path / "pathwaysutils" / "__init__.py").write_text("def initialize():\n    print('initialize')\n")
    code = "from pwdeploy import runtime; print(runtime.initialize())"
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])

    def printed(platforms: str) -> list[str]:
        env = {**os.environ, "PYTHONPATH": path, "JAX_PLATFORMS": platforms}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.split()

    assert printed("proxy") == ["initialize", "True"]
    assert printed("cpu") == ["False"]


MiB = 2**20


def test_prefetch_buffer_is_the_largest_that_fits_with_headroom() -> None:
    # 2 workers, 1 MiB batches: peak = (2 x (2b + 1) + 3) MiB -> b=4: 21, b=2: 13, b=1: 9 MiB (x1.25 headroom)
    assert runtime.shm_peak_bytes(MiB, 2, 4) == 21 * MiB
    assert runtime.prefetch_buffer(MiB, 2, shm_bytes=64 * MiB) == 4
    assert runtime.prefetch_buffer(MiB, 2, shm_bytes=17 * MiB) == 2  # 13 x 1.25 = 16.25 fits, 17 x 1.25 not
    assert runtime.prefetch_buffer(MiB, 2, shm_bytes=12 * MiB) == 1
    assert runtime.prefetch_buffer(MiB, 0, shm_bytes=0) == runtime.MAX_PREFETCH_BUFFER  # in-process: no /dev/shm


def test_prefetch_buffer_that_cannot_fit_says_what_to_raise() -> None:
    with pytest.raises(runtime.SharedMemoryTooSmall) as err:
        runtime.prefetch_buffer(4 * MiB, 7, shm_bytes=64 * MiB)
    message = str(err.value)
    # (7 x 3 + 3) x 4 MiB = 96 MiB, x 1.25 = 120 MiB
    assert "/dev/shm has 64.0 MiB free, but 7 data workers with 4.0 MiB batches need 120.0 MiB" in message
    assert "raise main.shm_size to at least 120Mi" in message and "main.data_workers" in message


def test_shm_free_bytes_reads_the_real_dev_shm() -> None:
    stat = os.statvfs("/dev/shm")
    assert 0 < runtime.shm_free_bytes() <= stat.f_blocks * stat.f_frsize


def test_prepare_data_workers_marks_absl_flags_parsed() -> None:
    code = (
        "from absl import flags; from pwdeploy import runtime; runtime.prepare_data_workers(0); "
        "a = flags.FLAGS.is_parsed(); runtime.prepare_data_workers(2); print(a, flags.FLAGS.is_parsed())"
    )
    assert python(code) == "False True"


def test_prepare_data_workers_in_a_spawned_worker_names_the_main_guard(tmp_path: Path) -> None:
    """A spawned worker imports the unguarded main script again, and stops there with the fix (no Grain needed)."""
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import multiprocessing\nfrom pwdeploy import runtime\nruntime.prepare_data_workers(2)\n"
        "worker = multiprocessing.get_context('spawn').Process(target=print)\nworker.start()\nworker.join()\n"
        "print('worker exit code', worker.exitcode)\n",
        encoding="utf-8",
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.splitlines() == ["worker exit code 1"]
    assert "RuntimeError: a data-loader worker was asked to start more workers" in done.stderr
    assert 'put the training code under `if __name__ == "__main__":`' in done.stderr


@pytest.mark.slow
def test_unguarded_script_with_grain_workers_stops_with_the_fix(tmp_path: Path) -> None:
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import grain\nfrom pwdeploy import runtime\nruntime.prepare_data_workers(1)\n"
        "ds = grain.MapDataset.range(4).to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=1))\n"
        "print(list(ds))\n",
        encoding="utf-8",
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert 'put the training code under `if __name__ == "__main__":`' in done.stderr


@pytest.mark.slow
def test_one_device_with_two_slices_is_a_degenerate_mesh() -> None:
    code = "import json; from pwdeploy import runtime; print(json.dumps(dict(runtime.data_mesh(slices=True).shape)))"
    out = python(
        code, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=1", PWDEPLOY_NUM_SLICES="2"
    )
    assert json.loads(out) == {"slice": 1, "data": 1}


SLICE_DOWN = """
import sys
import jax
from pwdeploy import runtime
def main():
    assert "pathwaysutils" not in sys.modules, "imported before main raised"
    raise jax.errors.JaxRuntimeError(sys.argv[1])
sys.exit(runtime.retry_on_slice_loss(main))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("message", "status"),
    [("DATA_LOSS: the slice's workers are gone", runtime.RETRY_EXIT_CODE), ("INVALID_ARGUMENT: a bug", 1)],
)
def test_a_slice_down_error_exits_with_the_retry_code_by_pathwaysutils_judgement(message: str, status: int) -> None:
    """The real classifier (pathwaysutils.elastic.elastic.is_error_due_to_slice_down) on a real JaxRuntimeError."""
    done = subprocess.run([sys.executable, "-c", SLICE_DOWN, message], capture_output=True, text=True, timeout=120)
    assert done.returncode == status, done.stderr
    said = (
        "pwdeploy.runtime: a slice is down (JaxRuntimeError: DATA_LOSS: the slice's workers are gone); exiting with 75"
    )
    assert (said in done.stderr) == (status == runtime.RETRY_EXIT_CODE)
    assert ("Traceback" in done.stderr) == (status == 1)  # any other error propagates as it is


def test_retry_on_slice_loss_returns_mains_value_and_passes_other_errors_on() -> None:
    assert runtime.retry_on_slice_loss(lambda: 7, slice_down=lambda e: True) == 7

    def lost() -> int:
        raise RuntimeError("DEADLINE_EXCEEDED\nsecond line")

    with pytest.raises(SystemExit) as exited:
        runtime.retry_on_slice_loss(lost, slice_down=lambda e: "DEADLINE" in str(e))
    assert exited.value.code == 75 and isinstance(exited.value.__cause__, RuntimeError)
    with pytest.raises(RuntimeError, match="DEADLINE_EXCEEDED"):
        runtime.retry_on_slice_loss(lost, slice_down=lambda e: False)


def test_checkpoint_and_profile_dirs_are_the_env_contracts_locations() -> None:
    env = {"PWDEPLOY_CHECKPOINT_DIR": "gs://bucket/ckpt", "PWDEPLOY_PROFILE_DIR": " /tmp/profiles \n"}
    assert runtime.checkpoint_dir(env) == "gs://bucket/ckpt"
    assert runtime.profile_dir(env) == "/tmp/profiles"
    assert runtime.checkpoint_dir({}) is None and runtime.profile_dir({"PWDEPLOY_PROFILE_DIR": ""}) is None


def test_a_local_run_gives_the_job_the_locations_the_helpers_read(tmp_path: Path) -> None:
    """The helpers read the names the env contract sets: local run's plan for a job with both locations."""
    from pwdeploy.config import load_job
    from pwdeploy.local.env import plan

    config = {
        "name": "rt", "tpu.type": "v5p-8", "main.image": "r.example/t:1", "main.command": "python3 train.py",
        "storage.scratch": "gs://bkt/s", "storage.checkpoints": "gs://bkt/c", "storage.profiles": "gs://bkt/p",
    }  # fmt: skip
    env = plan(load_job(None, config, installed_jax=lambda: "0.10.2"), cwd=tmp_path, cores=2, environ={}).env
    checkpoints, profiles = runtime.checkpoint_dir(env), runtime.profile_dir(env)
    assert checkpoints is not None and Path(checkpoints).name == "checkpoints"
    assert profiles is not None and Path(profiles).name == "profiles"
