"""diagnose and preflight on the real scheduler's texts (issue 38 items 1 and 2's ground): the control plane's
scheduler writes the PodScheduled message a GKE cluster's does, for a job no node pool matches, a pool with too few
chips, a pool another job holds (its hostNetwork pods keep the host ports), and a tainted head pool."""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.control_plane import ControlPlane, NodePool, TpuPool
from tests.control_plane.commands import (
    HEAD_POOL,
    JOB_TESTS,
    V5P_2X2X1,
    diagnosis,
    job_flags,
    kueue_queues,
    pwdeploy,
    status,
    wait_for,
)

pytestmark = JOB_TESTS

CPU = HEAD_POOL
NS = "default"


@pytest.fixture
def pools(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[None]:
    with control_plane.node_pools(*request.param):
        yield


def finding(found: dict[str, Any], cause: str, where: str) -> dict[str, Any] | None:
    return next((f for f in found["findings"] if f["cause"] == cause and where in f["where"]), None)


def diagnosed(plane: ControlPlane, name: str, cause: str, where: str) -> dict[str, Any]:
    """The finding once the scheduler has written its message (the pods are created a moment after the JobSet)."""
    found = wait_for(
        lambda: diagnosis(plane, name, NS, user=False), lambda d: finding(d, cause, where) is not None, timeout=90
    )
    hit = finding(found, cause, where)
    assert hit is not None
    return hit


def submit(plane: ControlPlane, name: str, *extra: str) -> None:
    answer = pwdeploy(plane, "submit", *job_flags(name, NS, *extra), "--skip-preflight", user=False)
    assert answer.returncode == 0, answer.stderr


@pytest.mark.parametrize("pools", [(CPU, NodePool("tpu-v5p", tpu=V5P_2X2X1))], indirect=True)
def test_a_topology_no_pool_has_is_a_node_selector_error(control_plane: ControlPlane, pools: None) -> None:
    name = f"ns-{secrets.token_hex(3)}"
    submit(control_plane, name, "--tpu-type", "v5p-16")  # 2x2x2: the pool is 2x2x1
    hit = diagnosed(control_plane, name, "node-selector", "worker pod")
    assert hit["severity"] == "error"
    assert "didn't match Pod's node affinity/selector" in hit["evidence"], hit
    assert "cloud.google.com/gke-tpu-topology=2x2x2" in hit["fix"], hit


@pytest.mark.parametrize("pools", [(CPU, NodePool("tpu-v5p", tpu=TpuPool("tpu-v5p-slice", "2x2x1", 2)))], indirect=True)
def test_a_pool_with_too_few_chips_is_a_tpu_capacity_error(control_plane: ControlPlane, pools: None) -> None:
    name = f"tc-{secrets.token_hex(3)}"
    submit(control_plane, name)
    hit = diagnosed(control_plane, name, "tpu-capacity", "worker pod")
    assert hit["severity"] == "error"
    assert "Insufficient google.com/tpu" in hit["evidence"], hit


def holding(plane: ControlPlane, first: str, second: str) -> dict[str, dict[str, Any]]:
    """The first job runs (its hostNetwork pods hold their nodes' host ports); preflight's control-plane rows for
    the second."""
    submit(plane, first)
    wait_for(
        lambda: status(plane, first, NS, user=False), lambda s: all(g["running"] == g["expected"] for g in s["groups"])
    )
    checked = pwdeploy(
        plane, "preflight", *job_flags(second, NS), "--cluster", "--no-gcs", "--no-check", "-o", "json", user=False
    )
    return {r["check"]: r for r in json.loads(checked.stdout)["checks"] if r["location"] == "control-plane"}


@pytest.mark.parametrize(
    "pools", [(NodePool("cpu-np", nodes=2, cpu="64", memory="256Gi"), NodePool("tpu-v5p", tpu=V5P_2X2X1))],
    indirect=True,
)  # fmt: skip
def test_a_tpu_pool_another_job_holds_is_named_held_and_preflight_warns(
    control_plane: ControlPlane, pools: None
) -> None:
    """Issue 38 item 1: the first job's workers keep the host ports of the only TPU node, so the scheduler says
    "didn't have free ports" (NodePorts runs before NodeResourcesFit), never "Insufficient google.com/tpu"; the
    second job's head fits the other CPU node."""
    plane = control_plane
    first, second = f"b1-{secrets.token_hex(3)}", f"b2-{secrets.token_hex(3)}"
    rows = holding(plane, first, second)
    assert rows["tpu-capacity"]["status"] == "warn", rows["tpu-capacity"]
    assert rows["head-capacity"]["status"] == "ok", rows["head-capacity"]

    submit(plane, second)
    workers = diagnosed(plane, second, "tpu-capacity", "worker pod")
    assert "didn't have free ports for the requested pod ports" in workers["evidence"], workers
    assert "another job's workers" in workers["fix"], workers
    assert not [f for f in diagnosis(plane, second, NS, user=False)["findings"] if f["cause"] == "node-selector"]


@pytest.mark.parametrize("pools", [(CPU, NodePool("tpu-v5p", tpu=V5P_2X2X1))], indirect=True)
def test_a_head_pool_another_job_holds_is_named_held_and_preflight_warns(
    control_plane: ControlPlane, pools: None
) -> None:
    """The head's pool has one node, which the first job's head holds (hostNetwork): the second job's head waits
    on free ports, and JobSet's in-order start-up creates no workers before it runs."""
    plane = control_plane
    first, second = f"h1-{secrets.token_hex(3)}", f"h2-{secrets.token_hex(3)}"
    rows = holding(plane, first, second)
    assert rows["head-capacity"]["status"] == "warn", rows["head-capacity"]
    assert rows["tpu-capacity"]["status"] == "warn", rows["tpu-capacity"]

    submit(plane, second)
    head = diagnosed(plane, second, "head-unschedulable", "head pod")
    assert "didn't have free ports for the requested pod ports" in head["evidence"], head
    assert "another job's head" in head["fix"] and "main.memory" not in head["fix"], head


@pytest.mark.parametrize(
    "pools",
    [(NodePool("cpu-np", cpu="64", memory="256Gi", taints=[{"key": "team", "value": "ml", "effect": "NoSchedule"}]),
      NodePool("tpu-v5p", tpu=V5P_2X2X1))],
    indirect=True,
)  # fmt: skip
def test_a_tainted_head_pool_says_taint_not_memory(control_plane: ControlPlane, pools: None) -> None:
    name = f"tt-{secrets.token_hex(3)}"
    submit(control_plane, name)
    hit = diagnosed(control_plane, name, "head-unschedulable", "head pod")
    assert "had untolerated taint" in hit["evidence"], hit
    assert "taint" in hit["fix"] and "main.memory" not in hit["fix"], hit


@contextlib.contextmanager
def namespace(plane: ControlPlane, prefix: str, labels: dict[str, str]) -> Iterator[str]:
    """A namespace of its own for the time of a ``with``; its jobs and their pods are gone after it."""
    name = f"{prefix}-{secrets.token_hex(3)}"
    plane.api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
    try:
        yield name
    finally:
        plane.clear_jobs(name)
        plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


def refused(plane: ControlPlane, name: str, ns: str, key: str) -> dict[str, Any]:
    found = wait_for(
        lambda: diagnosis(plane, name, ns, user=False),
        lambda d: any(f["cause"] == "pod-create-refused" and key in f["fix"] for f in d["findings"]),
        timeout=90,
    )
    return next(f for f in found["findings"] if f["cause"] == "pod-create-refused" and key in f["fix"])


@pytest.mark.parametrize("pools", [(CPU, NodePool("tpu-v5p", tpu=V5P_2X2X1))], indirect=True)
def test_pod_security_forbidding_host_network_is_named_with_its_level(control_plane: ControlPlane, pools: None) -> None:
    """The API server's Pod Security admission refuses the Job controller's pods (FailedCreate on the Jobs)."""
    plane = control_plane
    with namespace(plane, "ps", {"pod-security.kubernetes.io/enforce": "baseline"}) as ns:
        name = f"ps-{secrets.token_hex(3)}"
        answer = pwdeploy(plane, "submit", *job_flags(name, ns), "--skip-preflight", user=False)
        assert answer.returncode == 0, answer.stderr
        hit = refused(plane, name, ns, "Pod Security level 'baseline'")
        assert "violates PodSecurity" in hit["evidence"] and "baseline:latest" in hit["evidence"], hit
        assert "hostNetwork=true" in hit["evidence"], hit
        assert hit["severity"] == "error"


@pytest.mark.parametrize("pools", [(CPU, NodePool("tpu-v5p", tpu=V5P_2X2X1))], indirect=True)
def test_a_resource_quota_without_room_is_named(control_plane: ControlPlane, pools: None) -> None:
    plane = control_plane
    with namespace(plane, "rq", {}) as ns:
        plane.api.apply(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": "one-pod", "namespace": ns},
                "spec": {"hard": {"pods": "1"}},
            }
        )
        name = f"rq-{secrets.token_hex(3)}"
        answer = pwdeploy(plane, "submit", *job_flags(name, ns), "--skip-preflight", user=False)
        assert answer.returncode == 0, answer.stderr
        hit = refused(plane, name, ns, "ResourceQuota one-pod")
        assert "exceeded quota: one-pod" in hit["evidence"], hit


