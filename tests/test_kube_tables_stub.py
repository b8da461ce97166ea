"""Lists as the API server prints them (pwdeploy.kube.tables), against StubKubeApiServer (a loopback stub, not an
API server, answering what each test gives it): the rows page by page, a server that answers the plain list, a
Table without the columns asked for and a continue token that expired are None (the caller reads the objects), a
Table of the wrong shape a clear error; status's pods of a running job (pwdeploy.cluster.pod_rows): rows and two
pods whole when every row is plainly healthy, every pod whole otherwise. The real API server's Table of a job's
pods, and status from it beside status from every pod whole, are in tests/test_control_plane_scale.py."""

from __future__ import annotations

from typing import Any

import pytest

from pwdeploy import identifiers as ids
from pwdeploy.cluster.pod_rows import read_pods
from pwdeploy.cluster.progress import pod_row
from pwdeploy.kube.seam import PODS, Action, ApiError, Kube
from pwdeploy.kube.tables import TABLE_ACCEPT, list_rows
from tests.kube_objects import rendered_jobset
from tests.kube_stub import StubKubeApiServer
from tests.test_cluster_lifecycle import pod

COLUMNS = ("Name", "Ready", "Status", "Restarts", "Node")
PRINTED = ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node", "Readiness Gates"]
LIST = Action("list", PODS, "team")


def table(names: list[str], token: Any = None, columns: list[str] = PRINTED) -> dict[str, Any]:
    """A Table as kube-apiserver prints pods (includeObject=None: ``object`` null)."""
    cells = {"Name": "", "Ready": "1/1", "Status": "Running", "Restarts": 0, "Age": "5m", "IP": "10.0.0.1",
             "Node": "n1", "Nominated Node": "<none>", "Readiness Gates": "<none>"}  # fmt: skip
    rows = [{"cells": [name if c == "Name" else cells.get(c, "") for c in columns], "object": None} for name in names]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": "7", **({"continue": token} if token else {})},
        "columnDefinitions": [{"name": c, "type": "string", "description": "", "priority": 0} for c in columns],
        "rows": rows,
    }


def rows(kube: Kube) -> list[dict[str, str]] | None:
    return list_rows(kube, LIST, PODS.path("team"), COLUMNS, query=[("labelSelector", "a=b")])


def test_the_rows_are_read_page_by_page_as_printed_cells_without_the_objects_against_stub(
    kube: Kube, stub: StubKubeApiServer
) -> None:
    stub.answer("GET", "/pods$", table(["p0", "p1"], token="next-1"))
    stub.answer("GET", "/pods$", table(["p2"]))
    found = rows(kube)
    assert found == [{"Name": n, "Ready": "1/1", "Status": "Running", "Restarts": "0", "Node": "n1"}
                     for n in ("p0", "p1", "p2")]  # fmt: skip
    sent = stub.sent("GET", "/pods")
    assert [r.q("continue") for r in sent] == [None, "next-1"]
    assert {(r.q("includeObject"), r.q("labelSelector"), r.headers.get("Accept")) for r in sent} == {
        ("None", "a=b", TABLE_ACCEPT)
    }
    assert TABLE_ACCEPT.endswith(",application/json")  # a server that prints no Table answers the plain list


def test_a_plain_list_a_missing_column_or_an_expired_token_leave_it_to_the_objects_against_stub(
    kube: Kube, stub: StubKubeApiServer
) -> None:
    stub.answer("GET", "/pods$", {"kind": "PodList", "metadata": {}, "items": []})
    assert rows(kube) is None
    stub.answer("GET", "/pods$", table(["p0"], columns=[c for c in PRINTED if c != "Node"]))
    assert rows(kube) is None
    stub.answer("GET", "/pods$", table(["p0"], token="t"))
    stub.answer("GET", "/pods$", {"kind": "Status", "status": "Failure", "reason": "Expired", "code": 410}, status=410)
    assert rows(kube) is None


@pytest.mark.parametrize(
    ("shape", "said"),
    [
        ({"columnDefinitions": "Name"}, "`columnDefinitions` is a string, not a list of objects"),
        ({"rows": {"cells": []}}, "`rows` is an object, not a list"),
        ({"rows": [{"cells": ["p0", "1/1"]}]}, "rows[0] does not have one cell a column"),
        ({"rows": [{"cells": [{"x": 1}] + [""] * 8}]}, "rows[0] has a cell that is not text or a number"),
        ({"rows": ["p0"]}, "rows[0] does not have one cell a column"),
        ({"metadata": {"continue": 5}}, "a `metadata.continue` that is not a new, short string"),
    ],
)
def test_a_table_of_the_wrong_shape_is_a_clear_error_against_stub(
    kube: Kube, stub: StubKubeApiServer, shape: dict[str, Any], said: str
) -> None:
    stub.answer("GET", "/pods$", {**table(["p0"]), **shape})
    with pytest.raises(ApiError) as raised:
        rows(kube)
    assert said in raised.value.message and "list pods" in raised.value.message, raised.value.message


