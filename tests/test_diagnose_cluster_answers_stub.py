"""diagnose on what a real cluster answers (issues 38 and 33), against StubKubeApiServer (a loopback stub, not an
API server) serving the real texts of tests/fixtures/diagnose: busy nodes, Kueue's texts since v0.14.4 and its
evictions, pod creation refusals, no JobSet controller, what could not be read, recovered failures, restarts."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

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


def test_a_leader_not_created_yet_is_transient_not_a_finding_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    fixture = copy.deepcopy(load("pod-create-refused-leader"))
    fixture["events"][0]["message"] = fixture["events"][0]["message"].replace("but got 2", "but got 0")
    serve(stub, fixture)
    assert diagnose(kube, "default", "dp-example").findings == []


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
