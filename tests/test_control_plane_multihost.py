"""Multi-host slices on the real control plane: v5p-32 jobs (four VMs a slice, a leader pod and three followers,
exclusive placement: a node pool per slice) on KWOK nodes labelled as GKE labels a TPU node pool's. What a user
watching such a job start sees: JobSet's pod webhook refuses each slice's followers until its leader is scheduled
(kubernetes-sigs/jobset v0.11.1 pkg/webhooks/pod_admission_webhook.go), the Job controller tries again and every
pod runs; status, diagnose and the timeline say so without a false error."""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from pwdeploy import identifiers as ids
from tests.control_plane import ControlPlane
from tests.control_plane.commands import (
    HEAD_POOL,
    JOB_TESTS,
    PWDEPLOY,
    V5P_32_VMS,
    diagnosis,
    job_flags,
    pwdeploy,
    slice_pools,
    status,
    wait_for,
)

pytestmark = JOB_TESTS

SLICES = slice_pools("v5p32", 2)
BROKEN = "pwdeploy.test/broken"  # a taint the workers do not tolerate


@pytest.fixture(scope="module")
def pools(control_plane: ControlPlane) -> Iterator[None]:
    with control_plane.node_pools(HEAD_POOL, *SLICES):
        yield


def v5p_32(name: str, namespace: str, slices: int) -> list[str]:
    return job_flags(name, namespace, "--tpu-type", "v5p-32", "--num-slices", str(slices))


def refusals(plane: ControlPlane, name: str, namespace: str) -> list[dict[str, Any]]:
    """The Job controller's FailedCreate events on the job's worker Jobs."""
    listed = plane.kubectl("get", "events", "-n", namespace, "--field-selector", "reason=FailedCreate", "-o", "json")
    items: list[dict[str, Any]] = json.loads(listed.stdout)["items"]
    return [e for e in items if e["involvedObject"]["name"].startswith(f"{name}-worker-")]


def test_a_healthy_multi_host_job_starts_through_the_webhooks_refusals_with_no_finding(
    control_plane: ControlPlane, pools: None
) -> None:
    """Items 1, 7 and 9: submit --wait says Running once every pod runs; the webhook's refusals happened (the events
    show them, an hour long) and are no finding once the Jobs have their pods; the timeline says "proxy ready" from
    the native sidecar's initContainerStatuses."""
    plane, ns = control_plane, control_plane.user_namespace
    name = f"mh-{secrets.token_hex(3)}"
    submitted = pwdeploy(plane, "submit", *v5p_32(name, ns, 2), "--skip-preflight", "--wait", timeout=240)
    assert submitted.returncode == 0, submitted.stderr
    assert f"job {name} is Running" in submitted.stdout, submitted.stdout

    said = [e["message"] for e in refusals(plane, name, ns)]
    assert any("leader pod not yet scheduled" in m or "follower pod node selector" in m for m in said), said
    found = diagnosis(plane, name, ns)
    assert [f for f in found["findings"] if f["severity"] == "error"] == [], found
    assert not [f for f in found["findings"] if f["cause"] == "pod-create-refused"], found
    assert status(plane, name, ns)["findings"] == []

    timeline = pwdeploy(plane, "logs", name, "-n", ns, "--all")
    assert timeline.returncode == 0, timeline.stderr
    assert any(line.endswith(": proxy ready") for line in timeline.stdout.splitlines()), timeline.stdout


def test_followers_waiting_on_a_leader_that_cannot_schedule_are_info_named_transient(
    control_plane: ControlPlane, pools: None
) -> None:
    """Items 1 and 2: no node pool has the 2x2x2 topology of v5p-16, so each slice's leader waits and the webhook
    refuses its follower on and on: the error is the leader's scheduling, the refusal an info finding named
    transient, counted in Jobs ("2 of 2 worker jobs", the count in -o json)."""
    plane = control_plane
    name = f"mt-{secrets.token_hex(3)}"
    flags = job_flags(name, "default", "--tpu-type", "v5p-16", "--num-slices", "2")
    submitted = pwdeploy(plane, "submit", *flags, "--skip-preflight", user=False)
    assert submitted.returncode == 0, submitted.stderr

    def refused(found: dict[str, Any]) -> bool:
        return any(f["cause"] == "pod-create-refused" and f["count"] == 2 for f in found["findings"])

    found = wait_for(lambda: diagnosis(plane, name, "default", user=False), refused, timeout=90)
    (refusal,) = [f for f in found["findings"] if f["cause"] == "pod-create-refused"]
    assert refusal["severity"] == "info" and refusal["count"] == 2, refusal
    assert refusal["where"].startswith("2 of 2 worker jobs: "), refusal
    assert "(transient)" in refusal["evidence"] and "leader pod" in refusal["fix"], refusal
    assert found["findings"][0]["cause"] == "node-selector", found["findings"]  # the error: the leaders' selector


