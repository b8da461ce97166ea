"""Golden manifests (compared after parsing) and the structure every JobSet must have."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from pwdeploy import manifests
from pwdeploy.config import JobConfig, load_job
from tests.conftest import REPO

GOLDEN = REPO / "tests" / "golden"
CONFIGS = sorted((GOLDEN / "configs").glob("*.yaml"))
EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"


def _job(path: Path, **overrides: Any) -> JobConfig:
    return load_job(path, overrides, installed_jax=lambda: "0.10.2")


def _check_golden(rendered: str, golden: Path, update: bool) -> None:
    if update:
        golden.write_text(rendered, encoding="utf-8")
    assert golden.exists(), f"{golden} is missing; run pytest --update-goldens"
    expected = list(yaml.safe_load_all(golden.read_text(encoding="utf-8")))
    assert list(yaml.safe_load_all(rendered)) == expected, f"{golden.name} is stale; run pytest --update-goldens"


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_golden(config: Path, update_goldens: bool) -> None:
    rendered = manifests.to_yaml(manifests.build(_job(config)))
    _check_golden(rendered, GOLDEN / f"{config.stem}.yaml", update_goldens)


def test_example_manifests_checked_in_are_current(update_goldens: bool) -> None:
    rendered = manifests.to_yaml(manifests.build(_job(EXAMPLE)))
    _check_golden(rendered, REPO / "manifests" / "dp-example.yaml", update_goldens)


def test_render_is_deterministic() -> None:
    first = manifests.to_yaml(manifests.build(_job(CONFIGS[0])))
    assert all(manifests.to_yaml(manifests.build(_job(CONFIGS[0]))) == first for _ in range(3))


def _spec(obj: dict[str, Any], rj: str) -> dict[str, Any]:
    job = next(r for r in obj["spec"]["replicatedJobs"] if r["name"] == rj)
    return job  # type: ignore[no-any-return]


def _pod(obj: dict[str, Any], rj: str) -> dict[str, Any]:
    return _spec(obj, rj)["template"]["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_multi_slice_structure() -> None:
    job = _job(GOLDEN / "configs" / "multi-slice-v5p.yaml")
    (obj,) = manifests.build(job)
    worker = _spec(obj, "worker")
    assert worker["replicas"] == 2
    assert worker["template"]["spec"]["completions"] == worker["template"]["spec"]["parallelism"] == 1
    assert worker["template"]["spec"]["backoffLimit"] == 4
    head = _pod(obj, "pathways-head")
    proxy, rm = head["initContainers"]
    assert proxy["restartPolicy"] == rm["restartPolicy"] == "Always"
    assert "--xla_tpu_enable_async_collective_fusion=true" in proxy["args"]
    assert "--xla_dump_to=gs://bucket-b/hlo/" in proxy["args"]
    for container in (proxy, rm, _pod(obj, "worker")["containers"][0]):
        assert "--gcs_scratch_location=gs://bucket-b/pathways" in container["args"]
    assert "--instance_type=tpuv5:2x2x1" in rm["args"] and "--instance_count=2" in rm["args"]
    (main,) = head["containers"]
    env = _env(main)
    assert env["JAX_PLATFORMS"] == "proxy" and env["ENABLE_PATHWAYS_PERSISTENCE"] == "1"
    assert env["PWDEPLOY_DATA_WORKERS"] == "8"
    assert env["PWDEPLOY_PROFILE_DIR"] == "gs://bucket-b/profiles"
    assert main["securityContext"]["privileged"] is False
    shm = next(v for v in head["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "12Gi"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in main["volumeMounts"]
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "tpu-queue"
    assert obj["spec"]["failurePolicy"]["maxRestarts"] == 3
    assert head["serviceAccountName"] == "trainer-ksa" and head["priorityClassName"] == "high"


def test_headless_has_plain_servers_and_no_success_policy() -> None:
    (obj,) = manifests.build(_job(GOLDEN / "configs" / "headless-v4.yaml"))
    head = _pod(obj, "pathways-head")
    assert "initContainers" not in head
    assert [c["name"] for c in head["containers"]] == ["pathways-proxy", "pathways-rm"]
    assert all("restartPolicy" not in c for c in head["containers"])
    assert "successPolicy" not in obj["spec"]
    assert "--enable_gcs_olm=false" in head["containers"][1]["args"]
    worker = _spec(obj, "worker")["template"]["spec"]
    assert worker["completions"] == 2  # v4-16: 8 chips on 2 VMs


def test_sidecar_wiring() -> None:
    (obj,) = manifests.build(_job(GOLDEN / "configs" / "sidecar-v6e.yaml"))
    worker = _pod(obj, "worker")
    (sidecar,) = worker["initContainers"]
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["ports"] == [{"containerPort": 50051, "protocol": "TCP"}]
    shm_dir = _env(sidecar)["CLOUD_PATHWAYS_SIDECAR_SHM_DIRECTORY"]
    assert f"--cloud_pathways_sidecar_shm_directory={shm_dir}" in worker["containers"][0]["args"]
    proxy = _pod(obj, "pathways-head")["initContainers"][0]
    assert "--sidecar_name=external" in proxy["args"]


def test_elastic_slices() -> None:
    (obj,) = manifests.build(_job(GOLDEN / "configs" / "elastic-v5e.yaml"))
    proxy = _pod(obj, "pathways-head")["initContainers"][0]
    assert "--num_elastic_slices=1" in proxy["args"]
    assert "--gcs_scratch_location=gs://elastic-bucket/scratch" in proxy["args"]
    worker = _spec(obj, "worker")["template"]["spec"]
    assert worker["backoffLimit"] == 3 * 8  # max_slice_restarts x VMs per slice (v5litepod-32: 8 VMs)
    assert _pod(obj, "pathways-head")["containers"][0]["securityContext"] == {"privileged": True}


def test_images_pinned_to_one_version() -> None:
    (obj,) = manifests.build(_job(EXAMPLE))
    images = [c["image"] for c in _pod(obj, "pathways-head")["initContainers"]]
    images += [c["image"] for c in _pod(obj, "worker")["containers"]]
    assert all(i.endswith(":jax-0.10.2") for i in images)


ALL_GOLDENS = [*sorted(GOLDEN.glob("*.yaml")), REPO / "manifests" / "dp-example.yaml"]


@pytest.mark.parametrize("golden", ALL_GOLDENS, ids=lambda p: p.stem)
def test_goldens_pass_validation(golden: Path) -> None:
    from pwdeploy.validate import validate_objects

    objects = list(yaml.safe_load_all(golden.read_text(encoding="utf-8")))
    assert validate_objects(objects) == []


@pytest.mark.parametrize("version", ["0.10.1", "0.12.0"])
@pytest.mark.parametrize("golden", ALL_GOLDENS, ids=lambda p: p.stem)
def test_goldens_pass_the_jobset_crds(golden: Path, version: str) -> None:
    from tests.crd import validate_against_crd

    for obj in yaml.safe_load_all(golden.read_text(encoding="utf-8")):
        assert validate_against_crd(obj, version) == []


def test_sidecar_repository_without_a_pushed_image_is_a_clear_error(tmp_path: Path) -> None:
    from pwdeploy.errors import ConfigError

    config = GOLDEN / "configs" / "sidecar-v6e.yaml"
    job = _job(config, **{"sidecar.image": "", "sidecar.repository": "us-docker.pkg.dev/p/r/sidecar"})
    with pytest.raises(ConfigError, match="no pushed sidecar image matches") as err:
        manifests.build(job)
    assert err.value.field == "sidecar.repository" and "pwdeploy sidecar build --push" in str(err.value)
