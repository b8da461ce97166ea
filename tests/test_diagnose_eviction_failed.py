"""A JobSet that failed because a Kueue eviction stopped main (exit 143) under a head podFailurePolicy that fails
on 143 (what pwdeploy rendered before 143 became a retry code): diagnose names that, not only "a Job failed".
The objects are as the real Job, JobSet and Kueue controllers left them (tests/test_control_plane_diagnose.py
reproduced it); the Job controller's message format is kubernetes/kubernetes
pkg/controller/job/pod_failure_policy.go."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pwdeploy.cluster.diagnose import from_snapshot
from pwdeploy.cluster.diagnose.findings import as_json
from pwdeploy.cluster.diagnose.read import Snapshot

NAME = "pr-b0eab0"
FAILED = {
    "type": "Failed",
    "status": "True",
    "reason": "FailJobSetFailurePolicyAction",
    "message": f"applying FailJobSet failure policy action (first failed job: {NAME}-pathways-head-0)",
}


EVICTED = {
    "type": "Evicted",
    "status": "False",
    "reason": "QuotaReserved",
    "message": "Previously: Exceeded the PodsReady timeout default/jobset-pr-b0eab0-89235",
}


def head_job(code: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{NAME}-pathways-head-0",
            "labels": {"jobset.sigs.k8s.io/replicatedjob-name": "pathways-head"},
        },
        "spec": {"suspend": False},
        "status": {
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "PodFailurePolicy",
                    "message": f"Container main for pod default/{NAME}-pathways-head-0-0-x7k2p failed with exit "
                    f"code {code} matching FailJob rule at index 1",
                }
            ]
        },
    }


def diagnosis(job: dict[str, Any], evicted: bool = True) -> dict[str, Any]:
    jobset = {"metadata": {"name": NAME}, "spec": {"replicatedJobs": []}, "status": {"conditions": [FAILED]}}
    snap = Snapshot(NAME, "default", jobset, [], [], datetime(2026, 12, 5, tzinfo=UTC), [job])
    if evicted:
        snap.workload = {"metadata": {"name": "jobset-pr-b0eab0-89235"}, "status": {"conditions": [EVICTED]}}
    found = [f for f in from_snapshot(snap).findings if f.id == "job-failed"]
    assert len(found) == 1
    return as_json(found[0])


def test_a_head_stopped_by_sigterm_when_kueue_evicted_the_job_is_named_with_the_fix() -> None:
    hit = diagnosis(head_job(143))
    assert hit["severity"] == "error"
    assert f"Job {NAME}-pathways-head-0 failed: " in hit["evidence"]
    assert "failed with exit code 143 matching FailJob" in hit["evidence"]
    assert hit["fix"].startswith(
        "main was stopped by SIGTERM (exit code 143) when Kueue evicted the job (Evicted QuotaReserved: "
        '"Previously: Exceeded the PodsReady timeout'
    )
    assert "render it with this pwdeploy" in hit["fix"] and "--replace" in hit["fix"]


def test_a_head_stopped_by_sigterm_without_an_eviction_says_it_was_stopped_from_outside() -> None:
    hit = diagnosis(head_job(143), evicted=False)
    assert "stopped by SIGTERM (exit code 143) from outside (a deleted pod, a Kueue eviction)" in hit["fix"]


def test_another_failure_of_the_head_keeps_the_plain_finding() -> None:
    hit = diagnosis(head_job(1))
    assert hit["fix"].startswith("a Job of the JobSet failed: the other findings say why")
    assert "exit code 1 matching" not in hit["evidence"]


# Exit 137 after a stop from outside: main, PID 1 of its container without a SIGTERM handler (a head pod that does not
# share its process namespace), was SIGKILLed at the end of the grace period: a finding of its own, sigterm-ignored.


def head_template(shared: bool) -> dict[str, Any]:
    pod: dict[str, Any] = {"containers": [{"name": "main"}]}
    if shared:
        pod["shareProcessNamespace"] = True
    return {"name": "pathways-head", "template": {"spec": {"template": {"spec": pod}}}}


def stopped(
    code: int = 137,
    *,
    evicted: bool = True,
    shared: bool = False,
    pods: list[dict[str, Any]] | None = None,
    suspended: bool = False,
) -> list[dict[str, Any]]:
    jobset = {
        "metadata": {"name": NAME},
        "spec": {"replicatedJobs": [head_template(shared)], **({"suspend": True} if suspended else {})},
        "status": {"conditions": [FAILED]},
    }
    snap = Snapshot(NAME, "default", jobset, pods or [], [], datetime(2026, 12, 5, tzinfo=UTC), [head_job(code)])
    if evicted:
        snap.workload = {"metadata": {"name": "jobset-pr-b0eab0-89235"}, "status": {"conditions": [EVICTED]}}
    return [as_json(f) for f in from_snapshot(snap).findings]


def head_pod(reason: str, deleted: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"{NAME}-pathways-head-0-0-x7k2p",
        "labels": {"jobset.sigs.k8s.io/replicatedjob-name": "pathways-head"},
    }
    if deleted:
        meta["deletionTimestamp"] = "2026-12-05T00:00:30Z"
    terminated = {"exitCode": 137, "reason": reason}
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "main", "resources": {"limits": {"memory": "100Gi"}}}]},
        "status": {"phase": "Failed", "containerStatuses": [{"name": "main", "state": {"terminated": terminated}}]},
    }


def only(found: list[dict[str, Any]], cause: str) -> dict[str, Any]:
    (hit,) = [f for f in found if f["cause"] == cause]
    return hit


def test_an_eviction_that_ended_in_137_under_a_head_pod_that_does_not_share_its_namespace_names_pid_1() -> None:
    found = stopped()
    hit = only(found, "sigterm-ignored")
    assert not [f for f in found if f["cause"] == "job-failed"], found
    assert hit["severity"] == "error" and hit["where"] == f"jobset {NAME}"
    assert "failed with exit code 137 matching FailJob" in hit["evidence"]
    assert (
        'Kueue evicted the job (Evicted QuotaReserved: "Previously: Exceeded the PodsReady timeout' in hit["evidence"]
    )
    assert hit["fix"].startswith("main is PID 1 of its container (this JobSet's head pod does not share its process")
    assert "render it again with this pwdeploy" in hit["fix"] and "stop_on_sigterm" in hit["fix"]
    assert "--replace" in hit["fix"]


def test_under_a_shared_namespace_137_says_main_did_not_end_within_the_grace_period() -> None:
    hit = only(stopped(shared=True), "sigterm-ignored")
    assert hit["fix"].startswith("main did not end within terminationGracePeriodSeconds of the stop's SIGTERM")
    assert "scheduling.termination_grace_seconds" in hit["fix"]


def test_a_deleted_head_pod_or_a_suspended_jobset_is_a_stop_from_outside_too() -> None:
    by_hand = only(stopped(evicted=False, pods=[head_pod("Error")]), "sigterm-ignored")
    assert f"the head pod {NAME}-pathways-head-0-0-x7k2p was deleted (deletionTimestamp" in by_hand["evidence"]
    suspended = only(stopped(evicted=False, suspended=True), "sigterm-ignored")
    assert "the JobSet was suspended" in suspended["evidence"]


def test_137_without_a_stop_from_outside_or_from_the_oom_killer_is_not_this_finding() -> None:
    assert not [f for f in stopped(evicted=False) if f["cause"] == "sigterm-ignored"]
    found = stopped(pods=[head_pod("OOMKilled", deleted=False)])
    assert not [f for f in found if f["cause"] == "sigterm-ignored"], found
    assert only(found, "oom-killed")["evidence"].startswith("container main terminated: OOMKilled (exit 137)")


def test_a_sidecar_the_kubelet_killed_after_main_ended_is_not_called_a_crash() -> None:
    """In a head pod that does not share its process namespace, the proxy is PID 1 of its container: once main has
    ended, the kubelet stops it, and without a SIGTERM handler it ends in the SIGKILL (137), not a crash."""
    ended = {"terminated": {"exitCode": 137, "reason": "Error"}}
    pod = {
        "metadata": {
            "name": f"{NAME}-pathways-head-0-0-x7k2p",
            "labels": {"jobset.sigs.k8s.io/replicatedjob-name": "pathways-head"},
        },
        "spec": {
            "initContainers": [{"name": "pathways-proxy", "restartPolicy": "Always"}],
            "containers": [{"name": "main"}],
        },
        "status": {
            "phase": "Succeeded",
            "initContainerStatuses": [{"name": "pathways-proxy", "state": ended}],
            "containerStatuses": [{"name": "main", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
        },
    }
    jobset = {"metadata": {"name": NAME}, "spec": {"replicatedJobs": []}, "status": {}}
    snap = Snapshot(NAME, "default", jobset, [pod], [], datetime(2026, 12, 5, tzinfo=UTC), [])
    assert [f.id for f in from_snapshot(snap).findings if f.id == "crash"] == []