@pytest.mark.parametrize("pools", [(CPU, NodePool("tpu-v5p", tpu=TpuPool("tpu-v5p-slice", "2x2x2", 4)))], indirect=True)
def test_kueue_evicts_a_job_whose_pods_are_never_ready_then_deactivates_it(
    control_plane: ControlPlane, pools: None
) -> None:
    """Real Kueue (waitForPodsReady 20 s, backoffLimitCount 1 on this control plane) admits the job by quota, its
    workers fit no node, Kueue evicts it with PodsReadyTimeout, requeues it once, then deactivates it: diagnose says
    each, the deactivation as an error with how to reactivate. Each eviction suspends the JobSet and the Job
    controller deletes the head pod, whose main exits 143 (SIGTERM): the head's podFailurePolicy leaves 143 out of
    its FailJob rule, else the suspended head Job fails and the JobSet with it (user_program_failed), as it did here
    before."""
    plane = control_plane
    kueue_queues(plane, NS, tpu_quota=4)
    name = f"pr-{secrets.token_hex(3)}"
    submit(plane, name, "--queue", "lq")
    timed_out = diagnosed(plane, name, "pods-ready-timeout", "workload")
    assert "PodsReadyTimeout" in timed_out["evidence"], timed_out
    assert "waitForPodsReady.timeout" in timed_out["fix"], timed_out
    deactivated = wait_for(
        lambda: diagnosis(plane, name, NS, user=False),
        lambda d: finding(d, "kueue-deactivated", "workload") is not None,
        timeout=120,
    )
    hit = finding(deactivated, "kueue-deactivated", "workload")
    assert hit is not None and hit["severity"] == "error"
    assert not [f for f in deactivated["findings"] if f["cause"] == "job-failed"], deactivated
    assert plane.kubectl("get", "jobset", name, "-n", NS, "-o", "jsonpath={.spec.suspend}").stdout == "true"
    assert "RequeuingLimitExceeded" in hit["evidence"], hit
    assert '"active":true' in hit["fix"], hit


