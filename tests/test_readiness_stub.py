"""Cluster readiness (`preflight --cluster`, and `submit` before it applies) against StubKubeApiServer, a loopback
stub, not an API server: every check's ok / warn / failed / not verified, the requests one run sends, and the
requests the concurrent checks have in flight at once. The JobSet CRDs are the released ones,
vendored in tests/fixtures/crds."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from pwdeploy.cluster.nodes import pod_requests
from pwdeploy.config import JobConfig, load_job
from pwdeploy.kube.seam import Kube
from pwdeploy.readiness import check_cluster, unknown_fields
from pwdeploy.readiness.permissions import needed_for
from pwdeploy.report import PreflightRow, Status
from tests import gcs_emulator as emulator
from tests.conftest import REPO, ClusterCli
from tests.crd import CRD_VERSIONS, crd_object
from tests.gcs_emulator import GcsEmulator
from tests.kube_objects import node, small_job
from tests.kube_stub import StubKubeApiServer

gcs_emulator = emulator.gcs_emulator
emulator_env = emulator.emulator_env

EXAMPLE = str(REPO / "examples" / "data_parallel" / "job.yaml")
V5P = {"cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice", "cloud.google.com/gke-tpu-topology": "2x2x1"}
POOL = "cloud.google.com/gke-nodepool"
CPU_POOL = {POOL: "cpu-np"}
KUBELET = "v1.31.4-gke.1256000"
TPU_NODE = {"google.com/tpu": "4", "cpu": "207", "memory": "440Gi"}
BIG_CPU_NODE = {"cpu": "63770m", "memory": "250Gi"}  # an n2-standard-64's allocatable, roughly
CHECK_NAMES = [
    "kubernetes-version",
    "jobset-api",
    "controllers",
    "namespace",
    "queue",
    "tpu-capacity",
    "head-capacity",
    "permissions",
]


def ready(stub: StubKubeApiServer, tpu_nodes: int = 2) -> StubKubeApiServer:
    """A cluster that can run ``small_job()``: a TPU node pool of one node per slice of v5p-8 and a large CPU
    node, every kubelet at the control plane's version."""
    for i in range(tpu_nodes):
        stub.add_node(node(f"tpu-{i}", {**V5P, POOL: f"tpu-np-{i}"}, TPU_NODE, kubelet=KUBELET))
    stub.add_node(node("cpu-0", CPU_POOL, BIG_CPU_NODE, kubelet=KUBELET))
    stub.put("deployments", controller_deployment("jobset-system", "jobset", "v0.12.0"))
    return stub


def controller_deployment(namespace: str, component: str, version: str) -> dict[str, object]:
    """A controller's Deployment as its release manifests install it (the image tag is the release)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"{component}-controller-manager", "namespace": namespace},
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": "manager", "image": f"registry.k8s.io/{component}/{component}:{version}"}]
                }
            }
        },
    }


def rows(job: JobConfig, kube: Kube) -> dict[str, PreflightRow]:
    found = check_cluster(job, kube)
    assert len({r.id for r in found}) == len(found), "one row per check here"
    return {r.id: r for r in found}


# ---------------------------------------------------------------------------------------------- a ready cluster


def test_ready_cluster_every_check_ok_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    ready(stub)
    found = check_cluster(small_job(), kube)
    assert [r.id for r in found] == CHECK_NAMES
    assert {r.status for r in found} == {Status.OK}, [(r.id, r.message) for r in found]
    assert {r.where for r in found} == {"stub"}
    by_name = {r.id: r for r in found}
    assert by_name["kubernetes-version"].message == (
        "v1.31.4-gke.1256000: native sidecars are on; head node kubelets v1.31.4-gke.1256000"
    )
    assert by_name["tpu-capacity"].message == (
        "2 node pools of 1 x tpu-v5p-slice 2x2x1 nodes (Ready, schedulable, 4 google.com/tpu free each); the job needs "
        "2 pools (one per slice) of 1 node"
    )
    assert by_name["head-capacity"].message == (
        "1 of 1 Ready node(s) with cloud.google.com/gke-nodepool=cpu-np have the head pod's 48 CPU and 232Gi "
        "memory free"
    )
    assert (
        "create, patch, get, list, watch, delete jobsets.jobset.x-k8s.io; list, watch jobs.batch; "
        "list, watch, delete pods; " in (by_name["permissions"].message)
    )


def test_one_run_sends_read_only_requests_and_counts_them_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    ready(stub)
    check_cluster(small_job({"scheduling.queue": "tpu", "main.secret_env": {"HF_TOKEN": "hf/token"}}), kube)
    gets = sorted(r.path for r in stub.requests if r.method == "GET")
    posts = [r for r in stub.requests if r.method == "POST"]
    (dry_run,) = [r for r in stub.requests if r.method == "PATCH"]  # jobset-api: the controller's webhooks answer
    assert dry_run.q("dryRun") == "All" and dry_run.path.endswith("/jobsets/pwdeploy-probe")
    assert gets == sorted(
        [
            "/version",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobsets.jobset.x-k8s.io",
            "/api/v1/namespaces/default",
            "/apis/kueue.x-k8s.io",
            "/apis/kueue.x-k8s.io/v1beta1/namespaces/default/localqueues/tpu",
            "/apis/kueue.x-k8s.io/v1beta1/namespaces/default/localqueues",
            "/api/v1/nodes",
            "/api/v1/nodes",
            "/api/v1/pods",
            "/api/v1/namespaces/default/secrets/hf",
            "/apis/apps/v1/namespaces/jobset-system/deployments/jobset-controller-manager",
            "/apis/apps/v1/namespaces/kueue-system/deployments/kueue-controller-manager",
        ]
    )
    reviews = len(needed_for(queue=True, queued=False))  # this job names a queue: Kueue's Workloads too
    assert {r.path for r in posts} == {"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"}
    assert len(posts) == reviews
    assert [w for w in stub.writes() if w.q("dryRun") != "All"] == []
    assert kube.sent == len(stub.requests) == len(gets) + reviews + 1


def test_checks_run_concurrently_against_stub(
    stub: StubKubeApiServer, kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example job's checks send their requests side by side: the stub counts the requests in flight at once.
    One worker never has two in flight; with eight, each request is held (up to 1 s) until two overlap, so the
    count shows the overlap without timing anything."""
    ready(stub)
    job = load_job(Path(EXAMPLE), installed_jax=lambda: "0.10.2")
    in_flight = {"now": 0, "most": 0}
    arrived = threading.Condition()
    serve = stub._serve
    hold = False

    def counting(handler: Any) -> None:
        with arrived:
            in_flight["now"] += 1
            in_flight["most"] = max(in_flight["most"], in_flight["now"])
            arrived.notify_all()
            if hold:
                arrived.wait_for(lambda: in_flight["most"] > 1, timeout=1)  # once seen, no more holding
        try:
            serve(handler)
        finally:
            with arrived:
                in_flight["now"] -= 1

    monkeypatch.setattr(stub, "_serve", counting)
    most = {}
    for name, workers in (("sequential", 1), ("concurrent", 8)):
        hold = workers > 1
        in_flight["most"] = 0
        check_cluster(job, kube, max_workers=workers)
        most[name] = in_flight["most"]
    assert len(stub.requests) == 2 * (8 + len(needed_for(queue=False, queued=False)))  # 7 reads, a dry run, the reviews
    assert most["sequential"] == 1 and most["concurrent"] >= 2, most


