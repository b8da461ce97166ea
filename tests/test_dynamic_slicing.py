"""TPU7x dynamic slicing (tpu.dynamic_slicing): where the config refuses it, what the workers then carry, and the
``dynamic-slicing`` readiness row against StubKubeApiServer (a loopback stub, not an API server)."""

from __future__ import annotations

from typing import Any

import pytest

from pwdeploy import manifests
from pwdeploy.config import JobConfig, load_job
from pwdeploy.errors import ConfigError
from pwdeploy.kube.seam import Kube
from pwdeploy.readiness import check_cluster
from pwdeploy.report import PreflightRow, Status
from tests.kube_objects import node
from tests.kube_stub import StubKubeApiServer

SLICED = {
    "name": "ds",
    "namespace": "default",
    "tpu.type": "tpu7x-256",  # 4x4x8: a super-slice of two sub-blocks
    "tpu.dynamic_slicing": True,
    "tpu.capacity": "reservation",
    "tpu.reservation": "all-capacity",
    "scheduling.queue": "tpu",
    "main.image": "r.example/p/img:1",
    "main.command": "python3 train.py",
    "storage.scratch": "gs://bucket/scratch",
}
PARTITION = "cloud.google.com/gke-tpu-partition-4x4x8-id"


def _job(**overrides: Any) -> JobConfig:
    return load_job(None, {**SLICED, **overrides}, installed_jax=lambda: "0.10.2")


def _worker(job: JobConfig) -> dict[str, Any]:
    (jobset,) = [o for o in manifests.build(job) if o["kind"] == "JobSet"]
    (worker,) = [r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "worker"]
    found: dict[str, Any] = worker
    return found


# ------------------------------------------------------------------------------------------------ the config


