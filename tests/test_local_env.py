"""The environment of a local run, built from the same config and the same env contract as the cluster."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from pwdeploy import identifiers as ids
from pwdeploy import manifests
from pwdeploy.config import JobConfig, load_job
from pwdeploy.envcontract import PROFILING_HOST_ENV, proxy_env
from pwdeploy.errors import ConfigError
from pwdeploy.local.env import MAX_DEVICES, compile_cache_location, device_count, local_env, plan
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"
BASE = {
    "name": "demo",
    "tpu.type": "v6e-16",
    "tpu.slices": 2,
    "main.image": "r.example/p/img:1",
    "main.command": "python3 train.py --steps 5",
    "storage.scratch": "gs://bucket/scratch",
}
LOCAL_ONLY = {
    "JAX_PLATFORMS",
    "XLA_FLAGS",
    "PJRT_NPROC",
    "PWDEPLOY_LOCAL_DEVICES",
    "JAX_COMPILATION_CACHE_DIR",
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES",
    "PWDEPLOY_LOCAL_SLICE_LAYOUT",  # the slice each emulated device stands for (its slice_index in the job)
}


def job(path: Path | None = None, **overrides: Any) -> JobConfig:
    values = {} if path is not None else dict(BASE)
    values.update({k.replace("__", "."): v for k, v in overrides.items()})
    return load_job(path, values, installed_jax=lambda: "0.10.2")


def flags_of(env: dict[str, str]) -> list[str]:
    return env["XLA_FLAGS"].split()


def test_devices_default_to_the_targets_chips() -> None:
    assert device_count(job(), cores=64) == (32, [])  # 2 x v6e-16
    assert device_count(job(EXAMPLE), cores=64) == (8, [])  # 2 x v5p-8: 4 chips each


def test_devices_flag_wins_and_sets_xla_and_thread_pool() -> None:
    local_plan = plan(job(local__devices=4), cwd=Path.cwd(), cores=2)
    assert local_plan.devices == 4
    assert flags_of(local_plan.env)[0] == "--xla_force_host_platform_device_count=4"
    assert local_plan.env["JAX_PLATFORMS"] == "cpu"
    assert int(local_plan.env["PJRT_NPROC"]) >= 2 * 4


def test_absurd_device_count_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigError) as err:
        device_count(job(local__devices=MAX_DEVICES + 1), cores=2)
    assert err.value.field == "local.devices" and "--devices" in str(err.value)
    with pytest.raises(ConfigError, match=r"2048 emulated devices \(the 8 x v6e-256 target.s chips\)"):
        device_count(job(tpu__type="v6e-256", tpu__slices=8), cores=2)


def test_many_devices_per_core_warn() -> None:
    _, warnings = device_count(job(local__devices=32), cores=1)  # all 32 chips of the target: no mesh warning
    assert len(warnings) == 1 and "32 emulated devices on 1 CPU core(s)" in warnings[0]
    assert device_count(job(local__devices=16), cores=2)[1] == []


def test_tpu_flags_are_dropped_with_a_note_and_cpu_flags_kept() -> None:
    local_plan = plan(job(EXAMPLE), cwd=Path.cwd(), cores=2)
    assert local_plan.dropped_flags == ("--xla_tpu_enable_async_collective_fusion=true",)
    assert local_plan.notes == (
        "TPU-only XLA flags are left out of local runs (the CPU backend does not know them): "
        "--xla_tpu_enable_async_collective_fusion=true",
    )
    assert not [w for w in local_plan.warnings if "--xla_tpu" in w]
    flags = flags_of(local_plan.env)
    assert "--xla_dump_hlo_as_text=true" in flags
    assert not [f for f in flags if f.startswith("--xla_tpu")]


def test_mains_own_xla_flags_join_the_proxys_as_the_cluster_would_see_them(tmp_path: Path) -> None:
    """On the cluster main gets main.env.XLA_FLAGS and the proxy, which compiles, gets xla_flags; locally the one
    process does both. The user's flags were replaced by local run's own."""
    own = (
        "--xla_cpu_enable_fast_math=false --xla_tpu_enable_data_parallel_all_reduce_opt=true "
        "--xla_force_host_platform_device_count=64 --xla_backend_optimization_level=1"
    )
    config = job(main__env={"XLA_FLAGS": own}, xla_flags=["--xla_backend_optimization_level=2"], local__devices=8)
    rendered = manifests.build(config)[0]
    head = rendered["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    (main,) = [c for c in head.get("initContainers", []) + head["containers"] if c["name"] == ids.MAIN_CONTAINER]
    assert {e["name"]: e.get("value") for e in main["env"]}["XLA_FLAGS"] == own  # what main gets on the cluster
    local_plan = plan(config, cwd=tmp_path, cores=2)
    assert flags_of(local_plan.env) == [
        "--xla_force_host_platform_device_count=8",  # local run's own, never the config's
        "--xla_cpu_enable_fast_math=false",
        "--xla_backend_optimization_level=2",  # the proxy's, which compiles on the cluster
    ]
    assert local_plan.dropped_flags == ("--xla_tpu_enable_data_parallel_all_reduce_opt=true",)
    assert "--xla_tpu_enable_data_parallel_all_reduce_opt=true" in local_plan.notes[0]


def test_gcs_hlo_location_maps_to_the_local_directory(tmp_path: Path) -> None:
    config = job(storage__hlo_dump="gs://bkt/hlo", local__hlo_dir=str(tmp_path / "hlo"))
    local_plan = plan(config, cwd=tmp_path, cores=2)
    assert local_plan.hlo_dir == tmp_path / "hlo"
    assert local_plan.env["PWDEPLOY_HLO_DUMP_DIR"] == str(tmp_path / "hlo")
    assert flags_of(local_plan.env)[-1] == f"--xla_dump_to={tmp_path / 'hlo'}"
    no_dump = plan(job(), cwd=tmp_path, cores=2)
    assert no_dump.hlo_dir is None and "PWDEPLOY_HLO_DUMP_DIR" not in no_dump.env
    assert not [f for f in flags_of(no_dump.env) if f.startswith("--xla_dump_to")]


def test_gcs_profiles_and_checkpoints_map_to_local_directories_beside_the_config(tmp_path: Path) -> None:
    """A local run never writes the cluster's checkpoint or profile bucket; the stand-ins sit in the config's
    folder (job.base_dir), wherever the run starts."""
    config_dir = tmp_path / "project"
    config_dir.mkdir()
    (config_dir / "job.yaml").write_text(
        "name: demo\ntpu: {type: v6e-16}\nmain: {image: r.example/p/img:1, command: python3 t.py}\n"
        "storage: {scratch: gs://bucket/scratch, profiles: gs://bkt/prof, checkpoints: gs://bkt/ckpt, "
        "hlo_dump: gs://bkt/hlo}\n",
        encoding="utf-8",
    )
    config = job(config_dir / "job.yaml")
    local_plan = plan(config, cwd=tmp_path, cores=2)
    assert compile_cache_location(config) == str(config_dir / ".pwdeploy" / "jax-cache")
    assert local_plan.hlo_dir == config_dir / ".pwdeploy" / "hlo"
    expected = {
        "PWDEPLOY_PROFILE_DIR": config_dir / ".pwdeploy" / "profiles",
        "PWDEPLOY_CHECKPOINT_DIR": config_dir / ".pwdeploy" / "checkpoints",
    }
    assert local_plan.outputs == expected
    assert {k: local_plan.env[k] for k in expected} == {k: str(v) for k, v in expected.items()}
    assert plan(job(), cwd=tmp_path, cores=2).outputs == {}


def test_compile_cache_local_gcs_and_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert compile_cache_location(job()) == str(tmp_path / ".pwdeploy" / "jax-cache")
    assert compile_cache_location(job(local__compile_cache="gs://bkt/cache")) == "gs://bkt/cache"
    env = local_env(job(), 1, hlo_dir=None, compile_cache="gs://bkt/cache")
    assert env["JAX_COMPILATION_CACHE_DIR"] == "gs://bkt/cache"
    assert env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
    assert "JAX_COMPILATION_CACHE_DIR" not in local_env(job(), 1, hlo_dir=None, compile_cache=None)


def test_gcs_compile_cache_warns_when_gcsfs_is_missing() -> None:
    on_gcs = job(local__compile_cache="gs://bkt/cache")
    warnings = plan(on_gcs, cwd=Path.cwd(), cores=64, gcs_supported=lambda: False).warnings
    assert warnings == (
        "local.compile_cache gs://bkt/cache needs gcsfs (pip install gcsfs); without it JAX runs "
        "with no persistent cache",
    )
    assert plan(on_gcs, cwd=Path.cwd(), cores=64, gcs_supported=lambda: True).warnings == ()
    assert plan(job(), cwd=Path.cwd(), cores=64, gcs_supported=lambda: False).warnings == ()


def test_config_command_runs_beside_the_config_and_an_override_in_cwd(tmp_path: Path) -> None:
    from_file = plan(job(EXAMPLE), cwd=tmp_path, cores=2)
    assert from_file.cwd == EXAMPLE.parent.resolve()
    assert from_file.command == (sys.executable, "train.py", "--steps", "200")  # python3 -> this interpreter
    override = plan(job(EXAMPLE), ("./my_train", "--x"), cwd=tmp_path, cores=2)
    assert (override.command, override.cwd) == (("./my_train", "--x"), tmp_path)


def test_local_env_is_the_manifests_user_env_without_the_proxy(tmp_path: Path) -> None:
    """One source of truth: the user container `main` in the rendered JobSet and the local run agree."""
    config = job(
        storage__hlo_dump="gs://bkt/hlo",
        storage__profiles="gs://bkt/prof",
        storage__checkpoints="gs://bkt/ckpt",
        main__env=["TRAIN_SEED=3", "EXTRA=x y"],
        main__data_workers=5,
        local__hlo_dir=str(tmp_path),
    )
    (jobset,) = manifests.build(config)
    head = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == ids.HEAD_JOB)
    containers = head["template"]["spec"]["template"]["spec"]["containers"]
    main = next(c for c in containers if c["name"] == ids.MAIN_CONTAINER)
    cluster = {e["name"]: e["value"] for e in main["env"] if "value" in e}
    from_pod = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in main["env"] if "valueFrom" in e}
    assert from_pod == {
        ids.RESTART_ATTEMPT_ENV: f"metadata.labels['{ids.RESTART_ATTEMPT_LABEL}']",
        ids.JOBSET_NAME_ENV: f"metadata.annotations['{ids.JOBSET_NAME_LABEL}']",
    }
    for name in proxy_env():
        assert cluster.pop(name, None) is not None, f"the manifest lacks the proxy variable {name}"
    assert cluster.pop(PROFILING_HOST_ENV) == "127.0.0.1"  # pathwaysutils' profiler server: Pathways only
    assert cluster.pop("PWDEPLOY_HLO_DUMP_DIR") == "gs://bkt/hlo"

    local = plan(config, cwd=tmp_path, cores=2).env
    assert local.pop("PWDEPLOY_HLO_DUMP_DIR") == str(tmp_path)
    assert local.pop(ids.RESTART_ATTEMPT_ENV) == "0"  # each restart of `local run` sets its own
    assert local.pop(ids.JOBSET_NAME_ENV) == config.name  # the JobSet's name, its annotation on the cluster
    for name, folder in (("PWDEPLOY_PROFILE_DIR", "profiles"), ("PWDEPLOY_CHECKPOINT_DIR", "checkpoints")):
        assert cluster.pop(name).startswith("gs://bkt/")
        assert local.pop(name) == str(config.base_dir.resolve() / ".pwdeploy" / folder)
    assert {k: v for k, v in local.items() if k not in LOCAL_ONLY} == cluster
    assert not set(proxy_env()) - LOCAL_ONLY & set(local)
    assert cluster["PWDEPLOY_DATA_WORKERS"] == "5" and cluster["EXTRA"] == "x y"


def test_sidecar_source_dir_goes_on_pythonpath_as_in_the_image() -> None:
    sidecar = REPO / "examples" / "data_parallel" / "sidecar"
    env = plan(job(sidecar / "job.yaml"), cwd=Path.cwd(), cores=2, environ={"PYTHONPATH": "/x"}).env
    assert env["PYTHONPATH"].split(":") == [str(sidecar / "src"), "/x"]
    assert "PYTHONPATH" not in plan(job(), cwd=Path.cwd(), cores=2, environ={"PYTHONPATH": "/x"}).env
    src = job(sidecar / "job.yaml", main__env=["PYTHONPATH=src"])  # a src layout: main.env's stays after it
    assert plan(src, cwd=Path.cwd(), cores=2, environ={"PYTHONPATH": "/x"}).env["PYTHONPATH"].split(":") == [
        str(sidecar / "src"),
        "src",
    ]