def test_each_check_name_is_written_once_in_the_package() -> None:
    """One check, one module, one name: a renamed check cannot leave a stale spelling behind. (diagnose's cause
    ids, e.g. "tpu-capacity", are another contract: its package is not searched.)"""
    package = REPO / "pwdeploy"
    files = [*(package / "readiness").rglob("*.py"), *(package / "cluster").glob("*.py")]
    sources = "".join(p.read_text(encoding="utf-8") for p in files)
    for name in {*CHECK_NAMES, "secret"}:
        declared = sources.count(f'Check("{name}"') + sources.count(f'NAME = "{name}"')
        assert declared == 1, name
        if "-" in name:  # a one-word name ("namespace") is also a field name elsewhere
            assert sources.count(f'"{name}"') == 1, name


# ---------------------------------------------------------------------------------------------- kubernetes-version


def test_kubernetes_before_1_29_fails_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    stub.version = {"major": "1", "minor": "28+", "gitVersion": "v1.28.15-gke.1"}
    row = rows(small_job(), kube)["kubernetes-version"]
    assert row.status is Status.FAILED and row.message.startswith("v1.28.15-gke.1: the head's proxy and resource")
    assert "on by default from 1.29" in row.message and row.fix is not None and "upgrade" in row.fix


def test_head_pool_kubelet_before_1_29_fails_with_the_upgrade_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    """The control plane is 1.31; the head's node pool lags at 1.28, where native sidecars block as init
    containers."""
    ready(stub, tpu_nodes=2)
    stub.add_node(node("cpu-0", CPU_POOL, BIG_CPU_NODE, kubelet="v1.28.15-gke.1"))
    stub.add_node(node("cpu-old-down", CPU_POOL, BIG_CPU_NODE, kubelet="v1.27.1", ready=False))  # cannot run the head
    row = rows(small_job(), kube)["kubernetes-version"]
    assert row.status is Status.FAILED
    assert row.message == (
        "v1.31.4-gke.1256000: native sidecars are on; kubelet v1.28.15-gke.1 on 1 of 1 head node(s) (node pool "
        "cpu-np): before 1.29 it runs native sidecars as init containers that never finish, so the head pods stay "
        "in Init"
    )
    assert row.fix == "upgrade the node pool: gcloud container node-pools upgrade cpu-np --cluster CLUSTER"
    stub.add_node(node("cpu-1", CPU_POOL, BIG_CPU_NODE, kubelet=KUBELET))
    mixed = rows(small_job(), kube)["kubernetes-version"]
    assert mixed.status is Status.WARN and "kubelet v1.28.15-gke.1 on 1 of 2 head node(s)" in mixed.message
    assert len(stub.sent("GET", "/api/v1/nodes")) == 4, "each node list asked once per run"


def test_worker_kubelets_are_checked_when_workers_have_native_sidecars_against_stub(
    stub: StubKubeApiServer, kube: Kube
) -> None:
    ready(stub, tpu_nodes=1)
    stub.add_node(node("tpu-1", {**V5P, POOL: "tpu-np-1"}, TPU_NODE, kubelet="v1.28.3"))
    assert rows(small_job(), kube)["kubernetes-version"].status is Status.OK  # no sidecar: workers have none
    row = rows(small_job({"sidecar.image": "us-docker.pkg.dev/p/r/sidecar:1"}), kube)["kubernetes-version"]
    assert row.status is Status.WARN
    assert "; worker node kubelets" not in row.message
    assert "kubelet v1.28.3 on 1 of 2 worker node(s) (node pool tpu-np-1)" in row.message
    assert row.fix == "upgrade the node pool: gcloud container node-pools upgrade tpu-np-1 --cluster CLUSTER"


