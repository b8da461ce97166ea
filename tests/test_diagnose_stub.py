"""`pwdeploy diagnose` against StubKubeApiServer (a loopback stub, not an API server): one fixture per cause
(tests/fixtures/diagnose, each citing where its texts come from), several causes at once, grouping, a missing job,
and the requests it sends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pwdeploy.cluster.diagnose import CAUSES, diagnose
from pwdeploy.cluster.diagnose.read import MAX_LOGS
from tests.conftest import ClusterCli
from tests.diagnose_cases import load, names, serve
from tests.kube_stub import StubKubeApiServer


def run_json(cluster_cli: ClusterCli, kc: list[str], name: str = "dp-example") -> tuple[int, dict[str, Any]]:
    result = cluster_cli(["diagnose", name, *kc, "-o", "json"])
    assert result.stdout, result.output
    return result.exit_code, json.loads(result.stdout)


@pytest.mark.parametrize("case", names())
def test_each_fixture_names_its_cause_against_the_stub(
    case: str, stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    fixture = load(case)
    serve(stub, fixture)
    code, report = run_json(cluster_cli, kc)
    expected = fixture["expect"]
    findings = report["findings"]
    for f in findings:
        # The one shape of every finding (docs/output.md), and diagnose's own keys from before it (a contract).
        assert set(f) == {"id", "severity", "where", "message", "fix", "source", "count", "cause", "evidence"}
        assert f["cause"] in CAUSES and f["severity"] in ("error", "warning", "info")
        assert (f["id"], f["message"]) == (f["cause"], f["evidence"]) and f["source"]
        assert f["count"] >= 1, f
    if expected["cause"] is None:
        assert findings == [] and code == 0
        assert report["summary"] == "running 3 of 3 pods"
        return
    assert findings, report
    assert (findings[0]["cause"], findings[0]["severity"]) == (expected["cause"], expected["severity"]), findings
    assert code == (10 if expected["severity"] == "error" else 0)


def test_every_cause_of_the_contract_has_a_fixture() -> None:
    covered = {load(case)["expect"]["cause"] for case in names()}
    contract = set(CAUSES) - {"unschedulable", "image-pull", "container-config", "job-failed"}  # extensions
    assert contract <= covered, contract - covered


def test_evidence_quotes_the_message_and_fix_names_the_field_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    serve(stub, load("oom-killed"))
    _, report = run_json(cluster_cli, kc)
    (oom,) = report["findings"]
    assert oom["where"] == "head pod dp-example-pathways-head-0-0-x7k2p"
    assert "OOMKilled (exit 137)" in oom["evidence"] and "memory limit 100Gi" in oom["evidence"]
    assert oom["fix"] == "raise main.memory (now 100Gi)"


def test_missing_secret_fix_names_the_secret_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    serve(stub, load("missing-secret"))
    _, report = run_json(cluster_cli, kc)
    assert 'secret \\"hf-token\\" not found' in json.dumps(report["findings"][0]["evidence"])
    assert "kubectl create secret generic hf-token -n default" in report["findings"][0]["fix"]


def test_gcs_permission_names_the_bucket_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    serve(stub, load("gcs-permission"))
    _, report = run_json(cluster_cli, kc)
    assert [f["cause"] for f in report["findings"]] == ["gcs-permission"]  # not also a generic crash
    assert "gs://stub-bucket" in report["findings"][0]["fix"]
    assert "pathways-proxy log" in report["findings"][0]["evidence"]


def test_crash_quotes_the_last_log_lines_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    serve(stub, load("crash"))
    _, report = run_json(cluster_cli, kc)
    assert "No module named 'optax'" in report["findings"][0]["evidence"]
    assert "exit 1" in report["findings"][0]["evidence"]


# ---------------------------------------------------------------------------------------------- several at once


def test_several_causes_are_ordered_by_severity_then_by_what_blocks_first_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    """Workers cannot be scheduled, the head cannot pull its image and one worker was preempted before: the
    scheduling failure comes first (the pods never started, so their images are moot), then the image, then the
    warning."""
    fixture = load("image-not-found")
    fixture["pods"]["worker"] = load("tpu-capacity")["pods"]["worker"]
    fixture["events"] += load("tpu-capacity")["events"]
    serve(stub, fixture)
    preempted = load("preempted")["pods"]["worker"]["status"]
    pod = stub.get("pods", "default", "dp-example-worker-1-0-x7k2p")
    assert pod is not None
    pod["status"] = preempted
    code, report = run_json(cluster_cli, kc)
    assert [(f["cause"], f["severity"]) for f in report["findings"]] == [
        ("tpu-capacity", "error"),
        ("image-not-found", "error"),
        ("preempted", "warning"),
    ]
    assert report["findings"][0]["where"].startswith("1 of 2 worker pods: ")
    assert code == 10


def test_text_output_lists_findings_and_exit_code_10_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    serve(stub, load("tpu-capacity"))
    result = cluster_cli(["diagnose", "dp-example", *kc])
    assert result.exit_code == 10
    lines = result.stdout.splitlines()
    assert lines[0].startswith("job dp-example  namespace default: scheduling: 1 of 3 pods scheduled")
    # The one text rendering of a finding (as check's): where, severity and id, the evidence; the fix indented.
    assert lines[2].startswith("2 of 2 worker pods: dp-example-worker-0-0-x7k2p, dp-example-worker-1-0-x7k2p: ")
    assert ': error tpu-capacity: "0/6 nodes are available: 2 Insufficient google.com/tpu' in lines[2]
    assert lines[3].startswith("    fix: every TPU node that matches ")
    assert "error: job dp-example: 1 error finding(s): tpu-capacity" in result.stderr


# ---------------------------------------------------------------------------------------------- grouping and scale


def test_64_worker_pods_failing_alike_are_one_finding_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    serve(stub, load("shm-exhausted"), slices=64)
    _, report = run_json(cluster_cli, kc)
    (finding,) = report["findings"]
    assert finding["cause"] == "shm-exhausted"
    assert finding["where"].startswith("64 of 64 worker pods: dp-example-worker-0-0-x7k2p, ")
    assert finding["where"].endswith("(+61 more)")
    assert finding["fix"] == "/dev/shm filled up: raise tpu.shm_size (now 16Gi)"


def test_requests_do_not_grow_with_pods_and_logs_are_bounded_against_the_stub(
    stub: StubKubeApiServer, tmp_path: Path, kube: Any
) -> None:
    """2 slices and 64 slices of crashing workers: the same number of requests; at most MAX_LOGS logs."""
    crash = {
        "pods": {
            "worker": {
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "PodScheduled", "status": "True"}],
                    "containerStatuses": [
                        {
                            "name": "pathways-worker",
                            "restartCount": 2,
                            "state": {"running": {}},
                            "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
                        }
                    ],
                }
            }
        },
        "logs": [{"for": "worker", "container": "pathways-worker", "previous": True, "text": "F0101 check failed\n"}],
    }
    counts = []
    for slices, job in ((2, "small"), (64, "big")):
        serve(stub, crash, job=job, slices=slices)
        before = len(stub.requests)
        found = diagnose(kube, "default", job)
        counts.append(len(stub.requests) - before)
        assert found.requests == counts[-1]
        assert [f.id for f in found.findings] == ["crash"]
        assert found.findings[0].severity == "warning"  # restarted, running again
    assert counts[0] == counts[1]
    logs = [r for r in stub.requests if r.path.endswith("/log")]
    assert 0 < len(logs) <= 2 * MAX_LOGS
    assert all(r.q("tailLines") and r.q("limitBytes") for r in logs)


def test_a_job_that_does_not_exist_is_exit_4_against_the_stub(cluster_cli: ClusterCli, kc: list[str]) -> None:
    result = cluster_cli(["diagnose", "nope", *kc, "-n", "team"])
    assert result.exit_code == 4
    assert "jobset nope not found in namespace team" in result.stderr


def break_list(stub: StubKubeApiServer, which: str) -> None:
    """The stub answers lists of ``which`` with ``items`` that is not a list."""
    from tests.kube_answers import Reply

    original = stub._list

    def broken(r: Any, plural: str, *args: Any) -> None:
        if plural == which:
            raise Reply(200, {"kind": "List", "items": "not a list"})
        original(r, plural, *args)

    stub._list = broken  # type: ignore[method-assign,assignment]


def test_a_list_answer_without_items_is_a_clear_error_against_the_stub(stub: StubKubeApiServer, kube: Any) -> None:
    from pwdeploy.errors import ClusterError

    serve(stub, load("crash"))
    break_list(stub, "pods")
    with pytest.raises(ClusterError, match="with `items` that is a string, not a list"):
        diagnose(kube, "default", "dp-example")


def test_an_events_answer_of_the_wrong_shape_is_a_note_beside_the_findings_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    """Events are context: a wrongly shaped events list is said (what was wrong with it), and the findings from
    the pods still stand."""
    serve(stub, load("image-not-found"))
    break_list(stub, "events")
    found = diagnose(kube, "default", "dp-example")
    assert [f.id for f in found.findings] == ["image-pull"]  # the pod's status, without the kubelet's event
    (note,) = found.notes
    assert "the job's events could not be read" in note and "`items` that is a string, not a list" in note, note


def test_kueue_is_read_only_for_a_queued_job_against_the_stub(stub: StubKubeApiServer, kube: Any) -> None:
    serve(stub, load("healthy-running"))
    diagnose(kube, "default", "dp-example")
    assert not stub.sent("GET", "kueue.x-k8s.io")
    serve(stub, load("kueue-pending"), job="queued")
    found = diagnose(kube, "default", "queued")
    assert stub.sent("GET", "/workloads")
    assert found.summary == "waiting for admission (Kueue) of 3 pods"


def test_waiting_for_quota_others_hold_is_a_warning_against_the_stub(stub: StubKubeApiServer, kube: Any) -> None:
    fixture = load("kueue-pending")
    fixture["workload"]["status"]["conditions"][0]["message"] = (
        "couldn't assign flavors to pod set worker: insufficient unused quota for google.com/tpu in flavor v5p, "
        "4 more needed"
    )
    serve(stub, fixture)
    found = diagnose(kube, "default", "dp-example")
    assert [(f.id, f.severity) for f in found.findings] == [("kueue-pending", "warning")]


# ---------------------------------------------------------------------------------------------- status


def test_status_shows_the_first_findings_one_line_each_without_more_requests_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    fixture = load("image-not-found")
    fixture["pods"]["worker"] = load("tpu-capacity")["pods"]["worker"]
    serve(stub, fixture)
    before = len(stub.requests)
    result = cluster_cli(["status", "dp-example", *kc])
    assert result.exit_code == 0, result.output  # status reports; only diagnose exits 10
    sent = stub.requests[before:]
    events = [r for r in sent if r.path.endswith("/events")]
    # the JobSet, its pods, its Jobs, and the events of the JobSet and of each pod in trouble (3), by uid
    assert len(sent) == 3 + len(events) and len(events) == 1 + 3, [r.path for r in sent]
    assert all((r.q("fieldSelector") or "").startswith("involvedObject.uid=") for r in events)
    lines = result.stdout.splitlines()
    start = lines.index("findings (evidence and fixes: pwdeploy diagnose dp-example -n default):")
    assert lines[start + 1].startswith("  2 of 2 worker pods: dp-example-worker-0-0-x7k2p, ")
    assert ": error tpu-capacity: " in lines[start + 1]
    assert lines[start + 2].startswith("  head pod dp-example-pathways-head-0-0-x7k2p: error image-not-found: ")
    assert all(len(line) <= 162 for line in lines[start + 1 : start + 3])
    assert lines[start + 3] == ""


def test_status_of_a_healthy_job_has_no_findings_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    serve(stub, load("healthy-running"))
    result = cluster_cli(["status", "dp-example", *kc])
    assert result.exit_code == 0 and "findings" not in result.stdout


def test_a_pod_that_is_not_an_object_is_a_clear_error_exit_4_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    serve(stub, load("crash"))
    stub.put(
        "pods",
        {"metadata": {"name": "odd", "labels": {"jobset.sigs.k8s.io/jobset-name": "dp-example"}}, "status": "Running"},
    )
    result = cluster_cli(["diagnose", "dp-example", *kc])
    assert result.exit_code == 4, result.output
    assert "answered the request to list pods in namespace 'default' with" in result.stderr
    assert "Traceback" not in result.output


# ---------------------------------------------------------------------------------------------- more variants


def test_proxy_and_server_images_of_different_releases_are_a_version_mismatch_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    old = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:jax-0.9.1"
    serve(stub, {"pods": {"worker": {"containers": {"pathways-worker": {"image": old}}}}})
    found = diagnose(kube, "default", "dp-example")
    (finding,) = found.findings
    assert (finding.id, finding.severity, finding.where) == ("version-mismatch", "error", "jobset dp-example")
    assert "server:jax-0.9.1" in finding.message and "proxy_server:20261001-jax_0.10.2" in finding.message


def test_a_triggered_scale_up_makes_unschedulable_pods_a_warning_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    fixture = load("node-selector")
    fixture["events"] = [load("scale-up-failed")["events"][0]]  # TriggeredScaleUp only
    serve(stub, fixture)
    found = diagnose(kube, "default", "dp-example")
    assert [(f.id, f.severity) for f in found.findings] == [("node-selector", "warning")]
    assert "pod triggered scale-up" in found.findings[0].message
    assert not found.errors


def test_not_triggered_scale_up_is_a_warning_beside_the_scheduler_error_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    # Text: cluster-autoscaler NotTriggerScaleUp "pod didn't trigger scale-up: ..." (kubernetes/autoscaler
    # cluster-autoscaler/processors/status/eventing_scale_up_processor.go).
    fixture = load("node-selector")
    fixture["events"] = [
        {
            "for": "worker",
            "type": "Normal",
            "reason": "NotTriggerScaleUp",
            "message": "pod didn't trigger scale-up: 2 max node group size reached, 1 node(s) didn't match Pod's node "
            "affinity/selector",
        }
    ]
    serve(stub, fixture)
    found = diagnose(kube, "default", "dp-example")
    assert [(f.id, f.severity) for f in found.findings] == [
        ("node-selector", "error"),
        ("scale-up-failed", "warning"),
    ]


def test_a_queue_label_without_kueue_is_an_error_against_the_stub(stub: StubKubeApiServer, kube: Any) -> None:
    stub.kueue_version = None
    serve(stub, {"jobset": {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "q"}}, "spec": {"suspend": True}}})
    found = diagnose(kube, "default", "dp-example")
    assert [(f.id, f.severity) for f in found.findings] == [("kueue-pending", "error")]
    assert "does not serve kueue.x-k8s.io" in found.findings[0].message


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        ("step 14030: saved checkpoint to gs://my-bucket/run1/14030", None),
        ("loading gs://bkt/data/shard-00403-of-01024.tfrecord", None),
        ("E gcs.cc:211] PERMISSION_DENIED: HTTP response code 403 ... gs://stub-bucket/x", "gcs-permission"),
        (
            "google.api_core.exceptions.Forbidden: 403 GET https://storage.googleapis.com/b: 403 Forbidden",
            "gcs-permission",
        ),
    ],
)
def test_a_number_403_in_a_healthy_log_line_is_not_a_gcs_refusal(line: str, cause: str | None) -> None:
    from pwdeploy.cluster.diagnose.pathways import classify

    found = classify([line])
    assert (found[0].cause.id if found else None) == cause


def _snapshot(pods: list[dict[str, Any]], jobset: dict[str, Any] | None = None) -> Any:
    from datetime import UTC, datetime

    from pwdeploy.cluster.diagnose.read import Snapshot

    return Snapshot("j", "default", jobset or {"metadata": {"name": "j"}}, pods, [], datetime.now(UTC))


def test_a_pod_held_by_a_scheduling_gate_is_waiting_not_unschedulable() -> None:
    from pwdeploy.cluster.diagnose import scheduling

    gated = {
        "metadata": {"name": "j-worker-0-0-x", "labels": {}},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "SchedulingGated",
                    "message": "Scheduling is blocked due to non-empty scheduling gates",
                }
            ],
        },
    }
    assert scheduling.observations(_snapshot([gated])) == []


def test_a_jobset_suspended_without_a_queue_is_information_not_a_kueue_error() -> None:
    from pwdeploy.cluster.diagnose import queueing

    snap = _snapshot([], {"metadata": {"name": "j", "labels": {}}, "spec": {"suspend": True}})
    snap.kueue_installed = True
    found = queueing.observations(snap)
    assert [(o.severity, o.cause) for o in found] == [("info", "kueue-pending")]
