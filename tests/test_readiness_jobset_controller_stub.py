"""preflight's jobset-api row checks that the JobSet controller and its webhooks answer: a server dry run of the
rendered JobSet, against StubKubeApiServer (a loopback stub, not an API server) that defaults a new JobSet as
JobSet's mutating webhook does, or (``jobset_webhook = False``) as a cluster with only the CRD installed."""

from __future__ import annotations

from typing import Any

from pwdeploy.report import Status
from tests.kube_answers import status_body
from tests.kube_objects import rendered_jobset, small_job
from tests.kube_stub import StubKubeApiServer
from tests.test_readiness_stub import ready, rows

PROBE = r"/jobsets/pwdeploy-probe$"
# The API server's text for a webhook whose service does not answer (k8s.io/apiserver pkg/admission/plugin/webhook/
# errors; the URL as JobSet's webhook configuration names it, kubernetes-sigs/jobset docs/faq/README.md).
WEBHOOK_DOWN = (
    'Internal error occurred: failed calling webhook "mjobset.kb.io": failed to call webhook: Post '
    '"https://jobset-webhook-service.jobset-system.svc:443/mutate-jobset-x-k8s-io-v1alpha2-jobset?timeout=10s": '
    "dial tcp 10.96.120.7:443: connect: connection refused"
)


def test_a_cluster_whose_controller_answers_is_ok_and_nothing_is_persisted_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    ready(stub)
    row = rows(small_job(), kube)["jobset-api"]
    assert row.status is Status.OK and "the controller's webhooks answer a server dry run" in row.message
    assert stub.objects.get(("jobsets", "default", "pwdeploy-probe")) is None


def test_only_the_crd_installed_is_failed_naming_the_missing_controller_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    ready(stub).jobset_webhook = False
    row = rows(small_job(), kube)["jobset-api"]
    assert row.status is Status.FAILED and "installed without its controller" in row.message
    assert "kubectl apply --server-side" in (row.fix or "") and "jobset-system" in (row.fix or "")


def test_a_webhook_that_does_not_answer_is_failed_naming_the_controller_pods_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    ready(stub).answer("PATCH", PROBE, status_body(500, "InternalError", WEBHOOK_DOWN), status=500, times=20)
    row = rows(small_job(), kube)["jobset-api"]
    assert row.status is Status.FAILED and "webhook 'mjobset.kb.io' does not answer" in row.message
    assert "connection refused" in row.message and "kubectl get deployments,pods -n jobset-system" in (row.fix or "")


def test_a_webhook_that_refuses_the_rendered_jobset_is_failed_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    denied = 'admission webhook "vjobset.kb.io" denied the request: spec.replicatedJobs[0].name: Invalid value'
    ready(stub).answer("PATCH", PROBE, status_body(400, "BadRequest", denied), status=400)
    row = rows(small_job(), kube)["jobset-api"]
    assert row.status is Status.FAILED and "webhook 'vjobset.kb.io' refuses the rendered JobSet" in row.message


def test_without_leave_to_create_jobsets_the_controller_is_not_verified_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    ready(stub).forbid("patch", "jobsets")
    row = rows(small_job(), kube)["jobset-api"]
    assert row.status is Status.NOT_VERIFIED and "the controller was not checked" in row.message


def test_an_existing_job_of_the_same_name_is_not_what_the_dry_run_touches_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    running = rendered_jobset()
    ready(stub).put("jobsets", running)
    assert rows(small_job(), kube)["jobset-api"].status is Status.OK
    assert stub.get("jobsets", "default", "dp-example") == running
    assert all(r.path.endswith("/pwdeploy-probe") for r in stub.sent("PATCH"))