def test_refused_credentials_fail_once_and_skip_the_rest_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    stub.tokens = {"another": "carol"}
    found = check_cluster(small_job(), kube)
    assert found[0].status is Status.FAILED and "401 Unauthorized" in found[0].message
    assert [r.status for r in found[1:]] == [Status.NOT_VERIFIED] * 7
    assert found[1].message == "not checked: the API server did not answer the version request"
    assert [r.path for r in stub.requests] == ["/version"]


def test_forbidden_version_is_not_verified_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    stub.fail("GET", "^/version$", 403)
    assert rows(small_job(), kube)["kubernetes-version"].status is Status.NOT_VERIFIED


# ---------------------------------------------------------------------------------------------- jobset-api


@pytest.mark.parametrize("version", CRD_VERSIONS)
def test_released_crds_know_every_rendered_field_against_stub(
    stub: StubKubeApiServer, kube: Kube, version: str
) -> None:
    stub.crd_version = version
    job = small_job({"sidecar.image": "us-docker.pkg.dev/p/r/sidecar:1", "tpu.elastic_slices": 1})
    row = rows(job, kube)["jobset-api"]
    assert row.status is Status.OK, row.message


def test_a_crd_without_a_rendered_field_fails_naming_it_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    crd = crd_object("0.10.1")
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    del spec["properties"]["failurePolicy"]["properties"]["restartStrategy"]  # as JobSet releases before it
    stub.jobset_crd = crd
    row = rows(small_job(), kube)["jobset-api"]
    assert row.status is Status.FAILED
    assert (
        row.message
        == "the installed JobSet CRD does not know what pwdeploy renders: spec.failurePolicy.restartStrategy"
    )
    assert row.fix is not None and "releases/download/v0.10.1/manifests.yaml" in row.fix


def test_a_crd_enum_without_the_rendered_value_fails_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    crd = crd_object("0.10.1")
    policy = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "failurePolicy"
    ]
    from pwdeploy import manifests

    (rendered,) = manifests.build(small_job())
    value = rendered["spec"]["failurePolicy"]["restartStrategy"]
    policy["properties"]["restartStrategy"]["enum"].remove(value)
    stub.jobset_crd = crd
    row = rows(small_job(), kube)["jobset-api"]
    assert row.status is Status.FAILED and f"spec.failurePolicy.restartStrategy: {value} (known: " in row.message


def test_unknown_fields_names_list_items_by_name() -> None:
    schema: dict[str, Any] = {
        "properties": {
            "items": {"type": "array", "items": {"properties": {"name": {}, "mode": {"enum": ["a"]}}}},
            "labels": {"additionalProperties": {"type": "string"}},
        },
    }
    value = {"items": [{"name": "x", "mode": "b", "extra": 1}], "labels": {"k": "v"}, "other": 2}
    assert list(unknown_fields(value, schema)) == ["items[x].mode: b (known: a)", "items[x].extra", "other"]


def test_jobset_not_installed_fails_with_the_install_command_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    stub.jobset_installed = False
    row = rows(small_job(), kube)["jobset-api"]
    assert row.status is Status.FAILED and row.message == "the JobSet API (jobset.x-k8s.io/v1alpha2) is not installed"
    assert row.fix is not None and row.fix.startswith("install the JobSet controller: kubectl apply --server-side")


def test_crd_forbidden_falls_back_to_discovery_not_verified_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    stub.forbid("get", "customresourcedefinitions")
    row = rows(small_job(), kube)["jobset-api"]
    assert row.status is Status.NOT_VERIFIED
    assert row.message.startswith("jobset.x-k8s.io/v1alpha2 is served; whether it knows every rendered field is not")
    assert stub.sent("GET", "/apis/jobset.x-k8s.io/v1alpha2"), "discovery asked"
    stub.jobset_installed = False
    assert rows(small_job(), kube)["jobset-api"].status is Status.FAILED


# ---------------------------------------------------------------------------------------------- namespace, queue


def test_namespace_rows_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    missing = rows(small_job(namespace="ghost"), kube)["namespace"]
    assert (missing.status, missing.message) == (Status.FAILED, "namespace 'ghost' does not exist")
    assert missing.fix == "kubectl create namespace ghost, or set `namespace` in the job"
    stub.forbid("get", "namespaces")  # common for users bound to one namespace
    hidden = rows(small_job(), kube)["namespace"]
    assert (hidden.status, hidden.message) == (Status.NOT_VERIFIED, "this identity may not read namespace 'default'")


def test_namespace_defaults_to_the_contexts_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    row = rows(small_job(namespace=None), kube)["namespace"]
    assert (row.status, row.message) == (Status.OK, "namespace 'default' exists")