def test_a_taint_on_the_last_free_node_of_a_slices_pool_is_named_not_another_job(
    control_plane: ControlPlane, pools: None
) -> None:
    """Item 5: one node of the slice's pool is tainted; the leader and two followers take the others, the last
    follower fits nowhere: "1 node(s) had untolerated taint(s), 3 node(s) didn't have free ports" (the ports its
    own slice holds). The finding names the taint, not another job's workers."""
    plane = control_plane
    name = f"mx-{secrets.token_hex(3)}"
    nodes = [f"{pool.name}-{i}" for pool in SLICES for i in range(V5P_32_VMS)]
    broken = nodes[-1]
    for other in SLICES[:-1]:  # the other pools are taken: only the tainted one is left for the slice
        plane.kubectl("taint", "nodes", "-l", f"pwdeploy.test/pool={other.name}", f"{BROKEN}=pool:NoSchedule")
    plane.kubectl("taint", "nodes", broken, f"{BROKEN}=node:NoSchedule")
    try:
        submitted = pwdeploy(plane, "submit", *v5p_32(name, "default", 1), "--skip-preflight", user=False)
        assert submitted.returncode == 0, submitted.stderr

        def named(found: dict[str, Any]) -> bool:
            return any(f["cause"] == "untolerated-taint" for f in found["findings"])

        found = wait_for(lambda: diagnosis(plane, name, "default", user=False), named, timeout=120)
        shown = status(plane, name, "default", user=False)["findings"]
    finally:
        plane.kubectl("taint", "nodes", "--all", f"{BROKEN}-", check=False)
    (taint,) = [f for f in found["findings"] if f["cause"] == "untolerated-taint"]
    assert "had untolerated taint" in taint["evidence"] and "didn't have free ports" in taint["evidence"], taint
    assert "this job's own pods of the same slice hold 3 of the pool's nodes" in taint["fix"], taint
    assert "another job" not in taint["fix"] and not [f for f in found["findings"] if f["cause"] == "tpu-capacity"]
    assert shown[0]["cause"] == "untolerated-taint", shown


def workers(plane: ControlPlane, name: str) -> list[dict[str, Any]]:
    selector = f"jobset.sigs.k8s.io/jobset-name%3D{name},jobset.sigs.k8s.io/replicatedjob-name%3D{ids.WORKER_JOB}"
    return [p for p in plane.pods("default", selector) if not p["metadata"].get("deletionTimestamp")]


def created(pod: dict[str, Any]) -> float:
    return datetime.fromisoformat(pod["metadata"]["creationTimestamp"].replace("Z", "+00:00")).timestamp()


def head_of(plane: ControlPlane, name: str, attempt: int) -> str | None:
    """The running head pod of restart attempt ``attempt``."""
    for pod in plane.pods("default", f"jobset.sigs.k8s.io/jobset-name%3D{name}"):
        labels = pod["metadata"]["labels"]
        if (
            labels.get(ids.REPLICATED_JOB_LABEL) == ids.HEAD_JOB
            and labels.get(ids.RESTART_ATTEMPT_LABEL) == str(attempt)
            and pod["status"].get("phase") == "Running"
            and not pod["metadata"].get("deletionTimestamp")
        ):
            return str(pod["metadata"]["name"])
    return None