@pytest.mark.parametrize(
    ("overrides", "field", "says"),
    [
        ({"tpu.type": "v5p-128"}, "tpu.dynamic_slicing", "tpu7x"),
        ({"tpu.type": "tpu7-128"}, "tpu.dynamic_slicing", "not tpu7"),
        ({"tpu.type": "tpu7x-2"}, "tpu.dynamic_slicing", r"1x1x1 slice \(tpu7x-2\) is not one"),
        ({"tpu.capacity": "spot", "tpu.reservation": None}, "tpu.dynamic_slicing", "not capacity spot"),
        ({"tpu.capacity": "on-demand", "tpu.reservation": None}, "tpu.dynamic_slicing", "All Capacity mode"),
        ({"scheduling.queue": None}, "scheduling.queue", "topology-aware scheduling"),
        ({"tpu.node_selector": {"cloud.google.com/gke-nodepool": "sb-1"}}, None, "spans the sub-blocks"),
    ],
)
def test_refused_where_gke_does_not_offer_it(overrides: dict[str, Any], field: str | None, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as err:
        _job(**overrides)
    assert err.value.field == (field or "tpu.node_selector.cloud.google.com/gke-nodepool")
    assert err.value.exit_code == 2


@pytest.mark.parametrize("tpu_type", ["tpu7x-8", "tpu7x-32", "tpu7x-128", "tpu7x-4x8x12"])
def test_sub_and_super_slices_are_accepted(tpu_type: str) -> None:
    assert _job(**{"tpu.type": tpu_type}).tpu.dynamic_slicing


# --------------------------------------------------------------------------------------------- the manifests


def test_one_slice_requires_one_partition_of_its_topology() -> None:
    worker = _worker(_job(**{"tpu.slices": 1}))
    pod = worker["template"]["spec"]["template"]
    assert pod["metadata"]["annotations"] == {
        "cloud.google.com/gke-tpu-slice-topology": "4x4x8",
        "kueue.x-k8s.io/podset-required-topology": PARTITION,
    }
    assert pod["spec"]["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu7x",
        "cloud.google.com/reservation-name": "all-capacity",
    }
    assert "metadata" not in worker["template"]  # no node-pool exclusive topology: a slice spans sub-blocks


def test_several_slices_each_require_a_partition_of_their_vms() -> None:
    annotations = _worker(_job(**{"tpu.slices": 3}))["template"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {
        "cloud.google.com/gke-tpu-slice-topology": "4x4x8",
        "kueue.x-k8s.io/podset-slice-required-topology": PARTITION,
        "kueue.x-k8s.io/podset-slice-size": "32",
    }


def test_without_dynamic_slicing_the_static_shape_and_placement_policy_stay() -> None:
    worker = _worker(_job(**{"tpu.dynamic_slicing": False}))
    pod = worker["template"]["spec"]["template"]
    assert "metadata" not in pod
    assert pod["spec"]["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "4x4x8"
    assert pod["spec"]["nodeSelector"]["cloud.google.com/placement-policy-name"] == ("tpu7x-256-4x4x8-placement-policy")
    assert worker["template"]["metadata"]["annotations"] == {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"
    }


# ---------------------------------------------------------------------------------------------- readiness


def _kueue(
    stub: StubKubeApiServer, *, levels: list[str] | None = None, controller: str = "accelerator.gke.io/slice"
) -> None:
    stub.kueue_version = "v1beta2"
    stub.put("localqueues", {"metadata": {"name": "tpu", "namespace": "default"}, "spec": {"clusterQueue": "cq"}})
    if levels is not None:
        spec = {"levels": [{"nodeLabel": label} for label in levels]}
        stub.put("topologies", {"metadata": {"name": "tpu7x-topology", "namespace": ""}, "spec": spec})
    stub.put(
        "admissionchecks", {"metadata": {"name": "slice", "namespace": ""}, "spec": {"controllerName": controller}}
    )


def _row(job: JobConfig, kube: Kube) -> PreflightRow:
    (found,) = [r for r in check_cluster(job, kube) if r.id == "dynamic-slicing"]
    return found


def test_no_row_without_dynamic_slicing_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    assert "dynamic-slicing" not in [r.id for r in check_cluster(_job(**{"tpu.dynamic_slicing": False}), kube)]


def test_a_ready_cluster_is_ok_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    stub.version = {"major": "1", "minor": "35+", "gitVersion": "v1.35.2-gke.1842000"}
    _kueue(stub, levels=["cloud.google.com/gke-tpu-partition-4x4x4-id", PARTITION, "kubernetes.io/hostname"])
    row = _row(_job(), kube)
    assert row.status is Status.OK, row.message
    assert row.message == (
        "GKE v1.35.2-gke.1842000 forms dynamic super-slices; Kueue Topology tpu7x-topology; slice admission check "
        f"slice with level {PARTITION}"
    )
    assert stub.sent("GET", "/apis/kueue.x-k8s.io/v1beta2/topologies")


@pytest.mark.parametrize(
    ("git_version", "tpu_type", "says"),
    [
        ("v1.35.2-gke.1841999", "tpu7x-256", "older than 1.35.2-gke.1842000, which a dynamic super-slice needs"),
        ("v1.35.9-gke.100", "tpu7x-32", "older than 1.36.0-gke.3712000, which a dynamic sub-slice needs"),
        ("v1.36.1", "tpu7x-256", "is not GKE's"),
    ],
)
def test_an_older_or_other_control_plane_fails_against_stub(
    stub: StubKubeApiServer, kube: Kube, git_version: str, tpu_type: str, says: str
) -> None:
    stub.version = {"major": "1", "minor": "35", "gitVersion": git_version}
    _kueue(stub, levels=[PARTITION])
    row = _row(_job(**{"tpu.type": tpu_type}), kube)
    assert row.status is Status.FAILED and says in row.message
    assert row.fix and "--dynamic-slicing" in row.fix


def test_a_sub_slice_on_a_new_enough_gke_is_judged_by_kueue_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    stub.version = {"major": "1", "minor": "36+", "gitVersion": "v1.36.0-gke.3712000"}
    _kueue(stub, levels=["cloud.google.com/gke-tpu-partition-2x2x4-id"])
    row = _row(_job(**{"tpu.type": "tpu7x-32"}), kube)
    assert row.status is Status.OK and "forms dynamic sub-slices" in row.message


@pytest.mark.parametrize(
    ("levels", "controller", "status", "says"),
    [
        (None, "accelerator.gke.io/slice", Status.FAILED, "Kueue has no Topology"),
        ([PARTITION], "kueue.x-k8s.io/provisioning-request", Status.FAILED, "no AdmissionCheck is run by"),
        (["kubernetes.io/hostname"], "accelerator.gke.io/slice", Status.WARN, f"no Topology has the level {PARTITION}"),
    ],
)
def test_what_kueue_lacks_against_stub(
    stub: StubKubeApiServer, kube: Kube, levels: list[str] | None, controller: str, status: Status, says: str
) -> None:
    stub.version = {"major": "1", "minor": "35+", "gitVersion": "v1.35.4-gke.2000000"}
    _kueue(stub, levels=levels, controller=controller)
    row = _row(_job(), kube)
    assert row.status is status and says in row.message
    assert row.fix and "docs/capacity.md" in row.fix


def test_without_kueue_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    stub.version = {"major": "1", "minor": "35+", "gitVersion": "v1.35.4-gke.2000000"}
    stub.kueue_version = None
    row = _row(_job(), kube)
    assert row.status is Status.FAILED and "Kueue is not installed" in row.message


def test_unreadable_kueue_objects_are_not_verified_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    stub.version = {"major": "1", "minor": "35+", "gitVersion": "v1.35.4-gke.2000000"}
    _kueue(stub, levels=[PARTITION])
    stub.forbid("list", "topologies")
    row = _row(_job(), kube)
    assert row.status is Status.NOT_VERIFIED and "not readable" in row.message


def test_tpu_capacity_counts_the_sub_block_pools_together_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    """A 4x4x8 slice (32 VMs) spans two 4x4x4 sub-block pools of 16: no one pool holds it, both together do."""
    labels = {"cloud.google.com/gke-tpu-accelerator": "tpu7x", "cloud.google.com/reservation-name": "all-capacity"}
    for pool in ("sb-0", "sb-1"):
        for i in range(16):
            stub.add_node(
                node(
                    f"{pool}-{i}",
                    {**labels, "cloud.google.com/gke-tpu-topology": "4x4x4", "cloud.google.com/gke-nodepool": pool},
                    {"google.com/tpu": "4", "cpu": "200", "memory": "700Gi"},
                    kubelet="v1.35.2-gke.1842000",
                )
            )
    (row,) = [r for r in check_cluster(_job(**{"tpu.slices": 1}), kube) if r.id == "tpu-capacity"]
    assert row.status is Status.OK, row.message
    assert row.message == (
        "2 node pools of 16 x tpu7x nodes labelled cloud.google.com/reservation-name=all-capacity (Ready, "
        "schedulable, 4 google.com/tpu free each): 32 nodes in all; the job needs 32 nodes (1 x 32), from any of these "
        "pools"
    )
    (row,) = [r for r in check_cluster(_job(**{"tpu.slices": 2}), kube) if r.id == "tpu-capacity"]
    assert row.status is Status.WARN and "needs 64 nodes (2 x 32)" in row.message
    assert row.fix == "add sub-block node pools of tpu7x until 64 nodes are Ready"
