"""What Pathways prints, as diagnose reads it against StubKubeApiServer (a loopback stub): the texts of Google's
"Troubleshoot Pathways on Cloud" page (fixtures in tests/fixtures/diagnose cite them), a container the kubelet
keeps restarting, and a full /dev/shm named by its size field."""

from __future__ import annotations

from typing import Any

import pytest

from pwdeploy.cluster.diagnose import diagnose
from pwdeploy.cluster.diagnose.pathways import classify
from tests.diagnose_cases import load, serve
from tests.kube_stub import StubKubeApiServer


def causes(stub: StubKubeApiServer, kube: Any, fixture: dict[str, Any]) -> list[tuple[str, str, str]]:
    serve(stub, fixture)
    return [(f.id, f.severity, f.fix) for f in diagnose(kube, "default", "dp-example").findings]


def test_another_client_holding_the_proxy_is_not_a_proxy_that_is_down_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    ((cause, severity, fix),) = causes(stub, kube, load("proxy-in-use"))
    assert (cause, severity) == ("proxy-in-use", "error")
    assert "another client holds it" in fix and "kubectl delete pod dp-example-pathways-head-0-0-x7k2p" in fix


def test_a_lost_session_says_restart_the_client_against_the_stub(stub: StubKubeApiServer, kube: Any) -> None:
    ((cause, _, fix),) = causes(stub, kube, load("session-lost"))
    assert cause == "session-lost" and "restart the client" in fix and "pwdeploy logs dp-example" in fix


@pytest.mark.parametrize("case", ["scratch-lifecycle-limit", "scratch-bucket-missing"])
def test_scratch_bucket_fixes_name_the_rendered_bucket_against_the_stub(
    stub: StubKubeApiServer, kube: Any, case: str
) -> None:
    found = causes(stub, kube, load(case))
    assert [c for c, _, _ in found] == [case]  # not also a generic crash
    assert "gs://stub-bucket" in found[0][2] and "gs://BUCKET" not in found[0][2]


def test_a_crash_looping_container_is_an_error_whatever_its_cause_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    serve(stub, load("crash-loop-oom"))
    (finding,) = diagnose(kube, "default", "dp-example").findings
    assert (finding.id, finding.severity) == ("oom-killed", "error")
    assert "CrashLoopBackOff" in finding.message


def test_a_crash_looping_sidecar_that_exits_0_is_still_an_error_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    fixture = load("crash-loop-oom")
    status = fixture["pods"]["worker"]["status"]["containerStatuses"][0]
    status["lastState"] = {"terminated": {"exitCode": 0, "reason": "Completed"}}
    serve(stub, fixture)
    (finding,) = diagnose(kube, "default", "dp-example").findings
    assert (finding.id, finding.severity) == ("crash", "error") and "exit 0" in finding.message


def test_a_full_dev_shm_names_the_field_that_sizes_it_against_the_stub(stub: StubKubeApiServer, kube: Any) -> None:
    ((cause, _, fix),) = causes(stub, kube, load("shm-no-space"))
    assert (cause, fix) == ("shm-exhausted", "/dev/shm is full: raise main.shm_size (now 16Gi)")


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        ("E rpc_helper.cc:56] Connection to IFRT proxy server was terminated: CANCELLED: Cancelled", "proxy-in-use"),
        ("FAILED_PRECONDITION: GrpcClientSession: writes no longer allowed.", "session-lost"),
        ("XlaRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm", "hbm-oom"),
        ("OSError: [Errno 28] No space left on device: '/var/tmp/x'", None),  # not /dev/shm
    ],
)
def test_pathways_lines_are_classified(line: str, cause: str | None) -> None:
    found = classify([line])
    assert (found[0].cause.id if found else None) == cause


def test_a_proxy_that_never_listens_is_its_probe_not_an_old_kubelet_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    serve(stub, load("sidecar-probe-pending"))
    findings = diagnose(kube, "default", "dp-example").findings
    assert [(f.id, f.severity) for f in findings] == [("sidecar-not-started", "error")]
    assert "pathways-proxy has run for 4 min without passing its startup probe" in findings[0].message
    assert "nothing listens on port 29000" in findings[0].message
    assert "pwdeploy logs dp-example --component proxy" in findings[0].fix
    assert "upgrade" not in findings[0].fix  # the RM (started, no probe) is not taken for an old kubelet
