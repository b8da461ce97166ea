"""The user's volumes: GCS FUSE buckets and ramdisks on main and the workers, from the file and from --volume, the
errors that name volumes[N], the rendered pods (the golden tests/golden/volumes-v5p.yaml holds the whole JobSet)
validated against the Kubernetes schemas, and what a local run says of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pwdeploy import identifiers as ids
from pwdeploy import manifests
from pwdeploy.cli import cli
from pwdeploy.config import JobConfig, load_job
from pwdeploy.config.model import Volume
from pwdeploy.errors import ConfigError
from pwdeploy.local.env import plan
from tests.conftest import REPO

BASE = {
    "name": "vols",
    "tpu.type": "v5p-8",
    "main.image": "img/train:1",
    "main.command": "python3 train.py",
    "storage.scratch": "gs://bucket/scratch",
}
GOLDEN = REPO / "tests" / "golden" / "configs" / "volumes-v5p.yaml"


def job(volumes: Any, **overrides: Any) -> JobConfig:
    return load_job(None, {**BASE, "volumes": volumes, **overrides}, installed_jax=lambda: "0.10.2")


def test_the_flag_form_and_the_file_form_are_one_volume() -> None:
    flags = job(["gcsfuse:gs://data/c4:/gcs/data@main,workers:ro", "ramdisk:16Gi:/ramdisk@workers"]).volumes
    mapping = {"gcsfuse": "data", "path": "/gcs/data/", "where": ["main", "workers"], "read_only": True}
    files = job([mapping, {"ramdisk": "16Gi", "path": "/ramdisk", "where": "workers"}]).volumes
    assert flags[1] == files[1] == Volume("ramdisk", "16Gi", "/ramdisk", ("workers",))
    assert flags[0] == Volume("gcsfuse", "data", "/gcs/data", ("main", "workers"), True, "only-dir=c4")
    assert files[0] == Volume("gcsfuse", "data", "/gcs/data", ("main", "workers"), True)
    assert flags[0].text == "gcsfuse:data:/gcs/data@main,workers:ro"


@pytest.mark.parametrize(
    ("volumes", "said"),
    [
        (["nfs:server:/a"], "'nfs' is not a volume kind"),
        (["gcsfuse:bkt:data"], "must be an absolute path"),
        (["ramdisk:16:/r"], "has no unit"),
        (["ramdisk:1Gi:/dev/shm"], "which is /dev/shm"),
        (["ramdisk:1Gi:/etc/cache"], "the system folder /etc"),
        (["gcsfuse:bkt:/a@head"], "say main, workers or both"),
        (["ramdisk:1Gi:/a", "gcsfuse:bkt:/a"], "two volumes are mounted at /a"),
        ([{"gcsfuse": "bkt", "path": "/a", True: "workers"}], "YAML reads as true"),
        ([{"gcsfuse": "bkt", "ramdisk": "1Gi", "path": "/a"}], "exactly one of gcsfuse or ramdisk"),
    ],
)
def test_a_bad_volume_names_it(volumes: Any, said: str) -> None:
    with pytest.raises(ConfigError) as refused:
        job(volumes)
    assert str(refused.value.field).startswith("volumes") and said in str(refused.value)


def test_a_headless_job_has_no_main_to_mount_in() -> None:
    with pytest.raises(ConfigError) as refused:
        job(["ramdisk:1Gi:/r"], headless=True)
    assert refused.value.field == "volumes[0]" and "headless" in str(refused.value)
    assert job(["ramdisk:1Gi:/r@workers"], headless=True).volumes


def pods(config: JobConfig) -> dict[str, dict[str, Any]]:
    (jobset,) = manifests.build(config)
    return {r["name"]: r["template"]["spec"]["template"] for r in jobset["spec"]["replicatedJobs"]}


def test_a_bucket_is_a_gcs_fuse_volume_on_a_pod_the_driver_serves() -> None:
    rendered = pods(job(["gcsfuse:gs://data/c4:/gcs/data:ro", "ramdisk:2Gi:/ramdisk@workers"]))
    head, worker = rendered[ids.HEAD_JOB], rendered[ids.WORKER_JOB]
    assert head["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"
    assert "gke-gcsfuse/volumes" not in worker.get("metadata", {}).get("annotations", {})  # a ramdisk alone
    (fuse,) = [v for v in head["spec"]["volumes"] if "csi" in v]
    assert fuse["csi"] == {
        "driver": "gcsfuse.csi.storage.gke.io",
        "volumeAttributes": {
            "bucketName": "data",
            "mountOptions": "implicit-dirs,only-dir=c4",
            "hostNetworkPodKSA": "true",
        },
        "readOnly": True,
    }
    main = next(c for c in head["spec"]["containers"] if c["name"] == ids.MAIN_CONTAINER)
    assert {"name": fuse["name"], "mountPath": "/gcs/data", "readOnly": True} in main["volumeMounts"]
    (ramdisk,) = [v for v in worker["spec"]["volumes"] if v["name"].startswith("user-ramdisk")]
    assert ramdisk["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}


def test_the_volumes_job_renders_and_validates(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["render", "-f", str(GOLDEN)])
    assert result.exit_code == 0, result.output
    worker = pods(load_job(GOLDEN, {}, installed_jax=lambda: "0.10.2"))[ids.WORKER_JOB]["spec"]
    sidecar = next(c for c in worker["initContainers"] if c["name"] == ids.SIDECAR_CONTAINER)
    assert {"/gcs/datasets", "/ramdisk"} <= {m["mountPath"] for m in sidecar["volumeMounts"]}


def test_a_local_run_says_it_mounts_none(tmp_path: Path) -> None:
    notes = plan(job(["gcsfuse:data:/gcs/data", "ramdisk:1Gi:/r@workers"]), cwd=tmp_path, cores=2).notes
    assert notes == (
        "volume gcsfuse:data:/gcs/data is not mounted in a local run: the program finds /gcs/data only if this "
        "machine has it",
    )