# ---------------------------------------------------------------------------------------------- status's pods


def job_pods(slices: int) -> list[dict[str, Any]]:
    """The pods of a running job of ``slices`` slices of v5p-32 (the head, 4 worker pods a slice), all ready."""

    def ready(p: dict[str, Any]) -> dict[str, Any]:
        for key, part in (("initContainerStatuses", "initContainers"), ("containerStatuses", "containers")):
            p["status"][key] = [{"name": c["name"], "ready": True, "restartCount": 0, "state": {"running": {}}}
                                for c in p["spec"].get(part) or []]  # fmt: skip
        p["metadata"]["namespace"] = "team"
        return p

    head = [ready(pod(ids.HEAD_JOB))]
    return head + [ready(pod(ids.WORKER_JOB, i, h)) for i in range(slices) for h in range(4)]


def printed(pods: list[dict[str, Any]]) -> dict[str, Any]:
    """The Table kube-apiserver prints for ``pods`` (as its pod printer: ready containers, Running, restarts)."""
    found = table([])
    for p in pods:
        count = len(p["status"]["initContainerStatuses"]) + len(p["status"]["containerStatuses"])
        cells = [p["metadata"]["name"], f"{count}/{count}", "Running", 0, "5m", "10.0.0.1", "node-1", "<none>",
                 "<none>"]  # fmt: skip
        found["rows"].append({"cells": cells, "object": None})
    return found


@pytest.fixture
def running(stub: StubKubeApiServer) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A running 16-slice job (65 pods) in the stub: its JobSet and its pods."""
    obj = rendered_jobset("dp-example", "team", tpu_type="v5p-32", slices=16)
    pods = job_pods(16)
    for p in pods:
        stub.put("pods", p)
    return obj, pods


def test_a_healthy_running_job_is_read_as_rows_and_two_pods_whole_against_stub(
    kube: Kube, stub: StubKubeApiServer, running: tuple[dict[str, Any], list[dict[str, Any]]]
) -> None:
    obj, pods = running
    stub.answer("GET", "/pods$", printed(pods))
    found = read_pods(kube, "team", obj)
    whole = [p["metadata"]["name"] for p in found.read]
    assert whole == [pods[0]["metadata"]["name"], pods[1]["metadata"]["name"]]  # the head, slice 0 host 0
    assert [pod_row(p) for p in found.shown] == [pod_row(p) for p in pods]  # what status shows of every pod
    assert [r.q("fieldSelector") for r in stub.sent("GET", "/pods")] == [None, *(f"metadata.name={n}" for n in whole)]


@pytest.mark.parametrize(
    "trouble",
    [
        lambda t, p: t["rows"][7]["cells"].__setitem__(2, "CrashLoopBackOff"),  # a row not Running
        lambda t, p: t["rows"][7]["cells"].__setitem__(3, "2 (40s ago)"),  # a row with restarts
        lambda t, p: t["rows"][7]["cells"].__setitem__(0, "someone-elses-pod"),  # a name not the Job controller's
        lambda t, p: p[1]["status"]["containerStatuses"][0].__setitem__("restartCount", 1),  # whole != its row
    ],
)
def test_a_row_or_a_pod_read_whole_that_is_not_plainly_healthy_reads_every_pod_whole_against_stub(
    kube: Kube, stub: StubKubeApiServer, running: tuple[dict[str, Any], list[dict[str, Any]]], trouble: Any
) -> None:
    obj, pods = running
    answer = printed(pods)
    trouble(answer, pods)
    for p in pods:
        stub.put("pods", p)
    stub.answer("GET", "/pods$", answer)
    found = read_pods(kube, "team", obj)
    assert found.shown == found.read and len(found.read) == len(pods)


def test_a_server_that_prints_no_table_gets_one_list_of_the_pods_more_against_stub(
    kube: Kube, stub: StubKubeApiServer, running: tuple[dict[str, Any], list[dict[str, Any]]]
) -> None:
    obj, pods = running
    found = read_pods(kube, "team", obj)  # the stub answers the plain list, as a server without Tables does
    assert len(found.read) == len(pods) and len(stub.sent("GET", "/pods")) == 2
