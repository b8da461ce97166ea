"""Answers of a cluster that anyone who can patch objects can shape, and lists too big for one answer, against
StubKubeApiServer (a loopback stub, not an API server; it pages lists with ``limit``/``continue`` as the API server
does): each is a clear error (exit 4) or shown as kubectl shows it, never an internal error."""

from __future__ import annotations

from typing import Any

import pytest

from pwdeploy import identifiers as ids
from pwdeploy.kube.api import LIST_PAGE, PODS, Action, ApiError, Kube
from tests.conftest import REPO, ClusterCli
from tests.kube_stub import StubKubeApiServer, rendered_jobset
from tests.test_cluster_lifecycle import pod

EXAMPLE = str(REPO / "examples" / "data_parallel" / "job.yaml")  # dp-example


def no_internal_error(output: str, code: int) -> None:
    assert code != 1 and "internal error" not in output and "Traceback" not in output, output


def many_pods(stub: StubKubeApiServer, count: int) -> None:
    for index in range(count):
        stub.put("pods", {"metadata": {"name": f"p{index:05d}", "namespace": "default"}, "status": {}})


def test_a_list_is_read_in_pages_of_limit_items_against_stub(kube: Kube, stub: StubKubeApiServer) -> None:
    many_pods(stub, 2 * LIST_PAGE + 1)
    names = [p["metadata"]["name"] for p in kube.list_items(Action("list", PODS, "default"), PODS.path("default"))]
    assert names == [f"p{i:05d}" for i in range(2 * LIST_PAGE + 1)]
    sent = stub.sent("GET", "/pods")
    assert stub.pages == 3 and [r.q("limit") for r in sent] == [str(LIST_PAGE)] * 3
    assert [r.q("continue") is None for r in sent] == [True, False, False]


def test_pages_are_decoded_as_they_arrive_against_stub(kube: Kube, stub: StubKubeApiServer) -> None:
    many_pods(stub, 5)
    items = kube.iter_items(Action("list", PODS, "default"), PODS.path("default"), page=2)
    assert next(items)["metadata"]["name"] == "p00000" and stub.pages == 1  # the rest not asked for yet
    assert len(list(items)) == 4 and stub.pages == 3


@pytest.mark.parametrize("token", ["same", 7, "x" * (17 << 10)])
def test_a_continue_token_that_repeats_or_has_the_wrong_shape_ends_the_list_against_stub(
    kube: Kube, stub: StubKubeApiServer, token: object
) -> None:
    page = {"kind": "PodList", "metadata": {"continue": token}, "items": []}
    stub.answer("GET", "/pods$", page, times=100)
    with pytest.raises(ApiError) as caught:
        kube.list_items(Action("list", PODS, "default"), PODS.path("default"))
    assert "metadata.continue" in str(caught.value) and len(stub.sent("GET", "/pods")) <= 2


def test_a_pod_whose_job_index_label_is_not_a_number_does_not_stop_status_against_stub(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer
) -> None:
    stub.put("jobsets", rendered_jobset("dp-example"))
    stub.put("pods", pod(ids.HEAD_JOB))
    odd = pod(ids.WORKER_JOB, 0)
    odd["metadata"]["labels"][ids.JOB_INDEX_LABEL] = "abc"
    stub.put("pods", odd)
    for args in (["status", "dp-example"], ["status", "dp-example", "-o", "json"], ["diagnose", "dp-example"]):
        result = cluster_cli([*args, *kc])
        no_internal_error(result.output, result.exit_code)
        assert result.exit_code in (0, 10), result.output


@pytest.mark.parametrize(
    ("args", "change", "said"),
    [
        (["status", "dp-example"], {"status": {"restarts": "lots"}}, 'status.restarts: "lots", not a count'),
        (["list"], {"status": {"restarts": -1}}, "status.restarts: -1, not a count"),
        (["status", "dp-example"], {"metadata": {"creationTimestamp": "yesterday"}}, "<invalid>"),
        (["list"], {"metadata": {"creationTimestamp": "yesterday"}}, "<invalid>"),
        (["list"], {"metadata": {"creationTimestamp": "2026-01-01T00:00:00"}}, "<invalid>"),  # no zone
    ],
)  # fmt: skip
def test_fields_of_the_wrong_type_are_clear_against_stub(
    cluster_cli: ClusterCli,
    kc: list[str],
    stub: StubKubeApiServer,
    args: list[str],
    change: dict[str, Any],
    said: str,
) -> None:
    live = rendered_jobset("dp-example")
    stub.put("jobsets", live)
    for part, fields in change.items():
        live.setdefault(part, {}).update(fields)
    result = cluster_cli([*args, *kc])
    no_internal_error(result.output, result.exit_code)
    assert said in result.output, result.output
    assert result.exit_code == (0 if said == "<invalid>" else 4)


def test_list_shows_a_hostile_job_name_as_printable_text_against_stub(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer
) -> None:
    live = rendered_jobset("dp-example")
    live["metadata"]["name"] = "evil\x1b]0;pwned\x07\x1b[2J"
    stub.answer("GET", "/jobsets$", {"kind": "JobSetList", "metadata": {}, "items": [live]})
    result = cluster_cli(["list", *kc])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output and "evil" in result.output
