"""Which component failed: the API server itself, a node's kubelet behind it, or an admission webhook it called.
The error answers are the API server's texts (kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/admission/
plugin/webhook/errors/statuserror.go, .../pkg/util/webhook/error.go; the kubelet dial as kube-apiserver 1.36 words
it), served by StubKubeApiServer (a loopback stub, not an API server). A failure that is not the API server's own
trouble is not retried and its hint says where to look."""

from __future__ import annotations

import pytest

from pwdeploy.cli import cli
from pwdeploy.kube.api_errors import KubeletError, WebhookError
from pwdeploy.kube.seam import JOBSETS, POD_LOGS, Action, ApiError, Kube
from tests.conftest import REPO, ClusterCli, SeamRunner
from tests.fake_clock import FakeClock
from tests.kube_answers import status_body
from tests.kube_objects import rendered_jobset
from tests.kube_stub import StubKubeApiServer

EXAMPLE = str(REPO / "examples" / "data_parallel" / "job.yaml")  # dp-example

WEBHOOK_DENIED = status_body(
    403,
    "Forbidden",
    'admission webhook "vjobset.kb.io" denied the request: spec.replicatedJobs[0].name: Invalid value: "x": '
    "must not be changed",
)
WEBHOOK_DOWN = status_body(
    500,
    "InternalError",
    'Internal error occurred: failed calling webhook "mjobset.kb.io": failed to call webhook: Post '
    '"https://jobset-webhook-service.jobset-system.svc:443/mutate-jobset-x-k8s-io-v1alpha2-jobset?timeout=10s": '
    "dial tcp 10.96.0.17:443: connect: connection refused",
)
WEBHOOK_HUNG = status_body(
    500,
    "InternalError",
    'Internal error occurred: failed calling webhook "mjobset.kb.io": failed to call webhook: Post '
    '"https://jobset-webhook-service.jobset-system.svc:443/mutate-jobset-x-k8s-io-v1alpha2-jobset?timeout=10s": '
    "context deadline exceeded",
)
KUBELET_REFUSED = status_body(
    500,
    "InternalError",
    'Get "https://10.128.0.7:10250/containerLogs/default/demo-worker-0-0-abcde/main?follow=true": dial tcp '
    "10.128.0.7:10250: connect: connection refused",
)
NOT_IN_SCHEMA = status_body(
    500,
    "InternalError",
    "failed to create typed patch object (default/demo; jobset.x-k8s.io/v1alpha2, Kind=JobSet): "
    ".spec.replicatedJobs[0].groupName: field not declared in schema",
)
OVERLOADED = status_body(503, "ServiceUnavailable", "the server is currently unable to handle the request")


def apply(kube: Kube) -> object:
    action = Action("patch", JOBSETS, "default", "demo")
    return kube.request(action, "PATCH", JOBSETS.path("default", "demo"), body={}, content_type="application/json")


def read_log(kube: Kube) -> object:
    path = POD_LOGS.path("default", "demo-worker-0-0-abcde")
    return kube.request(Action("get", POD_LOGS, "default", "demo-worker-0-0-abcde"), "GET", path)


@pytest.mark.parametrize(
    ("send", "method", "path", "body", "kind", "component", "attempts", "hint_has", "hint_lacks"),
    [
        (apply, "PATCH", "/jobsets/demo$", WEBHOOK_DENIED, WebhookError, "webhook", 1,
         "not your permissions", "bind this identity"),
        (apply, "PATCH", "/jobsets/demo$", WEBHOOK_DOWN, WebhookError, "webhook", 1,
         "kubectl get pods -n jobset-system", "upgrading"),
        (apply, "PATCH", "/jobsets/demo$", WEBHOOK_HUNG, WebhookError, "webhook", 1,
         "does not answer in time", "upgrading"),
        (read_log, "GET", "/log$", KUBELET_REFUSED, KubeletError, "kubelet", 1,
         "port 10250", "upgrading"),
        (apply, "PATCH", "/jobsets/demo$", NOT_IN_SCHEMA, ApiError, "api-server", 1,
         "CustomResourceDefinition jobsets.jobset.x-k8s.io", "upgrading"),
        (apply, "PATCH", "/jobsets/demo$", OVERLOADED, ApiError, "api-server", 4,
         "the control plane may be upgrading", "webhook"),
    ],
)  # fmt: skip
def test_the_error_says_which_component_failed_and_is_retried_only_for_the_api_server_against_stub(
    kube: Kube,
    stub: StubKubeApiServer,
    send: object,
    method: str,
    path: str,
    body: dict[str, object],
    kind: type[ApiError],
    component: str,
    attempts: int,
    hint_has: str,
    hint_lacks: str,
) -> None:
    stub.put("jobsets", rendered_jobset("demo"))
    stub.answer(method, path, body, status=int(str(body["code"])), times=100)
    with pytest.raises(kind) as caught:
        send(kube)  # type: ignore[operator]
    error = caught.value
    assert type(error) is kind and error.component == component
    assert len(stub.sent(method, path.rstrip("$"))) == attempts
    assert error.hint is not None and hint_has in error.hint and hint_lacks not in error.hint, error.hint
    assert "Traceback" not in str(error)


def test_a_kubelet_error_names_the_node_against_stub(kube: Kube, stub: StubKubeApiServer) -> None:
    stub.answer("GET", "/log$", KUBELET_REFUSED, status=500)
    with pytest.raises(KubeletError) as caught:
        read_log(kube)
    assert caught.value.node == "10.128.0.7" and "the kubelet on node 10.128.0.7" in str(caught.value)
    assert "the API server is fine" in str(caught.value.hint)


def test_a_webhook_that_is_down_is_one_attempt_and_names_jobset_on_submit_against_stub(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer
) -> None:
    stub.answer("PATCH", "/jobsets/dp-example$", WEBHOOK_DOWN, status=500, times=100)
    result = cluster_cli(["submit", "-f", EXAMPLE, *kc, "--skip-preflight"])
    assert result.exit_code == 4, result.output
    assert "admission webhook 'mjobset.kb.io' (JobSet)" in result.stderr
    assert "upgrading" not in result.stderr and "Traceback" not in result.output
    assert len(stub.sent("PATCH", "/jobsets/dp-example")) == 1


def test_a_webhook_denial_on_submit_gets_no_rbac_hint_against_stub(kc: list[str], stub: StubKubeApiServer) -> None:
    stub.answer("PATCH", "/jobsets/dp-example$", WEBHOOK_DENIED, status=403, times=100)
    result = SeamRunner().invoke(cli, ["submit", "-f", EXAMPLE, *kc, "--skip-preflight"], obj={"clock": FakeClock()})
    assert result.exit_code == 4, result.output
    assert "refused the request" in result.stderr and "must not be changed" in result.stderr
    assert "kubectl auth can-i" not in result.stderr and "bind this identity" not in result.stderr


def test_logs_when_the_kubelet_refuses_is_one_attempt_naming_the_node_against_stub(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer
) -> None:
    from pwdeploy import identifiers as ids
    from tests.test_cluster_lifecycle import pod

    stub.put("jobsets", rendered_jobset("dp-example"))
    stub.put("pods", pod(ids.HEAD_JOB))
    stub.answer("GET", "/log$", KUBELET_REFUSED, status=500, times=100)
    result = cluster_cli(["logs", "dp-example", *kc])
    assert result.exit_code == 4, result.output
    assert "the kubelet on node 10.128.0.7" in result.stderr and "upgrading" not in result.stderr
    assert len(stub.sent("GET", "/log")) == 1
