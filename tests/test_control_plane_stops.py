"""A job's head pod stopped from outside, on the real control plane: KWOK ends a deleted running pod as a kubelet
ends its containers (tests/control_plane/kwok.py: 143 when SIGTERM ends the processes, 137 at the end of the grace
period when they are PID 1 of their containers without a handler), and the real Job, JobSet and Kueue controllers
decide. A Kueue eviction (the ClusterQueue stopped with HoldAndDrain, then started again) requeues a job pwdeploy
renders today, which resumes; the same eviction fails a job whose head pod does not share its process namespace
(main PID 1, as JobSets were rendered before), and diagnose says why (sigterm-ignored)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.control_plane import ControlPlane, NodePool
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
from tests.control_plane.kwok import ON_SIGTERM

pytestmark = JOB_TESTS

NS = "default"
HOLD = "pwdeploy.test/hold"  # a finalizer that keeps a stopped pod listed, as a kubelet's clean-up does for a while
GRACE = "3"  # terminationGracePeriodSeconds of these jobs: the SIGKILL of a PID 1 without a handler comes 3 s on


@pytest.fixture
def pools(control_plane: ControlPlane) -> Iterator[None]:
    with control_plane.node_pools(HEAD_POOL, NodePool("tpu-v5p", tpu=V5P_2X2X1)):
        yield


def pod_on_a_node(plane: ControlPlane, name: str, spec: dict[str, Any], annotations: dict[str, str]) -> str:
    """A bare pod on the head pool's node, held listed by HOLD once stopped; running when this returns."""
    node = plane.api.get("/api/v1/nodes?labelSelector=cloud.google.com%2Fgke-nodepool%3Dcpu-np")["items"][0]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations, "finalizers": [HOLD]},
        "spec": {
            "nodeName": node["metadata"]["name"],
            "terminationGracePeriodSeconds": int(GRACE),
            "containers": [{"name": "main", "image": "python:3.11.9-slim"}],
            **spec,
        },
    }
    plane.api.request("POST", f"/api/v1/namespaces/{NS}/pods", pod)
    wait_for(lambda: phase(plane, name), lambda p: p == "Running", timeout=60)
    return name


def phase(plane: ControlPlane, pod: str) -> str:
    return str(plane.api.get(f"/api/v1/namespaces/{NS}/pods/{pod}").get("status", {}).get("phase"))


def ended(plane: ControlPlane, pod: str) -> tuple[int, str]:
    """(main's exit code, when it finished) once the stopped pod is Failed."""
    got = wait_for(
        lambda: plane.api.get(f"/api/v1/namespaces/{NS}/pods/{pod}"), lambda p: p["status"]["phase"] == "Failed"
    )
    main = next(c for c in got["status"]["containerStatuses"] if c["name"] == "main")
    terminated = main["state"]["terminated"]
    return int(terminated["exitCode"]), str(terminated["finishedAt"])


def release(plane: ControlPlane, *pods: str) -> None:
    for pod in pods:
        patch = json.dumps({"metadata": {"finalizers": None}})
        plane.kubectl("patch", "pod", pod, "-n", NS, "--type=merge", "-p", patch, check=False)


@pytest.mark.parametrize(
    ("spec", "annotations", "code"),
    [
        ({"shareProcessNamespace": True}, {}, 143),  # main is not PID 1: SIGTERM ends it
        ({}, {}, 137),  # main is PID 1 without a handler: the SIGKILL at the end of the grace period
        ({}, {ON_SIGTERM: "75"}, 75),  # main handles SIGTERM (PID 1 or not) and exits 75
    ],
    ids=["shared-namespace", "pid-1", "handler"],
)
def test_kwok_ends_a_deleted_running_pod_as_the_kernel_and_the_kubelet_would(
    control_plane: ControlPlane, pools: None, spec: dict[str, Any], annotations: dict[str, str], code: int
) -> None:
    plane = control_plane
    name = pod_on_a_node(plane, f"stop-{secrets.token_hex(3)}", spec, annotations)
    try:
        plane.kubectl("delete", "pod", name, "-n", NS, "--wait=false")
        # The deletion's deadline as the delete set it (KWOK's own delete of the stopped pod moves it to then).
        deadline = str(plane.api.get(f"/api/v1/namespaces/{NS}/pods/{name}")["metadata"]["deletionTimestamp"])
        exit_code, finished = ended(plane, name)
    finally:
        release(plane, name)
    assert exit_code == code
    if code == 137:  # not before the grace period the delete gave it was over
        assert finished >= deadline, (finished, deadline)
    else:
        assert finished < deadline, (finished, deadline)


def queue_stopped(plane: ControlPlane, stopped: bool) -> None:
    """Stop the ClusterQueue (HoldAndDrain: Kueue evicts its admitted workloads, reason ClusterQueueStopped), or
    start it again (None: the workloads are admitted again)."""
    patch = json.dumps({"spec": {"stopPolicy": "HoldAndDrain" if stopped else "None"}})
    plane.kubectl("patch", "clusterqueue", "cq", "--type=merge", "-p", patch)


def head_pods(plane: ControlPlane, name: str) -> list[dict[str, Any]]:
    return plane.pods(NS, f"jobset.sigs.k8s.io/jobset-name={name},jobset.sigs.k8s.io/replicatedjob-name=pathways-head")


