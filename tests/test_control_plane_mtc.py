"""preflight's multi-tier-checkpointing rows against the real control plane, which holds what GKE's add-ons would
make: the CSIDriver objects, the driver's DaemonSet and service account, and CheckpointConfigurations (their CRD
stands in for the add-on's: tests/fixtures/crds). What it cannot show (a GKE version) is on the stub:
tests/test_readiness_mtc_stub.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.control_plane import ControlPlane, NodePool
from tests.control_plane.commands import HEAD_POOL, JOB_TESTS, V5P_2X2X1, job_flags, pwdeploy
from tests.crd import CRDS

pytestmark = JOB_TESTS

MACHINE = "ct5p-hightpu-4t"
TPU = NodePool("tpu-mtc", nodes=1, tpu=V5P_2X2X1, labels={"node.kubernetes.io/instance-type": MACHINE})
NAMESPACE = "gke-managed-checkpointing"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
CPC_PATH = "/apis/checkpointing.gke.io/v1/namespaces/default/checkpointconfigurations"


def csidriver(name: str, modes: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {"name": name},
        "spec": {"attachRequired": False, "podInfoOnMount": True, "volumeLifecycleModes": modes},
    }


def add_on_objects() -> list[dict[str, Any]]:
    """What the HighScaleCheckpointing and GcsFuseCsiDriver add-ons put in a cluster, as the rows read it."""
    never = {"pwdeploy.test/none": "none"}  # the DaemonSet places no pod: KWOK need not play the driver
    return [
        csidriver("multitier-checkpoint.csi.storage.gke.io", ["Ephemeral"]),
        csidriver("gcsfuse.csi.storage.gke.io", ["Persistent", "Ephemeral"]),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {
                "name": "gke-checkpointing-multitier-node",
                "namespace": NAMESPACE,
                "annotations": {"iam.gke.io/gcp-service-account": "nodes@p.iam.gserviceaccount.com"},
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "multitier-driver-x1", "namespace": NAMESPACE},
            "spec": {
                "selector": {"matchLabels": {"k8s-app": "high-scale-checkpointing"}},
                "template": {
                    "metadata": {"labels": {"k8s-app": "high-scale-checkpointing"}},
                    "spec": {"nodeSelector": never, "containers": [{"name": "driver", "image": "busybox:1.36"}]},
                },
            },
        },
    ]


def configuration(machine: str) -> dict[str, Any]:
    return {
        "apiVersion": "checkpointing.gke.io/v1",
        "kind": "CheckpointConfiguration",
        "metadata": {"name": "mtc-v5p", "namespace": "default"},
        "spec": {
            "cloudStorageBucketName": "mtc-backups",
            "nodeSelector": {"node.kubernetes.io/instance-type": machine},
            "tolerations": [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}],
            "inMemoryVolumeSize": "60Gi",
        },
    }


@pytest.fixture(scope="module")
def mtc_cluster(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    api = control_plane.api
    crd = yaml.safe_load((CRDS / "checkpointing.gke.io-checkpointconfigurations.yaml").read_text(encoding="utf-8"))
    api.apply(crd)
    api.wait(f"{CRD_PATH}/{crd['metadata']['name']}", _established, 30, "CRD established")
    objects = add_on_objects()
    for obj in objects:
        api.apply(obj)
    with control_plane.node_pools(HEAD_POOL, TPU):
        yield control_plane
    for obj in reversed(objects):
        api.delete(obj)
    api.delete(crd)


def _established(crd: dict[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def mtc_rows(plane: ControlPlane, *extra: str, user: bool = False) -> dict[str, dict[str, Any]]:
    flags = [*job_flags("mtc-a", "default" if not user else plane.user_namespace), "--mtc", *extra]
    flags += ["--sidecar-image", "us-docker.pkg.dev/p/r/sidecar:1"]
    answer = pwdeploy(plane, "preflight", *flags, "--cluster", "--no-gcs", "--no-check", "-o", "json", user=user)
    assert answer.stdout, answer.stderr
    found = {r["check"]: r for r in json.loads(answer.stdout)["checks"] if r["check"].startswith("mtc-")}
    assert set(found) == {"mtc-version", "mtc-driver", "mtc-configuration"}, found
    return found


def test_the_mtc_rows_read_what_the_add_ons_made(mtc_cluster: ControlPlane) -> None:
    api = mtc_cluster.api
    api.apply(configuration("ct6e-standard-4t"))  # another machine type: the slices' nodes are not selected
    try:
        rows = mtc_rows(mtc_cluster)
        assert rows["mtc-version"]["status"] == "warn" and "not a GKE version" in rows["mtc-version"]["detail"]
        assert rows["mtc-driver"]["status"] == "ok", rows["mtc-driver"]
        assert "DaemonSet multitier-driver-x1: 0 of 0 driver pods ready" in rows["mtc-driver"]["detail"]
        wrong = rows["mtc-configuration"]
        assert wrong["status"] == "failed" and f"machine type {MACHINE}" in wrong["detail"], wrong
        assert f"node.kubernetes.io/instance-type: {MACHINE}" in wrong["fix"]
        api.apply(configuration(MACHINE))
        right = mtc_rows(mtc_cluster)["mtc-configuration"]
        assert right["status"] == "ok", right
        assert "bucket 'mtc-backups'" in right["detail"] and "nodes@p.iam.gserviceaccount.com" in right["detail"]
        named = mtc_rows(mtc_cluster, "--mtc-backup-bucket", "gs://mtc-backups")["mtc-configuration"]
        assert named["status"] == "ok", named
        other = mtc_rows(mtc_cluster, "--mtc-backup-bucket", "gs://other-bucket")["mtc-configuration"]
        assert other["status"] == "warn" and "not mtc.backup_bucket (gs://other-bucket)" in other["detail"], other
        assert other["fix"].startswith("set mtc.backup_bucket: gs://mtc-backups")
    finally:
        api.delete(configuration(MACHINE))


def test_a_cluster_without_the_add_on_fails_the_driver_row(mtc_cluster: ControlPlane) -> None:
    api = mtc_cluster.api
    driver = csidriver("multitier-checkpoint.csi.storage.gke.io", ["Ephemeral"])
    api.delete(driver)
    try:
        row = mtc_rows(mtc_cluster)["mtc-driver"]
        assert row["status"] == "failed" and "HighScaleCheckpointing" in row["fix"], row
    finally:
        api.apply(driver)


def test_the_namespace_scoped_user_gets_rows_not_verified_not_a_crash(mtc_cluster: ControlPlane) -> None:
    rows = mtc_rows(mtc_cluster, user=True)
    assert rows["mtc-configuration"]["status"] == "not verified", rows["mtc-configuration"]