HOLD = "pwdeploy.test/hold"  # a finalizer that keeps a stopped pod listed, as a kubelet's cleanup does for a while


@pytest.mark.parametrize("pools", [(CPU, NodePool("tpu-v5p", tpu=TpuPool("tpu-v5p-slice", "2x2x2", 4)))], indirect=True)
def test_an_eviction_fails_a_jobset_whose_head_policy_fails_on_143_and_diagnose_says_why(
    control_plane: ControlPlane, pools: None
) -> None:
    """The defect the Kueue test above found, kept as it was: a JobSet rendered with 143 in the head's FailJob rule (as
    pwdeploy rendered it before), applied with kubectl. Kueue evicts it (PodsReadyTimeout), the Job controller
    deletes the head pod of the suspended Job, main exits 143, and the FailJob rule fails the Job (here after
    the requeue had already resumed it) and the JobSet instead of Kueue requeuing it. The stopped pod's terminal
    status is visible for a moment before it is gone; a finalizer keeps it listed here so the race always goes
    the way it went in CI. diagnose names the cause and the fix."""
    plane = control_plane
    kueue_queues(plane, NS, tpu_quota=4)
    name = f"ev-{secrets.token_hex(3)}"
    rendered = pwdeploy(plane, "render", *job_flags(name, NS, "--queue", "lq"), user=False)
    assert rendered.returncode == 0, rendered.stderr
    jobset = next(d for d in yaml.safe_load_all(rendered.stdout) if d and d.get("kind") == "JobSet")
    head = next(rj for rj in jobset["spec"]["replicatedJobs"] if rj["name"] == "pathways-head")
    fail_job = head["template"]["spec"]["podFailurePolicy"]["rules"][1]["onExitCodes"]
    fail_job["values"] = [code for code in fail_job["values"] if code != 143]
    head["template"]["spec"]["template"]["metadata"]["finalizers"] = [HOLD]
    plane.kubectl("apply", "-f", "-", input_text=yaml.safe_dump(jobset))
    try:
        failed = wait_for(
            lambda: diagnosis(plane, name, NS, user=False),
            lambda d: any(f["cause"] == "job-failed" for f in d["findings"]),
            timeout=120,
        )
    finally:
        _release(plane, name)
    hit = next(f for f in failed["findings"] if f["cause"] == "job-failed")
    assert "FailJobSetFailurePolicyAction" in hit["evidence"], hit
    assert "pathways-head-0 failed" in hit["evidence"], hit
    assert "failed with exit code 143 matching FailJob" in hit["evidence"], hit
    assert "stopped by SIGTERM (exit code 143) when Kueue evicted the job (Evicted " in hit["fix"], hit
    assert "Exceeded the PodsReady timeout" in hit["fix"] and "--replace" in hit["fix"], hit


