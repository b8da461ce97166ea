"""Multi-tier checkpointing in the config and the rendered JobSet: mtc.* checked as Cluster Toolkit checks
--gke-mtc-ramdisk-dir, the MTC CSI volume on the workers only, the local directory in main's env."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pwdeploy import identifiers as ids
from pwdeploy import manifests
from pwdeploy.config import JobConfig, load_job
from pwdeploy.errors import ConfigError, ConfigErrors
from tests.conftest import REPO

CONFIG = REPO / "tests" / "golden" / "configs" / "mtc-v5p.yaml"
SIDECAR = "us-docker.pkg.dev/p/r/sidecar:1"


def _load(overrides: dict[str, Any], path: Path = CONFIG) -> JobConfig:
    return load_job(path, overrides, installed_jax=lambda: "0.10.2")


def errors(overrides: dict[str, Any]) -> list[str]:
    try:
        _load(overrides)
    except ConfigErrors as exc:
        return [str(e) for e in exc.errors]
    except ConfigError as exc:
        return [str(exc)]
    return []


@pytest.mark.parametrize(
    ("directory", "problem"),
    [
        ("relative/path", "must be an absolute path"),
        ("/", "cannot be the root directory"),
        ("//", "cannot be the root directory"),
        ("/dev", "system directory or inside one (/dev)"),
        ("/proc/sys", "system directory or inside one (/proc)"),
        ("/etc/kubernetes", "(/etc)"),
        ("/usr/local/bin", "(/usr)"),
        ("/lib64", "(/lib64)"),
        ("/tmp/../sbin/x", "(/sbin)"),  # cleaned as Cluster Toolkit cleans it (path.Clean) before the check
        ("/dev/shm", "(/dev)"),
        (ids.SIDECAR_SHM_DIR, "already where the workers mount the sidecar's shared memory"),
        (ids.SIDECAR_SHM_DIR + "/", "already where the workers mount the sidecar's shared memory"),
    ],
)
def test_the_ramdisk_directory_is_refused_where_cluster_toolkit_refuses_it(directory: str, problem: str) -> None:
    (found,) = errors({"mtc.ramdisk_dir": directory})
    assert found.startswith("mtc.ramdisk_dir: ") and problem in found


@pytest.mark.parametrize("directory", ["/tmp/mtc_checkpoints", "/local", "/data/ramdisk", "/libx", "/devices"])
def test_a_folder_of_its_own_is_a_ramdisk_directory(directory: str) -> None:
    assert errors({"mtc.ramdisk_dir": directory}) == []
    assert _load({"mtc.ramdisk_dir": directory}).mtc.ramdisk_dir == directory


def test_without_mtc_the_ramdisk_directory_is_not_checked() -> None:
    assert errors({"mtc.enabled": False, "mtc.ramdisk_dir": "/usr"}) == []


def test_mtc_needs_the_sidecar() -> None:
    (found,) = errors({"sidecar.image": None})
    assert found.startswith("mtc.enabled: needs the colocated-Python sidecar")
    assert "sidecar.image" in found
    assert errors({"sidecar.image": None, "sidecar.repository": "us-docker.pkg.dev/p/r/sidecar"}) == []


def test_orbax_takes_exactly_one_backup_interval() -> None:
    (both,) = errors({"mtc.backup_interval_steps": 100})
    assert both.startswith("mtc.backup_interval_steps: ") and "Exactly one of" in both
    default = _load({"mtc.backup_interval_minutes": None}).mtc
    assert (default.backup_interval_minutes, default.backup_interval_steps) == (30, None)
    steps = _load({"mtc.backup_interval_minutes": None, "mtc.backup_interval_steps": 100}).mtc
    assert (steps.backup_interval_minutes, steps.backup_interval_steps) == (None, 100)
    (zero,) = errors({"mtc.backup_interval_minutes": 0})
    assert zero.startswith("mtc.backup_interval_minutes: must be an integer >= 1")


def _pod(obj: dict[str, Any], job: str) -> dict[str, Any]:
    (found,) = [rj for rj in obj["spec"]["replicatedJobs"] if rj["name"] == job]
    pod: dict[str, Any] = found["template"]["spec"]["template"]["spec"]
    return pod


def _containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for section in ("initContainers", "containers") for c in pod.get(section, [])}


def _mounts(container: dict[str, Any]) -> dict[str, str]:
    return {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}


def test_the_mtc_volume_is_mounted_in_the_sidecar_and_pathways_worker_only() -> None:
    (obj,) = manifests.build(_load({"mtc.ramdisk_dir": "/local"}))
    worker, head = _pod(obj, ids.WORKER_JOB), _pod(obj, ids.HEAD_JOB)
    volumes = {v["name"]: v for v in worker["volumes"]}
    assert volumes[ids.MTC_VOLUME] == {"name": ids.MTC_VOLUME, "csi": {"driver": ids.MTC_CSI_DRIVER}}
    mounted = {name for name, c in _containers(worker).items() if ids.MTC_VOLUME in _mounts(c)}
    assert mounted == {ids.SIDECAR_CONTAINER, ids.WORKER_CONTAINER}
    assert {_mounts(c)[ids.MTC_VOLUME] for name, c in _containers(worker).items() if name in mounted} == {"/local"}
    assert all(ids.MTC_VOLUME not in str(v) for v in head.get("volumes", []))
    assert all(ids.MTC_VOLUME not in _mounts(c) for c in _containers(head).values())


def test_main_is_told_the_local_directory_and_the_backup_interval() -> None:
    (obj,) = manifests.build(_load({"mtc.ramdisk_dir": "/local"}))
    main = _containers(_pod(obj, ids.HEAD_JOB))[ids.MAIN_CONTAINER]
    env = {e["name"]: e.get("value") for e in main["env"]}
    assert env[ids.MTC_DIR_ENV] == "/local"
    assert env[ids.MTC_BACKUP_MINUTES_ENV] == "15"
    assert ids.MTC_BACKUP_STEPS_ENV not in env


def test_without_mtc_nothing_of_it_is_rendered() -> None:
    (obj,) = manifests.build(_load({"mtc.enabled": False}))
    text = str(obj)
    assert ids.MTC_CSI_DRIVER not in text and ids.MTC_DIR_ENV not in text and ids.MTC_VOLUME not in text


def test_sidecar_requests_are_rendered_as_requests_without_limits() -> None:
    (obj,) = manifests.build(_load({"sidecar.memory": "24Gi", "sidecar.cpu": None}))
    sidecar = _containers(_pod(obj, ids.WORKER_JOB))[ids.SIDECAR_CONTAINER]
    assert sidecar["resources"] == {"requests": {"memory": "24Gi"}}
    (bare,) = manifests.build(_load({"sidecar.memory": None, "sidecar.cpu": None}))
    assert "resources" not in _containers(_pod(bare, ids.WORKER_JOB))[ids.SIDECAR_CONTAINER]


def test_the_runtime_passes_the_jobs_mtc_settings_to_orbax() -> None:
    from pwdeploy import runtime
    from pwdeploy.envcontract import job_env

    options = runtime.mtc_options(job_env(_load({})))
    assert options == {
        "local_checkpoint_directory": Path("/tmp/mtc_checkpoints"),
        "use_colocated_python": True,
        "run_name": "mtc",
        "backup_interval_minutes": 15,
    }
    steps = runtime.mtc_options(job_env(_load({"mtc.backup_interval_minutes": None, "mtc.backup_interval_steps": 9})))
    assert steps is not None and steps["backup_interval_steps"] == 9 and "backup_interval_minutes" not in steps
    assert runtime.mtc_options(job_env(_load({"mtc.enabled": False}))) is None
