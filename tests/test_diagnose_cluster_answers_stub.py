"""diagnose on what a real cluster answers (issues 38 and 33), against StubKubeApiServer (a loopback stub, not an
API server) serving the real texts of tests/fixtures/diagnose: busy nodes, Kueue's texts since v0.14.4 and its
evictions, pod creation refusals, no JobSet controller, what could not be read, recovered failures, restarts."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from pwdeploy.cluster.diagnose import diagnose
from pwdeploy.cluster.diagnose.pathways import classify
from tests.conftest import ClusterCli
from tests.diagnose_cases import load, serve
from tests.kube_stub import StubKubeApiServer


def _only(found: Any, cause: str) -> Any:
    (finding,) = [f for f in found.findings if f.id == cause]
    return finding


def test_workers_on_nodes_whose_host_ports_are_held_are_capacity_not_a_selector_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    serve(stub, load("tpu-capacity-busy-ports"))
    found = diagnose(kube, "default", "dp-example")
    assert [f.id for f in found.findings] == ["tpu-capacity"]
    fix = found.findings[0].fix
    assert "held by other pods on the same host ports" in fix and "create a TPU node pool" not in fix
    assert "(ports 8080, 8471, 29005, 29006; the workers use hostNetwork)" in fix  # the live pod's own ports


def test_a_head_whose_host_ports_are_held_is_not_told_to_lower_its_memory_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    serve(stub, load("head-busy-ports"))
    finding = _only(diagnose(kube, "default", "dp-example"), "head-unschedulable")
    assert finding.severity == "error"
    assert "another job's head" in finding.fix and "lower main.memory" not in finding.fix
    assert "(ports 29000, 29001, 29002; the head uses hostNetwork)" in finding.fix


def test_kueue_exceeds_max_quota_is_an_error_not_a_wait_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    serve(stub, load("kueue-exceeds-max-quota"))
    result = cluster_cli(["diagnose", "dp-example", *kc, "-o", "json"])
    (finding,) = json.loads(result.stdout)["findings"]
    assert (finding["cause"], finding["severity"], result.exit_code) == ("kueue-pending", "error", 10)
    assert "more than the ClusterQueue can ever give" in finding["fix"]


def test_an_unreadable_workload_is_a_note_not_silence_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    serve(stub, load("kueue-pending"))
    stub.forbid("list", "workloads")
    result = cluster_cli(["diagnose", "dp-example", *kc, "-o", "json"])
    report = json.loads(result.stdout)
    assert report["findings"] == [] and result.exit_code == 0
    (note,) = report["notes"]
    assert "Kueue Workload could not be read" in note
    text = cluster_cli(["diagnose", "dp-example", *kc]).stdout
    assert "no findings in what could be read" in text and "note: the job's Kueue Workload" in text


def test_a_log_the_kubelet_does_not_give_is_a_note_against_the_stub(stub: StubKubeApiServer, kube: Any) -> None:
    serve(stub, load("crash"))
    stub.fail("GET", r"/log$", 500, times=20)  # a kubelet behind the API server that refuses
    found = diagnose(kube, "default", "dp-example")
    assert any(f.id == "crash" for f in found.findings)
    assert found.notes and all("could not be read" in note for note in found.notes)


def test_a_readable_job_has_no_notes_against_the_stub(stub: StubKubeApiServer, kube: Any) -> None:
    serve(stub, load("crash"))
    assert diagnose(kube, "default", "dp-example").notes == ()


def test_a_worker_failure_the_job_recovered_from_is_a_warning_exit_0_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    serve(stub, load("crash-replaced"))
    result = cluster_cli(["diagnose", "dp-example", *kc, "-o", "json"])
    (finding,) = json.loads(result.stdout)["findings"]
    assert (finding["cause"], finding["severity"], result.exit_code) == ("crash", "warning", 0)
    assert "the Job replaced the pod: dp-example-worker-0-0-x7k2p runs in its place" in finding["evidence"]


def test_a_failed_pod_without_a_replacement_stays_an_error_against_the_stub(stub: StubKubeApiServer, kube: Any) -> None:
    fixture = copy.deepcopy(load("crash-replaced"))
    fixture["pods"] = {"worker": {"status": fixture["extra_pods"][0]["status"]}}  # its successor failed too
    serve(stub, fixture)
    assert {f.severity for f in diagnose(kube, "default", "dp-example").findings if f.id == "crash"} == {"error"}


def test_a_disrupted_head_is_replaced_by_its_job_without_a_restart_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    serve(stub, load("preempted-head"))
    head = _only(diagnose(kube, "default", "dp-example"), "preempted")
    assert "replaces the pod without a JobSet restart" in head.fix and "max_restarts" not in head.fix


def test_a_disrupted_worker_restarts_the_jobset_against_the_stub(stub: StubKubeApiServer, kube: Any) -> None:
    serve(stub, load("preempted"))
    worker = _only(diagnose(kube, "default", "dp-example"), "preempted")
    assert "restarts the job within scheduling.max_restarts" in worker.fix


def test_a_jobset_no_controller_reconciles_is_an_error_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    serve(stub, load("no-jobset-controller"))
    result = cluster_cli(["diagnose", "dp-example", *kc, "-o", "json"])
    report = json.loads(result.stdout)
    assert [f["cause"] for f in report["findings"]] == ["no-jobset-controller"] and result.exit_code == 10
    assert "jobset-system" in report["findings"][0]["fix"]


def test_a_jobset_created_just_now_is_not_said_to_lack_a_controller_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    fixture = copy.deepcopy(load("no-jobset-controller"))
    fixture["jobset"] = {"metadata": {"creationTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}}
    serve(stub, fixture)
    assert diagnose(kube, "default", "dp-example").findings == []


def test_status_says_no_controller_reconciles_the_jobset_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    serve(stub, load("no-jobset-controller"))
    result = cluster_cli(["status", "dp-example", *kc, "-o", "json"])
    assert [f["cause"] for f in json.loads(result.stdout)["findings"]] == ["no-jobset-controller"]


def test_a_jobset_with_a_status_is_not_said_to_lack_a_controller_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    fixture = copy.deepcopy(load("no-jobset-controller"))
    fixture["jobset"] = {"status": {"replicatedJobsStatus": [{"name": "worker", "ready": 0}]}}
    serve(stub, fixture)
    assert diagnose(kube, "default", "dp-example").findings == []


def test_the_leader_pod_deadlock_names_the_pod_and_the_jobset_version_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    serve(stub, load("pod-create-refused-leader"))
    finding = _only(diagnose(kube, "default", "dp-example"), "pod-create-refused")
    assert finding.severity == "error" and finding.where.startswith("2 of ")
    assert "kubectl delete pod dp-example-worker-0-0 -n default" in finding.fix
    assert "v0.12.0" in finding.fix and "kubernetes-sigs/jobset#1276" in finding.fix
    assert "expected 1 leader pod (dp-example-worker-0-0), but got 2" in finding.message


TRANSIENT_REFUSALS = [  # kubernetes-sigs/jobset v0.11.1 pkg/webhooks/pod_admission_webhook.go, ValidateCreate
    "expected 1 leader pod (dp-example-worker-0-0), but got 0. this is an expected, transient error",
    "leader pod not yet scheduled, not creating follower pod. this is an expected, transient error",
    "follower pod node selector not set",
    "follower pod node selector for topology domain not found. missing selector: cloud.google.com/gke-nodepool",
]


@pytest.mark.parametrize("text", TRANSIENT_REFUSALS)
def test_the_webhooks_transient_refusals_are_info_named_transient_while_they_block_against_the_stub(
    stub: StubKubeApiServer, kube: Any, text: str
) -> None:
    """While a slice starts, JobSet's webhook refuses its followers until the leader is scheduled: every healthy
    multi-host job sees it. While the Jobs still lack their followers it is an info finding named transient (no
    exit 10), counted in worker Jobs (one per slice), never an error."""
    fixture = copy.deepcopy(load("pod-create-refused-leader"))
    fixture["events"][0]["message"] = f'Error creating: admission webhook "vpod.kb.io" denied the request: {text}'
    serve(stub, fixture)
    found = diagnose(kube, "default", "dp-example")
    finding = _only(found, "pod-create-refused")
    assert finding.severity == "info" and not found.errors
    assert finding.where.startswith("2 of 2 worker jobs: ") and finding.count == 2
    assert "(transient)" in finding.message and "transient" in finding.fix


@pytest.mark.parametrize("text", [*TRANSIENT_REFUSALS, "but got 2"])
def test_a_refusal_the_job_got_past_is_history_not_a_finding_against_the_stub(
    stub: StubKubeApiServer, kube: Any, text: str
) -> None:
    """The Job has every pod it runs (the Job controller's next try got through): the refusal events, which stay
    for an hour, are no finding, whatever they say; nor is a refusal last seen more than ten minutes ago."""
    fixture = copy.deepcopy(load("pod-create-refused-leader"))
    if text != "but got 2":
        fixture["events"][0]["message"] = f'Error creating: admission webhook "vpod.kb.io" denied the request: {text}'
    fixture["absent_hosts"] = []  # the follower was created after all
    serve(stub, fixture)
    assert diagnose(kube, "default", "dp-example").findings == []
    stub.objects.clear()
    fixture = copy.deepcopy(load("pod-create-refused-leader"))
    fixture["events"][0]["lastTimestamp"] = "2026-01-01T00:00:00Z"  # 5 min before now: still refusing
    serve(stub, fixture)
    assert _only(diagnose(kube, "default", "dp-example"), "pod-create-refused").severity == "error"
    stub.objects.clear()
    fixture["events"][0]["lastTimestamp"] = "2025-12-31T23:50:00Z"  # 15 min: the Job waits on something else
    serve(stub, fixture)
    assert diagnose(kube, "default", "dp-example").findings == []


def test_a_finding_about_jobs_counts_jobs_of_the_jobs_the_job_has_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    """4 slices of 2 hosts; every worker Job had a follower refused by a quota, and 3 of them still lack it: "3 of
    4 worker jobs" (Jobs, one per slice, not pods), with the count as a field of -o json."""
    fixture = copy.deepcopy(load("pod-create-refused-quota"))
    fixture.pop("absent")
    fixture["tpu_type"] = "v5p-16"
    serve(stub, fixture, slices=4)
    for index in range(3):
        del stub.objects[("pods", "default", f"dp-example-worker-{index}-1-x7k2p")]
    result = cluster_cli(["diagnose", "dp-example", *kc, "-o", "json"])
    assert result.exit_code == 10, result.output
    (finding,) = json.loads(result.stdout)["findings"]
    assert finding["where"] == ("3 of 4 worker jobs: dp-example-worker-0, dp-example-worker-1, dp-example-worker-2"), (
        finding
    )
    assert finding["count"] == 3


def test_a_crash_fix_names_the_slice_and_host_of_the_crashing_worker_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    """`pwdeploy logs NAME --component worker` reads slice 0 host 0: the fix for a worker that crashed on slice 1
    host 1 names them, or it points at a healthy pod's log."""
    serve(stub, {}, tpu_type="v5p-16")
    pod = stub.get("pods", "default", "dp-example-worker-1-1-x7k2p")
    assert pod is not None
    pod["status"]["containerStatuses"] = [
        {"name": "pathways-worker", "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}
    ]  # fmt: skip
    finding = _only(diagnose(kube, "default", "dp-example"), "crash")
    assert finding.where == "1 of 4 worker pods: dp-example-worker-1-1-x7k2p", finding
    assert finding.fix == (
        "read the whole log: pwdeploy logs dp-example --component worker --slice 1 --host 1 --previous"
    ), finding.fix


def test_a_taint_on_the_last_free_node_of_a_slices_pool_is_named_not_another_job_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    """A 2-host slice: host 0 runs, the pool's other node is tainted. The scheduler says "1 node(s) had
    untolerated taint(s), 1 node(s) didn't have free ports": the busy node is the slice's own host 0, so the cause
    is the taint, not another job's workers."""
    serve(stub, {}, tpu_type="v5p-16", slices=1)
    pod = stub.get("pods", "default", "dp-example-worker-0-1-x7k2p")
    assert pod is not None
    del pod["spec"]["nodeName"]
    message = (
        "0/4 nodes are available: 1 node(s) didn't have free ports for the requested pod ports, 1 node(s) had "
        "untolerated taint(s), 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/4 nodes are "
        "available: 1 No preemption victims found for incoming pod, 3 Preemption is not helpful for scheduling."
    )
    pod["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]}  # fmt: skip
    finding = _only(diagnose(kube, "default", "dp-example"), "untolerated-taint")
    assert finding.where == "1 of 2 worker pods: dp-example-worker-0-1-x7k2p", finding
    assert "this job's own pods of the same slice hold 1 of the pool's nodes" in finding.fix, finding.fix
    assert "another job" not in finding.fix and "kubectl taint nodes NODE KEY-" in finding.fix


def test_pod_security_and_quota_refusals_say_what_to_change_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    serve(stub, load("pod-create-refused-pod-security"))
    security = _only(diagnose(kube, "default", "dp-example"), "pod-create-refused")
    assert "pod-security.kubernetes.io/enforce=privileged" in security.fix and "'baseline'" in security.fix
    stub.objects.clear()
    serve(stub, load("pod-create-refused-quota"))
    quota = _only(diagnose(kube, "default", "dp-example"), "pod-create-refused")
    assert "kubectl describe resourcequota tpu-quota -n default" in quota.fix


def test_a_restart_says_which_job_failed_first_against_the_stub(stub: StubKubeApiServer, kube: Any) -> None:
    serve(stub, load("restarted"))
    finding = _only(diagnose(kube, "default", "dp-example"), "restarted")
    assert finding.severity == "info" and "first failed job: dp-example-worker-1" in finding.message


def test_pods_ready_timeout_names_the_pods_not_ready_and_the_timeouts_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    serve(stub, load("pods-ready-timeout"))
    found = diagnose(kube, "default", "dp-example")
    assert [f.id for f in found.findings] == ["pods-ready-timeout"]
    finding = found.findings[0]
    assert "dp-example-worker-0-0-x7k2p (Pending, ContainerCreating)" in finding.message
    assert (
        "waitForPodsReady.timeout" in finding.fix and "recoveryTimeout" in finding.fix and "30 minutes" in finding.fix
    )


def test_a_deactivated_workload_is_an_error_with_how_to_reactivate_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    serve(stub, load("kueue-deactivated"))
    finding = _only(diagnose(kube, "default", "dp-example"), "kueue-deactivated")
    assert finding.severity == "error"
    assert '"active":true' in finding.fix and "--replace" in finding.fix and "backoffLimitCount" in finding.fix


def test_enospc_is_read_from_the_traceback_only_when_it_names_dev_shm() -> None:
    on_shm = [
        "Traceback (most recent call last):",
        '  File "/app/train.py", line 57, in <module>',
        '    batch.tofile(f"/dev/shm/prefetch/batch_{step:05d}.bin")',
        "OSError: [Errno 28] No space left on device",
    ]
    matched = classify(on_shm)
    assert matched is not None and matched[0].cause.id == "shm-exhausted"
    on_disk = [line.replace("/dev/shm/prefetch", "/data/cache") for line in on_shm]
    assert classify(on_disk) is None
    # a /dev/shm path in an earlier, finished traceback does not count for this one
    earlier = [*on_shm[:3], "ValueError: bad batch", "Traceback (most recent call last):", *on_disk[1:]]
    assert classify(earlier) is None