def _release(plane: ControlPlane, name: str) -> None:
    """Delete the JobSet and take HOLD off its pods until none is left."""
    plane.kubectl("delete", "jobset", name, "-n", NS, "--wait=false", check=False)

    def held() -> list[str]:
        listed = plane.kubectl("get", "pods", "-n", NS, "-l", f"jobset.sigs.k8s.io/jobset-name={name}", "-o", "json")
        items = json.loads(listed.stdout)["items"]
        for pod in items:
            if HOLD in (pod["metadata"].get("finalizers") or []):
                kept = [f for f in pod["metadata"]["finalizers"] if f != HOLD]
                patch = json.dumps(
                    {"metadata": {"finalizers": kept, "resourceVersion": pod["metadata"]["resourceVersion"]}}
                )
                plane.kubectl(
                    "patch", "pod", pod["metadata"]["name"], "-n", NS, "--type=merge", "-p", patch, check=False
                )
        return [pod["metadata"]["name"] for pod in items]

    wait_for(held, lambda names: not names, timeout=60)


def test_an_admission_webhook_that_is_down_is_named_and_not_retried(control_plane: ControlPlane) -> None:
    """Issue 38 item 5 on the real API server: a validating webhook whose service refuses connections (its
    namespaceSelector limits it to one namespace). submit says which webhook could not be called, without retries
    and without blaming the API server; preflight's jobset-api row (a server dry run) fails the same way."""
    from tests.control_plane.processes import free_port

    plane = control_plane
    hook = "down.pwdeploy.test"
    with namespace(plane, "wh", {"pwdeploy.test/webhook": "down"}) as ns:
        plane.api.apply(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": f"pwdeploy-test-{ns}"},
                "webhooks": [
                    {
                        "name": hook,
                        "admissionReviewVersions": ["v1"],
                        "sideEffects": "None",
                        "failurePolicy": "Fail",
                        "timeoutSeconds": 5,
                        "clientConfig": {"url": f"https://127.0.0.1:{free_port()}/validate"},
                        "namespaceSelector": {"matchLabels": {"pwdeploy.test/webhook": "down"}},
                        "rules": [
                            {
                                "apiGroups": ["jobset.x-k8s.io"],
                                "apiVersions": ["*"],
                                "operations": ["CREATE", "UPDATE"],
                                "resources": ["jobsets"],
                            }
                        ],
                    }
                ],
            }
        )
        try:
            name = f"wh-{secrets.token_hex(3)}"
            answer = pwdeploy(plane, "submit", *job_flags(name, ns), "--skip-preflight", user=False)
            assert answer.returncode != 0
            assert f"could not call the admission webhook '{hook}'" in answer.stderr, answer.stderr
            assert "connection refused" in answer.stderr and "the API server itself is fine" in answer.stderr
            assert "retry" not in answer.stderr.lower() and "Traceback" not in answer.stderr, answer.stderr
            assert plane.kubectl("get", "jobsets", "-n", ns, "-o", "name").stdout.strip() == ""

            checked = pwdeploy(
                plane, "preflight", *job_flags(name, ns), "--cluster", "--no-gcs", "--no-check", "-o", "json",
                user=False,
            )  # fmt: skip
            rows = {r["check"]: r for r in json.loads(checked.stdout)["checks"] if r["location"] == "control-plane"}
            assert rows["jobset-api"]["status"] == "failed", rows["jobset-api"]
            assert hook in json.dumps(rows["jobset-api"]), rows["jobset-api"]
        finally:
            plane.kubectl("delete", "validatingwebhookconfiguration", f"pwdeploy-test-{ns}", check=False)


