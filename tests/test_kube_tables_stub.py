"""Lists as the API server prints them (pwdeploy.kube.tables), against StubKubeApiServer (a loopback stub, not an
API server, answering what each test gives it): the rows page by page, a server that answers the plain list, a
Table without the columns asked for and a continue token that expired are None (the caller reads the objects), a
Table of the wrong shape a clear error. The real API server's Table of a job's pods is in
tests/test_control_plane_scale.py."""

from __future__ import annotations

from typing import Any

import pytest

from pwdeploy.kube.seam import PODS, Action, ApiError, Kube
from pwdeploy.kube.tables import TABLE_ACCEPT, list_rows
from tests.kube_stub import StubKubeApiServer

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