def test_queue_rows_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    assert rows(small_job(), kube)["queue"].message == "scheduling.queue is not set: Kueue does not queue this job"
    stub.kueue_version = "v1beta2"
    for name in ("cpu-queue", "tpu-v6e"):
        stub.put("localqueues", {"metadata": {"name": name, "namespace": "default"}})
    ok = rows(small_job({"scheduling.queue": "tpu-v6e"}), kube)["queue"]
    assert (ok.status, ok.message) == (
        Status.OK,
        "LocalQueue 'tpu-v6e' exists in namespace 'default' (kueue.x-k8s.io/v1beta2)",
    )
    stub.kueue_version = "v1beta1"  # a Kueue before v0.15.0 serves only v1beta1
    stub.objects[("localqueues", "default", "tpu-v6e")]["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    old = rows(small_job({"scheduling.queue": "tpu-v6e"}), kube)["queue"]
    assert old.status is Status.OK and "a release before v0.15.0: v1beta1 is deprecated" in old.message
    stub.kueue_version = "v1beta2"
    missing = rows(small_job({"scheduling.queue": "tpu"}), kube)["queue"]
    assert missing.status is Status.FAILED
    assert missing.message == "LocalQueue 'tpu' does not exist in namespace 'default'; available: cpu-queue, tpu-v6e"
    stub.forbid("get", "localqueues")
    assert rows(small_job({"scheduling.queue": "tpu"}), kube)["queue"].status is Status.NOT_VERIFIED
    stub.kueue_version = None
    absent = rows(small_job({"scheduling.queue": "tpu"}), kube)["queue"]
    assert absent.status is Status.FAILED and "Kueue (kueue.x-k8s.io) is not installed" in absent.message


# ---------------------------------------------------------------------------------------------- capacity


def test_too_few_tpu_pools_is_a_warning_naming_both_numbers_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    ready(stub, tpu_nodes=1)
    stub.add_node(node("tpu-down", {**V5P, POOL: "tpu-np-1"}, TPU_NODE, ready=False))
    stub.add_node(node("tpu-cordoned", {**V5P, POOL: "tpu-np-2"}, TPU_NODE, cordoned=True))
    stub.add_node(node("tpu-few-chips", {**V5P, POOL: "tpu-np-3"}, {"google.com/tpu": "2"}))
    stub.add_node(node("tpu-no-pool", V5P, TPU_NODE))  # no node pool label: the exclusive topology cannot place it
    other = {**V5P, "cloud.google.com/gke-tpu-topology": "2x2x2", POOL: "tpu-np-4"}
    stub.add_node(node("tpu-other-shape", other, TPU_NODE))
    row = rows(small_job(), kube)["tpu-capacity"]
    assert row.status is Status.WARN
    assert row.message.startswith(
        "1 node pool of 1 x tpu-v5p-slice 2x2x1 nodes (Ready, schedulable, 4 google.com/tpu free each); the "
        "job needs 2 "
        "pools (one per slice) of 1 node: the workers wait unless node pools autoscale"
    )
    assert "queued provisioning" in row.message
    assert row.fix is not None and "one per slice with 1 node" in row.fix
    assert {r.q("labelSelector") for r in stub.sent("GET", "/api/v1/nodes")} == {
        "cloud.google.com/gke-tpu-accelerator=tpu-v5p-slice,cloud.google.com/gke-tpu-topology=2x2x1",
        "cloud.google.com/gke-nodepool=cpu-np",
    }


def test_no_tpu_nodes_at_all_is_a_warning_against_stub(kube: Kube) -> None:
    row = rows(small_job({"tpu.type": "v5p-16", "tpu.slices": 3}), kube)["tpu-capacity"]
    assert row.status is Status.WARN and row.message.startswith("no tpu-v5p-slice 2x2x2 nodes (Ready, ")
    assert "the job needs 3 pools (one per slice) of 2 nodes:" in row.message


def test_one_pool_of_two_nodes_holds_one_slice_not_two_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    """The workers' exclusive topology is the node pool: two nodes in one pool take one slice of v5p-8."""
    for i in range(2):
        stub.add_node(node(f"tpu-{i}", {**V5P, POOL: "tpu-np"}, TPU_NODE))
    row = rows(small_job(), kube)["tpu-capacity"]
    assert row.status is Status.WARN
    assert row.message.startswith(
        "1 node pool of 2 x tpu-v5p-slice 2x2x1 nodes (Ready, schedulable, 4 google.com/tpu free each); the "
        "job needs 2 "
        "pools (one per slice) of 1 node: "
    )


def test_multi_host_slices_need_whole_pools_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    v5p_16 = {**V5P, "cloud.google.com/gke-tpu-topology": "2x2x2"}
    for pool, size in (("tpu-np-0", 2), ("tpu-np-1", 1)):
        for i in range(size):
            stub.add_node(node(f"{pool}-{i}", {**v5p_16, POOL: pool}, TPU_NODE))
    job = small_job({"tpu.type": "v5p-16", "tpu.slices": 2})
    short = rows(job, kube)["tpu-capacity"]
    assert short.status is Status.WARN
    assert short.message.startswith(
        "1 node pool of 2, 1 of 1 x tpu-v5p-slice 2x2x2 nodes (Ready, schedulable, 4 google.com/tpu free "
        "each); the job "
        "needs 2 pools (one per slice) of 2 nodes, and 1 of them hold(s) a slice: the workers wait"
    )
    stub.add_node(node("tpu-np-1-1", {**v5p_16, POOL: "tpu-np-1"}, TPU_NODE))
    enough = rows(job, kube)["tpu-capacity"]
    assert (enough.status, enough.message) == (
        Status.OK,
        "2 node pools of 2 x tpu-v5p-slice 2x2x2 nodes (Ready, schedulable, 4 google.com/tpu free each); the job needs "
        "2 pools (one per slice) of 2 nodes",
    )


def test_head_pod_that_fits_no_node_fails_with_the_numbers_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    stub.add_node(node("cpu-small", CPU_POOL, {"cpu": "15890m", "memory": "57Gi"}))
    stub.add_node(node("cpu-medium", CPU_POOL, {"cpu": "31850m", "memory": "120Gi"}))
    row = rows(small_job(), kube)["head-capacity"]
    assert row.status is Status.FAILED
    assert row.message == (
        "the head pod requests 48 CPU and 232Gi memory; the 2 Ready node(s) with cloud.google.com/gke-nodepool=cpu-np "
        "allocate at most 31.85 CPU and 120Gi memory"
    )
    smaller = small_job(
        {
            "main.cpu": "4",
            "main.memory": "16Gi",
            "head.proxy_cpu": "8",
            "head.proxy_memory": "32Gi",
            "head.rm_cpu": "4",
            "head.rm_memory": "16Gi",
            "main.shm_size": "8Gi",
            "head.transfer_shm_size": "4Gi",
        }
    )
    assert rows(smaller, kube)["head-capacity"].status is Status.OK


def test_head_nodes_not_ready_or_cordoned_do_not_count_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    stub.add_node(node("cpu-down", CPU_POOL, BIG_CPU_NODE, ready=False))
    stub.add_node(node("cpu-cordoned", CPU_POOL, BIG_CPU_NODE, cordoned=True))
    row = rows(small_job(), kube)["head-capacity"]
    assert row.status is Status.WARN
    assert row.message.startswith(
        "none of the 2 node(s) with cloud.google.com/gke-nodepool=cpu-np is Ready and schedulable (NotReady or "
        "cordoned)"
    )
    assert row.fix is not None and "kubectl uncordon NODE" in row.fix
    stub.add_node(node("cpu-small", CPU_POOL, {"cpu": "15890m", "memory": "57Gi"}))
    small = rows(small_job(), kube)["head-capacity"]
    assert small.status is Status.FAILED
    assert small.message.endswith("allocate at most 15.89 CPU and 57Gi memory (2 more NotReady or cordoned)")
    stub.add_node(node("cpu-big", CPU_POOL, BIG_CPU_NODE))
    ok = rows(small_job(), kube)["head-capacity"]
    assert ok.status is Status.OK and ok.message.startswith("1 of 2 Ready node(s) with")


def test_no_node_for_the_head_is_a_warning_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    stub.add_node(node("cpu-0", {"cloud.google.com/gke-nodepool": "other"}, BIG_CPU_NODE))
    row = rows(small_job(), kube)["head-capacity"]
    assert row.status is Status.WARN
    assert row.message.startswith("no node matches the head pod's nodeSelector cloud.google.com/gke-nodepool=cpu-np")
    assert row.fix is not None and "at least 48 CPU and 232Gi memory" in row.fix


def test_nodes_forbidden_is_not_verified_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    stub.forbid("list", "nodes")
    found = rows(small_job(), kube)
    for check in ("tpu-capacity", "head-capacity"):
        row = found[check]
        assert (row.status, row.message) == (Status.NOT_VERIFIED, "this identity may not list nodes")
        assert row.fix is not None and "kubectl auth can-i list nodes" in row.fix
    version = found["kubernetes-version"]
    assert version.status is Status.OK and version.message.startswith(
        "v1.31.4-gke.1256000: native sidecars are on; kubelets of the head nodes not checked: "
    )


def test_pod_requests_sum_sidecars_with_containers_and_take_the_init_peak() -> None:
    def box(name: str, cpu: str, memory: str, **extra: str) -> dict[str, Any]:
        return {"name": name, "resources": {"limits": {"cpu": cpu, "memory": memory}}, **extra}

    spec = {
        "initContainers": [box("sidecar", "2", "1Gi", restartPolicy="Always"), box("setup", "10", "1Gi")],
        "containers": [box("a", "1", "2Gi"), box("b", "500m", "1Gi")],
    }
    totals = pod_requests(spec)
    assert totals["cpu"] == 12  # the setup container beside the sidecar started before it
    assert totals["memory"] == 4 * 2**30  # sidecar + a + b


# ---------------------------------------------------------------------------------------------- permissions, secrets


def test_denied_permissions_fail_naming_verb_and_resource_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    stub.forbid("create", "jobsets")
    stub.forbid("get", "pods/log")
    row = rows(small_job(), kube)["permissions"]
    assert row.status is Status.FAILED
    assert row.message == (
        "denied in namespace 'default': create jobsets.jobset.x-k8s.io (submit (server-side apply creates it)); "
        "get pods/log (status, logs, diagnose, connect)"
    )
    assert row.fix is not None
    assert 'apiGroups: ["jobset.x-k8s.io"], resources: [jobsets], verbs: [create]' in row.fix
    assert 'apiGroups: [""], resources: [pods/log], verbs: [get]' in row.fix
    log_review = [r.body for r in stub.sent("POST") if r.body["spec"]["resourceAttributes"].get("subresource") == "log"]
    assert log_review[0]["spec"]["resourceAttributes"] == {
        "namespace": "default",
        "verb": "get",
        "group": "",
        "resource": "pods",
        "subresource": "log",
    }


def test_one_denial_gives_the_rbac_rule_and_can_i_line_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    stub.forbid("list", "events")
    row = rows(small_job(), kube)["permissions"]
    assert row.message == "denied in namespace 'default': list events (status, diagnose, logs --all)"
    assert row.fix is not None and row.fix.endswith("check with: kubectl auth can-i list events -n default")


def test_secret_rows_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    stub.put("secrets", {"metadata": {"name": "hf", "namespace": "default"}, "data": {"token": "c2VjcmV0"}})
    job = small_job({"main.secret_env": {"HF_TOKEN": "hf/token", "WANDB_API_KEY": "wandb/key"}})
    found = [r for r in check_cluster(job, kube) if r.id == "secret"]
    present, missing = found
    assert (present.status, present.message) == (
        Status.OK,
        "Secret 'hf' exists in namespace 'default' (keys token not read)",
    )
    assert present.fields == ("main.secret_env.HF_TOKEN",)
    assert (missing.status, missing.message) == (
        Status.FAILED,
        "Secret 'wandb' (for WANDB_API_KEY) does not exist in namespace 'default'",
    )
    assert missing.fix == "kubectl create secret generic wandb -n default --from-literal=key=..."
    (read, _) = stub.sent("GET", "/secrets/")
    assert read.headers["Accept"] == "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
    stub.forbid("get", "secrets")
    hidden = [r for r in check_cluster(job, kube) if r.id == "secret"]
    assert [r.status for r in hidden] == [Status.NOT_VERIFIED] * 2


# ---------------------------------------------------------------------------------------------- CLI


def test_cli_preflight_cluster_no_gcs_json_against_stub(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer, jax_version: str
) -> None:
    """--no-gcs leaves out the GCS rows only: the cluster rows come first, then the image rows (not verified here:
    no registry is reachable from the tests)."""
    result = cluster_cli(["preflight", "-f", EXAMPLE, "--cluster", "--no-gcs", "-o", "json", *kc])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    checks = report["checks"]
    assert [c["check"] for c in checks] == [*CHECK_NAMES, "image", "image", "image", "image"]
    assert {c["location"] for c in checks[: len(CHECK_NAMES)]} == {"stub"}
    assert [c["fields"] for c in checks[len(CHECK_NAMES) :]] == [
        ["images.proxy_server"],
        ["images.server"],
        ["main.image"],
        ["storage.hlo_uploader_image"],
    ]
    cluster_statuses = [c["status"] for c in checks[: len(CHECK_NAMES)]]
    assert cluster_statuses.count("ok") == 5 and cluster_statuses.count("warn") == 2 and report["failed"] is False
    assert not any(c["location"].startswith("gs://") for c in checks)


def test_cli_preflight_cluster_failure_exits_6_against_stub(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer, jax_version: str
) -> None:
    stub.jobset_installed = False
    result = cluster_cli(["preflight", "-f", EXAMPLE, "--cluster", "--no-gcs", *kc])
    assert result.exit_code == 6, result.output
    assert "jobset-api" in result.stdout and "1 preflight check(s) failed" in result.stderr


def test_cli_no_gcs_alone_checks_the_images_only(cluster_cli: ClusterCli, jax_version: str) -> None:
    result = cluster_cli(["preflight", "-f", EXAMPLE, "--no-gcs", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert [c["check"] for c in json.loads(result.stdout)["checks"]] == ["image"] * 4


def test_cli_preflight_cluster_with_an_unpushed_job_image_is_a_failed_row_against_stub(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer, jax_version: str, tmp_path: Path
) -> None:
    """image.repository set, nothing pushed: render would stop; preflight still asks the cluster and fails the
    image row with the fix."""
    ready(stub)
    config = tmp_path / "job.yaml"
    config.write_text(Path(EXAMPLE).read_text(encoding="utf-8"), encoding="utf-8")
    flags = ["--image-repository", "127.0.0.1:5000/team/jobs", "--image", ""]
    result = cluster_cli(["preflight", "-f", str(config), *flags, "--cluster", "--no-gcs", "-o", "json", *kc])
    assert result.exit_code == 6, result.output
    checks = json.loads(result.stdout)["checks"]
    assert [c["status"] for c in checks[: len(CHECK_NAMES)]] == ["ok"] * len(CHECK_NAMES)
    (unpushed,) = [c for c in checks if c["fields"] == ["image.repository"]]
    assert (unpushed["location"], unpushed["status"], unpushed["detail"]) == (
        "127.0.0.1:5000/team/jobs",
        "failed",
        "no pushed job image matches the current inputs",
    )
    assert unpushed["fix"] == "pwdeploy image build --push, or set main.image"


def test_cli_submit_stops_on_a_failed_cluster_row_against_stub(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer, jax_version: str
) -> None:
    stub.version = {"major": "1", "minor": "27", "gitVersion": "v1.27.3"}
    result = cluster_cli(["submit", "-f", EXAMPLE, *kc])
    assert result.exit_code == 6, result.output
    assert "preflight failed; nothing was submitted" in result.stderr and "kubernetes-version" in result.stderr
    assert [w for w in stub.writes() if w.q("dryRun") != "All"] == [] and stub.objects == {}


def locations(bucket: str) -> list[str]:
    """The example's GCS locations, moved to an emulator bucket."""
    return [
        f"--gcs-scratch=gs://{bucket}/scratch",
        f"--hlo-dump=gs://{bucket}/hlo",
        f"--checkpoint-dir=gs://{bucket}/ckpt",
    ]


def test_cli_submit_checks_the_cluster_and_gcs_then_applies_against_stub(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer, emulator_env: GcsEmulator, jax_version: str
) -> None:
    ready(stub)
    bucket = emulator_env.create_bucket()
    result = cluster_cli(["submit", "-f", EXAMPLE, *kc, *locations(bucket)])
    assert result.exit_code == 0, result.output
    assert ") created" in result.stdout
    assert stub.sent("GET", "/version") and len(stub.sent("POST")) == len(needed_for(queue=False, queued=False))
    assert [w.method for w in stub.writes() if w.q("dryRun") != "All"] == ["PATCH"]
    assert not any(line.startswith("warning: ") for line in result.stderr.splitlines()), "the cluster is ready"


def test_cli_submit_prints_the_rows_that_are_not_ok_then_applies_against_stub(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer, emulator_env: GcsEmulator, jax_version: str
) -> None:
    ready(stub, tpu_nodes=1)
    bucket = emulator_env.create_bucket()
    result = cluster_cli(["submit", "-f", EXAMPLE, *kc, *locations(bucket)])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    warned = [line for line in lines if line.startswith("warning: ")]
    assert warned == [
        "warning: tpu-capacity stub: 1 node pool of 1 x tpu-v5p-slice 2x2x1 nodes (Ready, schedulable, 4 "
        "google.com/tpu free each); the job needs 2 pools (one per slice) of 1 node: the workers wait unless "
        "node pools "
        "autoscale from zero or use queued provisioning"
    ]
    assert result.output.index("warning: tpu-capacity") < result.output.index(") created")


# ---------------------------------------------------------------------------------------------- capacity modes


def tainted(obj: dict[str, Any], *taints: tuple[str, str, str]) -> dict[str, Any]:
    obj["spec"]["taints"] = [{"key": k, "value": v, "effect": e} for k, v, e in taints]
    return obj


SPOT = {"cloud.google.com/gke-spot": "true"}


def test_spot_counts_only_labelled_pools_whose_taints_the_workers_tolerate_against_stub(
    stub: StubKubeApiServer, kube: Kube
) -> None:
    stub.add_node(node("on-demand", {**V5P, POOL: "tpu-od"}, TPU_NODE))  # unlabelled: not a spot node
    stub.add_node(node("spot-plain", {**V5P, **SPOT, POOL: "tpu-spot-a"}, TPU_NODE))
    spot_taint = ("cloud.google.com/gke-spot", "true", "NoSchedule")
    stub.add_node(tainted(node("spot-tainted", {**V5P, **SPOT, POOL: "tpu-spot-b"}, TPU_NODE), spot_taint))
    dedicated = ("dedicated", "ml", "NoSchedule")
    stub.add_node(tainted(node("spot-dedicated", {**V5P, **SPOT, POOL: "tpu-spot-c"}, TPU_NODE), dedicated))
    job = small_job({"tpu.capacity": "spot"})
    row = rows(job, kube)["tpu-capacity"]
    assert (row.status, row.message) == (
        Status.OK,
        "2 node pools of 1 x tpu-v5p-slice 2x2x1 nodes labelled cloud.google.com/gke-spot=true (Ready, schedulable, "
        "4 google.com/tpu free each; 1 more with taints the workers do not tolerate); the job needs 2 pools (one per "
        "slice) of 1 node",
    )
    selectors = {r.q("labelSelector") for r in stub.sent("GET", "/api/v1/nodes")}
    assert (
        "cloud.google.com/gke-tpu-accelerator=tpu-v5p-slice,cloud.google.com/gke-tpu-topology=2x2x1,"
        "cloud.google.com/gke-spot=true" in selectors
    )
    tolerant = rows(small_job({"tpu.capacity": "spot", "tpu.tolerations": ["dedicated=ml:NoSchedule"]}), kube)
    assert tolerant["tpu-capacity"].message.startswith("3 node pools of 1 x")
    on_demand = rows(small_job(), kube)["tpu-capacity"].message  # any pool, but it tolerates neither taint
    assert on_demand.startswith("2 node pools of 1 x tpu-v5p-slice 2x2x1 nodes (Ready, schedulable, 4 google.com/tpu ")
    assert "each; 2 more with taints the workers do not tolerate)" in on_demand


def test_shared_reservation_needs_both_labels_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    named = {"cloud.google.com/reservation-name": "rsv"}
    stub.add_node(node("own", {**V5P, **named, POOL: "tpu-own"}, TPU_NODE))
    shared = {**named, "cloud.google.com/reservation-project": "owner-project"}
    stub.add_node(node("shared", {**V5P, **shared, POOL: "tpu-shared"}, TPU_NODE))
    job = small_job({"tpu.capacity": "reservation", "tpu.reservation": "projects/owner-project/reservations/rsv"})
    row = rows(job, kube)["tpu-capacity"]
    assert row.status is Status.WARN and row.message.startswith(
        "1 node pool of 1 x tpu-v5p-slice 2x2x1 nodes labelled "
        "cloud.google.com/reservation-name=rsv,cloud.google.com/"
        "reservation-project=owner-project"
    )
    local = rows(small_job({"tpu.capacity": "reservation", "tpu.reservation": "rsv"}), kube)["tpu-capacity"]
    assert local.status is Status.OK and local.message.startswith("2 node pools of 1 x")


def test_reservation_pools_tainted_by_auto_provisioning_fit_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    """Node pools that auto-provisioning makes for a reservation carry the taint
    cloud.google.com/reservation-name=<R>:NoSchedule; the workers tolerate it, so those pools hold slices."""
    named = {"cloud.google.com/reservation-name": "rsv"}
    taint = ("cloud.google.com/reservation-name", "rsv", "NoSchedule")
    for pool in ("tpu-nap-a", "tpu-nap-b"):
        stub.add_node(tainted(node(pool, {**V5P, **named, POOL: pool}, TPU_NODE), taint))
    row = rows(small_job({"tpu.capacity": "reservation", "tpu.reservation": "rsv"}), kube)["tpu-capacity"]
    assert (row.status, row.message) == (
        Status.OK,
        "2 node pools of 1 x tpu-v5p-slice 2x2x1 nodes labelled cloud.google.com/reservation-name=rsv (Ready, "
        "schedulable, 4 google.com/tpu free each); the job needs 2 pools (one per slice) of 1 node",
    )
    other = rows(small_job({"tpu.capacity": "reservation", "tpu.reservation": "other"}), kube)["tpu-capacity"]
    assert other.status is Status.WARN, "another reservation's pools are neither selected nor tolerated"


@pytest.mark.parametrize("capacity", ["flex-start", "queued"])
def test_pools_that_scale_from_zero_are_ok_with_the_gcloud_command_against_stub(
    kube: Kube, stub: StubKubeApiServer, capacity: str
) -> None:
    row = rows(small_job({"tpu.capacity": capacity, "scheduling.queue": "tpu"}), kube)["tpu-capacity"]
    assert row.status is Status.OK and row.message.startswith("no tpu-v5p-slice 2x2x1 nodes labelled ")
    assert "gcloud container node-pools list --cluster CLUSTER --location LOCATION" in row.message
    assert rows(small_job(), kube)["tpu-capacity"].status is Status.WARN, "on-demand pools do not hide"


def kueue(
    stub: StubKubeApiServer,
    *,
    version: str = "v1beta2",
    controller: str = "kueue.x-k8s.io/provisioning-request",
    on_flavors: list[str] | None = None,
    klass: str = "queued-provisioning.gke.io",
) -> None:
    """LocalQueue tpu -> ClusterQueue cq -> AdmissionCheck dws -> ProvisioningRequestConfig dws-config."""
    stub.kueue_version = version
    stub.put("localqueues", {"metadata": {"name": "tpu", "namespace": "default"}, "spec": {"clusterQueue": "cq"}})
    spec: dict[str, Any] = (
        {"admissionChecksStrategy": {"admissionChecks": [{"name": "dws", "onFlavors": on_flavors}]}}
        if on_flavors
        else {"admissionChecks": ["dws"]}
    )
    stub.put("clusterqueues", {"metadata": {"name": "cq", "namespace": ""}, "spec": spec})
    parameters = {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": "dws-config"}
    check = {"controllerName": controller, "parameters": parameters}
    stub.put("admissionchecks", {"metadata": {"name": "dws", "namespace": ""}, "spec": check})
    config = {"provisioningClassName": klass, "managedResources": ["google.com/tpu"] if on_flavors is None else []}
    stub.put("provisioningrequestconfigs", {"metadata": {"name": "dws-config", "namespace": ""}, "spec": config})


QUEUED = {"tpu.capacity": "queued", "scheduling.queue": "tpu"}


def test_provisioning_row_only_for_queued_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    assert "provisioning" not in rows(small_job({"scheduling.queue": "tpu"}), kube)
    names = [r.id for r in check_cluster(small_job(QUEUED), kube)]
    assert names == [*CHECK_NAMES[:5], "provisioning", *CHECK_NAMES[5:]]


def test_provisioning_scoped_to_the_tpu_flavor_is_ok_at_the_discovered_version_against_stub(
    stub: StubKubeApiServer, kube: Kube
) -> None:
    kueue(stub, on_flavors=["tpu-v5p"])
    row = rows(small_job(QUEUED), kube)["provisioning"]
    assert (row.status, row.message) == (
        Status.OK,
        "ClusterQueue 'cq' runs admission check 'dws' (kueue.x-k8s.io/provisioning-request) on flavor(s) tpu-v5p; "
        "the head's CPU pod set is not gated",
    )
    assert row.fields == ("tpu.capacity", "scheduling.queue")
    assert stub.sent("GET", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/cq")
    assert stub.sent("GET", "/apis/kueue.x-k8s.io/v1beta2/provisioningrequestconfigs/dws-config")


def test_provisioning_for_every_flavor_is_ok_only_when_it_manages_tpus_alone_against_stub(
    stub: StubKubeApiServer, kube: Kube
) -> None:
    kueue(stub)  # every flavor, managedResources [google.com/tpu]
    assert rows(small_job(QUEUED), kube)["provisioning"].message.endswith(
        "for google.com/tpu; the head's CPU pod set is not gated"
    )
    stub.objects[("provisioningrequestconfigs", "", "dws-config")]["spec"]["managedResources"] = []
    row = rows(small_job(QUEUED), kube)["provisioning"]
    assert row.status is Status.WARN and "the head's CPU pod set is part of the ProvisioningRequest" in row.message
    assert row.fix is not None and "onFlavors" in row.fix


def test_provisioning_failures_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    stub.kueue_version = None
    absent = rows(small_job(QUEUED), kube)["provisioning"]
    assert absent.status is Status.FAILED and "kueue.x-k8s.io is not installed" in absent.message
    kueue(stub, controller="example.com/other", on_flavors=["tpu"])
    other = rows(small_job(QUEUED), kube)["provisioning"]
    assert other.status is Status.FAILED
    assert other.message.startswith(
        "ClusterQueue 'cq' has no admission check run by kueue.x-k8s.io/provisioning-request"
    )
    assert other.fix is not None and "queued-provisioning.gke.io" in other.fix
    kueue(stub, on_flavors=["tpu"], klass="best-effort-atomic-scale-up.autoscaling.x-k8s.io")
    wrong_class = rows(small_job(QUEUED), kube)["provisioning"]
    assert wrong_class.status is Status.WARN and "not queued-provisioning.gke.io" in wrong_class.message
    del stub.objects[("clusterqueues", "", "cq")]
    missing = rows(small_job(QUEUED), kube)["provisioning"]
    assert missing.status is Status.FAILED and "ClusterQueue 'cq', which does not exist" in missing.message


def test_provisioning_not_readable_is_not_verified_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    kueue(stub, on_flavors=["tpu"])
    stub.forbid("get", "clusterqueues")
    row = rows(small_job(QUEUED), kube)["provisioning"]
    assert row.status is Status.NOT_VERIFIED and row.message.startswith("Kueue's objects are not readable: ")
    assert row.fix is not None and "clusterqueues" in row.fix
