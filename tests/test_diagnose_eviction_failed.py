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
