"""Cluster commands facing answers that are not what the Kubernetes API promises, against StubKubeApiServer (a
loopback stub, not an API server): HTML pages from a proxy, JSON of the wrong shape, a server that never answers.
Each is a clear error (exit 4) or a "not verified" row, never an internal error; nothing is applied."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import Result

from pwdeploy.cli import cli
from pwdeploy.cli.seams import KubeLimits
from pwdeploy.kube.seam import RetryPolicy
from tests.conftest import REPO, ClusterCli, SeamRunner
from tests.fake_clock import FakeClock
from tests.kube_objects import rendered_jobset
from tests.kube_stub import StubKubeApiServer

EXAMPLE = str(REPO / "examples" / "data_parallel" / "job.yaml")  # dp-example
PROXY_PAGE = b"<html><body><h1>502 Bad Gateway</h1>\r\n<hr>nginx</body></html>"


def no_internal_error(result: Result) -> None:
    assert result.exit_code != 1 and "internal error" not in result.output and "Traceback" not in result.output


def test_preflight_cluster_behind_a_proxy_page_is_not_verified_rows_against_stub(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer, jax_version: str
) -> None:
    for method in ("GET", "POST"):
        stub.answer(method, ".", PROXY_PAGE, content_type="text/html", times=1000)
    result = cluster_cli(["preflight", "-f", EXAMPLE, "--cluster", "--no-gcs", "-o", "json", *kc])
    no_internal_error(result)
    cluster_rows = [c for c in json.loads(result.stdout)["checks"] if c["check"] != "image"]
    assert [(c["check"], c["status"]) for c in cluster_rows if c["status"] != "not verified"] == [("queue", "ok")]
    version = cluster_rows[0]
    assert version["check"] == "kubernetes-version"
    assert (
        "with 200 (text/html, not JSON): '<html><body><h1>502 Bad Gateway</h1> <hr>nginx</body></html>'"
        in (version["detail"])
    )


@pytest.mark.parametrize(
    ("path", "body", "check", "said"),
    [
        ("/api/v1/nodes$", {"kind": "NodeList", "items": "oops"}, "tpu-capacity", "`items` that is a string"),
        ("/api/v1/nodes$", {"kind": "NodeList", "items": [{"metadata": {"name": "n"}, "status": {"conditions": 5}}]},
         "tpu-capacity", "a shape pwdeploy does not understand"),
        ("/customresourcedefinitions/", {"kind": "CustomResourceDefinition", "spec": {"versions": [5]}}, "jobset-api",
         "a shape pwdeploy does not understand"),
        ("/namespaces/default$", ["default"], "namespace", "with 200 (JSON that is a list, not an object)"),
    ],
)  # fmt: skip
def test_preflight_cluster_rows_with_answers_of_the_wrong_shape_against_stub(
    cluster_cli: ClusterCli,
    kc: list[str],
    stub: StubKubeApiServer,
    jax_version: str,
    path: str,
    body: object,
    check: str,
    said: str,
) -> None:
    stub.answer("GET", path, body, times=1000)
    result = cluster_cli(["preflight", "-f", EXAMPLE, "--cluster", "--no-gcs", "-o", "json", *kc])
    no_internal_error(result)
    (row,) = [c for c in json.loads(result.stdout)["checks"] if c["check"] == check]
    assert row["status"] == "not verified" and said in row["detail"], row


def test_submit_stops_before_applying_when_the_answer_is_a_proxy_page_against_stub(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer
) -> None:
    stub.answer("GET", "/jobsets/dp-example$", PROXY_PAGE, content_type="text/html", times=10)
    result = cluster_cli(["submit", "-f", EXAMPLE, *kc, "--skip-preflight"])
    no_internal_error(result)
    assert result.exit_code == 4 and "(text/html, not JSON)" in result.stderr and stub.writes() == []


def test_submit_stops_before_applying_when_the_live_jobset_has_the_wrong_shape_against_stub(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer
) -> None:
    live = rendered_jobset("dp-example", status={"conditions": "x"})
    live["metadata"]["annotations"] = "oops"
    stub.put("jobsets", live)
    result = cluster_cli(["submit", "-f", EXAMPLE, *kc, "--skip-preflight"])
    no_internal_error(result)
    assert result.exit_code == 4 and "`metadata.annotations` is not a map of strings" in result.stderr
    assert stub.writes() == []


@pytest.mark.parametrize(
    ("args", "path", "body", "said"),
    [
        (["list"], "/jobsets$", {"kind": "JobSetList", "items": "oops"}, "`items` that is a string, not a list"),
        (["status", "dp-example"], "/pods$", {"kind": "PodList", "items": [7]}, "items[0] that is not an object"),
        (["status", "dp-example"], "/jobsets/dp-example$", {"metadata": {"name": "dp-example"}, "status": 5},
         "`status` is a number, not an object"),
        (["status", "dp-example"], "/jobsets/dp-example$", {"metadata": {"name": "dp-example"},
         "status": {"conditions": "x"}}, "a shape pwdeploy does not understand"),
        (["logs", "dp-example"], "/pods$", {"kind": "PodList", "items": [{"metadata": {"name": "p"}, "spec": []}]},
         "`spec` is a list, not an object"),
        (["delete", "dp-example", "-y"], "/jobsets/dp-example$", ["not", "an", "object"], "JSON that is a list"),
    ],
)  # fmt: skip
def test_inspection_commands_with_answers_of_the_wrong_shape_exit_4_against_stub(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer, args: list[str], path: str, body: object, said: str
) -> None:
    stub.put("jobsets", rendered_jobset("dp-example"))
    stub.answer("GET", path, body, times=10)
    result = cluster_cli([*args, *kc])
    no_internal_error(result)
    assert result.exit_code == 4 and said in result.stderr, result.output
    assert stub.writes() == []


def test_a_hung_api_server_is_announced_on_stderr_and_the_run_ends_against_stub(
    kc: list[str], stub: StubKubeApiServer
) -> None:
    stub.hang("GET", ".", times=100)
    limits = KubeLimits(timeout=(1.0, 0.3), deadline=1.0, slow_after=0.2)
    result = SeamRunner().invoke(cli, ["status", "demo", *kc], obj={"clock": FakeClock(), "kube_limits": limits})
    assert result.exit_code == 4, result.output
    assert 2 <= len(stub.sent("GET", "/jobsets/demo")) < RetryPolicy().attempts, "retries end at the deadline"
    assert (
        f"still waiting for the Kubernetes API server (context 'stub', {stub.url}) to get "
        "jobsets.jobset.x-k8s.io 'demo' in namespace 'default' (giving up after 1 s)\n"
    ) in result.stderr
    assert "error: cannot reach the Kubernetes API server" in result.stderr


# ---------------------------------------------------------------------------------------------- local checks first


@pytest.mark.parametrize(
    "args",
    [["status", "demo"], ["logs", "demo"], ["delete", "demo", "-y"], ["list"]],
)
def test_a_bad_namespace_is_refused_before_any_request_against_stub(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer, args: list[str]
) -> None:
    result = cluster_cli([*args, "-n", "Bad_NS", *kc])
    assert result.exit_code == 2, result.output
    assert "error: --namespace: 'Bad_NS' is not a valid namespace" in result.stderr
    assert stub.requests == []


def test_a_bad_job_name_is_refused_before_any_request_against_stub(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer
) -> None:
    for args in (["status", "Demo_1"], ["logs", "Demo_1"], ["delete", "Demo_1", "-y"]):
        result = cluster_cli([*args, *kc])
        assert result.exit_code == 2 and "'Demo_1' is not a job name" in result.stderr, result.output
    assert stub.requests == []


def test_submit_reports_manifest_problems_before_it_looks_for_a_cluster(
    cluster_cli: ClusterCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Manifests the schemas reject (exit 3) are reported even when no cluster can be found (exit 2). No config
    renders invalid manifests today, so the validator is made to find a problem."""
    from pwdeploy.finding import Finding
    from pwdeploy.validation import validate

    problem = Finding("api-server", "error", "JobSet/dp-example", "stub problem")
    monkeypatch.setattr(validate, "validate_objects", lambda objects, **_: [problem])
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    result = cluster_cli(["submit", "-f", EXAMPLE, "--skip-preflight"])
    assert result.exit_code == 3, result.output
    assert "stub problem" in result.stderr and "KUBECONFIG" not in result.output