def apply_held(plane: ControlPlane, name: str, *flags: str) -> None:
    """Render the job, hold its head pods listed once stopped (HOLD), and apply it with kubectl."""
    rendered = pwdeploy(plane, "render", *job_flags(name, NS, "--queue", "lq", "--termination-grace-seconds", GRACE,
                                                   *flags), user=False)  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    jobset = next(d for d in yaml.safe_load_all(rendered.stdout) if d and d.get("kind") == "JobSet")
    head = next(rj for rj in jobset["spec"]["replicatedJobs"] if rj["name"] == "pathways-head")
    head["template"]["spec"]["template"]["metadata"]["finalizers"] = [HOLD]
    plane.kubectl("apply", "-f", "-", input_text=yaml.safe_dump(jobset))


def running(plane: ControlPlane, name: str) -> dict[str, Any]:
    found: dict[str, Any] = wait_for(
        lambda: status(plane, name, NS, user=False),
        lambda s: bool(s["groups"]) and all(g["running"] == g["expected"] for g in s["groups"]),
        timeout=120,
    )
    return found


def evicted_head(plane: ControlPlane, name: str) -> tuple[str, int]:
    """Stop the queue, and wait for the head pod Kueue's eviction stopped: (its name, main's exit code)."""
    first = head_pods(plane, name)[0]["metadata"]["name"]
    queue_stopped(plane, True)
    code, _ = ended(plane, first)
    return first, code


def _release_all(plane: ControlPlane, name: str) -> None:
    queue_stopped(plane, False)
    release(plane, *(p["metadata"]["name"] for p in head_pods(plane, name)))
    plane.kubectl("delete", "jobset", name, "-n", NS, "--wait=false", check=False)

    def held() -> list[str]:
        pods = head_pods(plane, name)
        release(plane, *(p["metadata"]["name"] for p in pods if HOLD in (p["metadata"].get("finalizers") or [])))
        return [p["metadata"]["name"] for p in pods]

    wait_for(held, lambda left: not left, timeout=90)


def test_a_kueue_eviction_requeues_the_job_pwdeploy_renders_and_it_resumes(
    control_plane: ControlPlane, pools: None
) -> None:
    """The head pod shares its process namespace: SIGTERM ends main (143), which the head's FailJob rule leaves
    alone; the suspended Job counts none of its pods, the JobSet waits suspended, and once the queue admits the
    workload again the JobSet resumes with new pods, no restart, no failure."""
    plane = control_plane
    kueue_queues(plane, NS, tpu_quota=4)
    name = f"rq-{secrets.token_hex(3)}"
    apply_held(plane, name)
    try:
        running(plane, name)
        stopped, code = evicted_head(plane, name)
        assert code == 143
        # The Job controller has looked at the stopped pod (it no longer counts as terminating) and failed nothing.
        job = wait_for(
            lambda: plane.api.get(f"/apis/batch/v1/namespaces/{NS}/jobs/{name}-pathways-head-0"),
            lambda j: not j["status"].get("terminating"),
        )
        assert not [c for c in job["status"].get("conditions") or [] if c["type"] == "Failed"], job["status"]
        release(plane, stopped)
        queue_stopped(plane, False)
        again = running(plane, name)
        assert again["state"]["restarts"] == 0 and again["state"]["phase"] != "Failed", again
        assert stopped not in [p["metadata"]["name"] for p in head_pods(plane, name)]
        found = diagnosis(plane, name, NS, user=False)["findings"]
        assert not [f for f in found if f["cause"] in ("job-failed", "sigterm-ignored")], found
    finally:
        _release_all(plane, name)


def test_the_same_eviction_fails_a_job_whose_main_is_pid_1_and_diagnose_says_why(
    control_plane: ControlPlane, pools: None
) -> None:
    """The head pod does not share its process namespace (--no-share-process-namespace, as every JobSet was
    rendered before): main, PID 1 without a SIGTERM handler, runs until the SIGKILL at the end of the grace period
    (137), the FailJob rule fails the suspended head Job on it and user_program_failed the JobSet."""
    plane = control_plane
    kueue_queues(plane, NS, tpu_quota=4)
    name = f"pf-{secrets.token_hex(3)}"
    apply_held(plane, name, "--no-share-process-namespace")
    try:
        running(plane, name)
        _, code = evicted_head(plane, name)
        assert code == 137
        found = wait_for(
            lambda: diagnosis(plane, name, NS, user=False),
            lambda d: any(f["cause"] == "sigterm-ignored" for f in d["findings"]),
            timeout=120,
        )
    finally:
        _release_all(plane, name)
    hit = next(f for f in found["findings"] if f["cause"] == "sigterm-ignored")
    assert hit["severity"] == "error"
    assert "FailJobSetFailurePolicyAction" in hit["evidence"], hit
    assert "failed with exit code 137 matching FailJob" in hit["evidence"], hit
    assert "Kueue evicted the job (Evicted " in hit["evidence"] and "ClusterQueueStopped" in hit["evidence"], hit
    assert hit["fix"].startswith("main is PID 1 of its container"), hit