def test_a_lost_multi_host_slice_is_replaced_without_the_backoff_and_restarts_when_the_program_says_so(
    control_plane: ControlPlane, pools: None
) -> None:
    """Item 3 on the real Job and JobSet controllers: a drill evicts every pod of a v5p-32 slice (four at once, as
    a lost slice) right after `submit --wait` said Running, when the JobSet's status may not count every Job
    ready yet. The worker Job counts failures per host (backoffLimitPerIndex), so its replacements are created 10 s
    after the lost pods stopped; counted per Job, as before, 4 failures waited 10 s x 2^3 = 80 s. Then main exits
    with the retry code, as retry_on_slice_loss makes it, and the JobSet restarts: the outcome local run predicts.
    Main "reports steps" through the log KWOK serves, so the drill follows until the new attempt's first step."""
    plane = control_plane
    name = f"ml-{secrets.token_hex(3)}"
    flags = [*v5p_32(name, "default", 1), "--max-restarts", "2"]
    submitted = pwdeploy(plane, "submit", *flags, "--skip-preflight", "--wait", user=False, timeout=240)
    assert submitted.returncode == 0, submitted.stderr
    head = wait_for(lambda: head_of(plane, name, 0), bool)
    plane.write_pod_log("default", head, [f"step {n}" for n in range(1, 6)], container=ids.MAIN_CONTAINER)
    before = {p["metadata"]["uid"] for p in workers(plane, name)}
    assert len(before) == V5P_32_VMS
    lost_at = time.time()
    drill = subprocess.Popen(
        [str(PWDEPLOY), "drill", name, "-n", "default", "--lose-slice", "0", "-y", "-o", "json", "--timeout", "150"],
        env=plane.env(user=False), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        new = wait_for(lambda: [p for p in workers(plane, name) if p["metadata"]["uid"] not in before],
                       lambda pods: len(pods) == V5P_32_VMS, timeout=150, every=1.0)  # fmt: skip
        waited = max(created(p) for p in new) - lost_at
        # the evicted pods stop at the end of their 30 s grace period (a worker's PID 1 has no SIGTERM handler:
        # tests/control_plane/kwok.py) and are replaced only once stopped (podReplacementPolicy Failed), after 10 s
        # of backoff and the controllers' own pace: about 41 s. Counted per Job, the first replacement could not
        # come before 30 + 80 = 110 s
        assert waited < 60, f"the replacements came {waited:.0f} s after the loss"
        assert {p["metadata"]["annotations"].get("batch.kubernetes.io/job-index-failure-count") for p in new} == {"1"}
        plane.exit_pod("default", head, ids.RETRY_EXIT_CODE, container=ids.MAIN_CONTAINER)
        new_head = wait_for(lambda: head_of(plane, name, 1), bool, timeout=120)
        plane.write_pod_log("default", new_head, ["step 4", "step 5", "step 6"], container=ids.MAIN_CONTAINER)
        out, err = drill.communicate(timeout=200)
    finally:
        if drill.poll() is None:
            drill.kill()
        if drill.stdout is not None and not drill.stdout.closed:  # a drill that ended before a failed wait: its
            drill.communicate()  # pipes left open were an unraisable ResourceWarning in a later test
    assert drill.returncode == 0, err
    report = json.loads(out)
    assert report["predicted"]["outcome"] == "jobset_restart" and report["rule_fired"] == "jobset_restart", report
    assert report["restarts_consumed"] == 1 and report["first_failed_job"] == f"{name}-{ids.HEAD_JOB}-0", report
    real = json.loads(plane.kubectl("get", "jobset", name, "-n", "default", "-o", "json").stdout)
    assert real["status"].get("restarts") == 1, real["status"]


def test_the_webhooks_refusal_of_a_changed_spec_keeps_its_reason_not_the_quoted_spec(
    control_plane: ControlPlane,
) -> None:
    """Item 9: a JobSet applied over one of another config (what a submit that loses a race to another does):
    the real JobSet webhook quotes the whole new spec (6.8 KB) before its reason; the error pwdeploy raises leaves
    the spec out and keeps the reason."""
    import yaml

    from pwdeploy.cluster import jobsets as js
    from pwdeploy.kube.api_errors import WebhookError
    from pwdeploy.kube.kubeconfig import load_kube

    plane = control_plane
    name = f"im-{secrets.token_hex(3)}"
    rendered = [
        next(d for d in yaml.safe_load_all(pwdeploy(plane, "render", *v5p_32(name, "default", n)).stdout) if d)
        for n in (1, 2)
    ]
    kube = load_kube(plane.admin_kubeconfig)
    js.apply_jobset(kube, rendered[0], dry_run=False)
    try:
        with pytest.raises(WebhookError) as refused:
            js.apply_jobset(kube, rendered[1], dry_run=False)
    finally:
        plane.kubectl("delete", "jobset", name, "-n", "default", "--wait=false", check=False)
    message = refused.value.message
    assert "spec.replicatedJobs: Invalid value (" in message and message.endswith("left out): field is immutable")
    assert len(message) < 600 and '"pathways-head"' not in message, message