@pytest.mark.parametrize("pools", [(CPU, NodePool("tpu-v5p", tpu=V5P_2X2X1))], indirect=True)
def test_a_jobset_no_controller_acts_on_is_named_after_a_minute(control_plane: ControlPlane, pools: None) -> None:
    """Issue 38 item 6 on the real JobSet controller: a JobSet whose spec.managedBy names another controller gets
    no status and no Jobs from it, as one with no controller at all; status says Pending and diagnose, after its
    minute of grace, says why instead of "no findings"."""
    plane = control_plane
    name = f"mb-{secrets.token_hex(3)}"
    rendered = pwdeploy(plane, "render", *job_flags(name, NS), user=False)
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    for doc in docs:
        if doc["kind"] == "JobSet":
            doc["spec"]["managedBy"] = "example.com/another-controller"
    plane.kubectl("apply", "--server-side", "--field-manager=pwdeploy", "-f", "-", input_text=yaml.safe_dump_all(docs))
    assert status(plane, name, NS, user=False)["state"]["phase"] == "Pending"
    found = wait_for(
        lambda: diagnosis(plane, name, NS, user=False),
        lambda d: finding(d, "no-jobset-controller", "jobset") is not None,
        timeout=120,
    )
    hit = finding(found, "no-jobset-controller", "jobset")
    assert hit is not None and hit["severity"] == "error"
    assert "example.com/another-controller" in hit["evidence"], hit
    assert plane.kubectl("get", "jobs", "-n", NS, "-o", "name").stdout.strip() == ""  # the controller made none
