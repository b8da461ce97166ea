"""`status` and `diagnose` when the head's resource manager log cannot be read, against StubKubeApiServer (a
loopback stub, not an API server): the kubelet refuses (the API server's 500 quoting its dial to port 10250), the
log read hangs, or RBAC forbids pods/log. The read is one try of at most a few seconds; everything else is shown
as before, and a note says that the count (or the log) could not be read and which component failed."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from pwdeploy import identifiers as ids
from pwdeploy.cluster.ready_slices import LOG_WAIT_S
from pwdeploy.kube.api_errors import NoAnswerInTime
from pwdeploy.kube.kubeconfig import load_kube
from pwdeploy.kube.seam import POD_LOGS, Action, ApiError
from tests.conftest import ClusterCli
from tests.diagnose_cases import load, serve
from tests.fake_clock import FakeClock
from tests.kube_answers import status_body
from tests.kube_stub import StubKubeApiServer
from tests.loopback import LoopbackServer, per_connection

RM_LOG = "I1101 04:52:41.967764 1 multi_job_allocator.cc:1063] *** 1/2 Pathways Slices Now Ready ***\n"
RUNNING = {"running": {"startedAt": "2026-01-01T00:01:00Z"}}
WITHIN_S = 10.0  # generous for a noisy machine; a read with the retry policy took 60 s against a hang
FOUND_ON = "gke-node-pathways-head-0-0"  # the head pod's node in the diagnose fixtures


def kubelet_refused(pod: str) -> dict[str, object]:
    """kube-apiserver's answer when it cannot dial the node's kubelet for a pod's log."""
    return status_body(
        500,
        "InternalError",
        f'Get "https://10.128.0.7:10250/containerLogs/default/{pod}/{ids.RM_CONTAINER}?limitBytes=262144&tailLines='
        '500": dial tcp 10.128.0.7:10250: connect: connection refused',
    )


def starting_job(stub: StubKubeApiServer) -> str:
    """dp-example with its workers unschedulable (tpu-capacity) and the head's resource manager running; its name."""
    head = serve(stub, load("tpu-capacity"))["head"][0]
    stub.get("pods", "default", head)["status"]["initContainerStatuses"] = [  # type: ignore[index]
        {"name": ids.RM_CONTAINER, "started": True, "ready": True, "restartCount": 0, "state": RUNNING}
    ]
    stub.logs[("default", head, ids.RM_CONTAINER)] = RM_LOG
    return head


def refuse(stub: StubKubeApiServer, head: str) -> None:
    stub.answer("GET", "/log$", kubelet_refused(head), status=500, times=100)


def hang(stub: StubKubeApiServer, head: str) -> None:
    stub.hang("GET", "/log$", times=100)


def forbid(stub: StubKubeApiServer, head: str) -> None:
    stub.forbid("get", "pods/log")


FAULTS: dict[str, tuple[Callable[[StubKubeApiServer, str], None], tuple[str, ...]]] = {
    "kubelet-refuses": (
        refuse,
        ("the kubelet on node 10.128.0.7 did not serve it (500: dial tcp 10.128.0.7:10250: connect: connection "
         "refused); the API server is fine",),
    ),
    "kubelet-hangs": (hang, ("no answer within ", f" s from the kubelet on node {FOUND_ON} (the API server passes",)),
    "forbidden": (
        forbid,
        ("the API server's authorization (RBAC) refuses this identity `get pods/log`",
         "kubectl auth can-i get pods --subresource=log -n default"),
    ),
}  # fmt: skip


def test_status_shows_the_count_when_the_log_reads_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    starting_job(stub)
    result = cluster_cli(["status", "dp-example", *kc])
    assert result.exit_code == 0, result.output
    assert "  resource manager: 1/2 Pathways slices ready" in result.stdout.splitlines()
    assert "note:" not in result.stdout
    document = json.loads(cluster_cli(["status", "dp-example", *kc, "-o", "json"]).stdout)
    assert document["slices"] == {"ready": 1, "total": 2} and document["notes"] == []


@pytest.mark.parametrize("fault", list(FAULTS))
def test_status_says_why_the_count_is_missing_and_shows_the_rest_at_once_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str], fault: str
) -> None:
    make, reasons = FAULTS[fault]
    head = starting_job(stub)
    make(stub, head)
    started = time.monotonic()
    result = cluster_cli(["status", "dp-example", *kc])
    took = time.monotonic() - started
    assert result.exit_code == 0, result.output
    assert took < WITHIN_S, f"status took {took:.1f} s"
    lines = result.stdout.splitlines()
    notes = [line for line in lines if line.startswith("  note: ")]
    assert len(notes) == 1, result.stdout
    assert notes[0].startswith("  note: resource manager: the count of ready slices could not be read: ")
    assert all(reason in notes[0] for reason in reasons), notes[0]
    assert fault != "kubelet-hangs" or f"within {LOG_WAIT_S:g} s " in notes[0]
    assert not any("Pathways slices ready" in line for line in lines)
    assert "tpu-capacity" in result.stdout and head in result.stdout  # the findings and the pods, as before
    assert len(stub.sent("GET", "/log")) == 1  # one try, never retried


def test_status_as_a_document_has_the_note_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    refuse(stub, starting_job(stub))
    for output in ("json", "yaml"):
        result = cluster_cli(["status", "dp-example", *kc, "-o", output])
        assert result.exit_code == 0, result.output
        document = json.loads(result.stdout) if output == "json" else yaml.safe_load(result.stdout)
        assert document["slices"] is None
        (note,) = document["notes"]
        assert "could not be read: the kubelet on node 10.128.0.7" in note
        assert document["findings"][0]["cause"] == "tpu-capacity"


@pytest.mark.parametrize("fault", list(FAULTS))
def test_diagnose_notes_an_unread_log_and_finds_the_same_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str], fault: str
) -> None:
    head = starting_job(stub)
    readable = json.loads(cluster_cli(["diagnose", "dp-example", *kc, "-o", "json"]).stdout)
    assert readable["notes"] == []
    make, reasons = FAULTS[fault]
    make(stub, head)
    started = time.monotonic()
    result = cluster_cli(["diagnose", "dp-example", *kc, "-o", "json"])
    took = time.monotonic() - started
    assert took < WITHIN_S, f"diagnose took {took:.1f} s"
    unread = json.loads(result.stdout)
    assert unread["findings"] == readable["findings"] and unread["findings"], result.output
    rm_notes = [n for n in unread["notes"] if f"{head}/{ids.RM_CONTAINER} could not be read" in n]
    assert len(rm_notes) == 1, unread["notes"]
    assert all(reason in rm_notes[0] for reason in reasons), rm_notes[0]
    text = cluster_cli(["diagnose", "dp-example", *kc])
    assert f"note: the log of {head}/{ids.RM_CONTAINER} could not be read" in text.stdout


# ---------------------------------------------------------------------------------------------- the bound itself


@pytest.fixture
def trickle(tmp_path: Path) -> Iterator[tuple[Path, list[float]]]:
    """A loopback HTTP server (plain http) whose answer promises 4096 bytes and sends one every 0.2 s; a kubeconfig
    for it, and the times the client hung up."""
    closed: list[float] = []

    def answer(conn: socket.socket) -> None:
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 4096\r\n\r\n")
        try:
            for _ in range(4096):
                conn.sendall(b"x")
                time.sleep(0.2)
        except OSError:
            closed.append(time.monotonic())

    with LoopbackServer(per_connection(answer)) as server:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "t", "cluster": {"server": server.url}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "t", "context": {"cluster": "t", "user": "u"}}],
            "current-context": "t",
        }
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        yield path, closed


def test_a_log_that_trickles_in_is_cut_at_the_bound_stub(trickle: tuple[Path, list[float]]) -> None:
    kubeconfig, closed = trickle
    kube = load_kube(kubeconfig, clock=FakeClock())
    action = Action("get", POD_LOGS, "default", "p")
    started = time.monotonic()
    with pytest.raises(NoAnswerInTime) as caught:
        kube.read_once(action, POD_LOGS.path("default", "p"), [("container", "c")], within=1.0, max_bytes=65536)
    took = time.monotonic() - started
    assert 0.9 < took < 1.8, f"{took:.2f} s"  # each read waits only for the time left, not a fresh 1 s
    assert caught.value.component == "kubelet" and "bytes arrived" in caught.value.message
    assert "kubectl get --raw /readyz" in str(caught.value.hint)
    assert kube.sent == 1
    until = time.monotonic() + 5
    while not closed and time.monotonic() < until:
        time.sleep(0.05)
    assert closed, "the connection with bytes still to come was kept, not closed"


def test_a_log_larger_than_asked_is_an_error_not_a_long_read_stub(stub: StubKubeApiServer, kubeconfig: Path) -> None:
    stub.answer("GET", "/log$", "line\n" * 2000, content_type="text/plain")
    kube = load_kube(kubeconfig, clock=FakeClock())
    with pytest.raises(ApiError, match="larger than 4096 bytes"):
        kube.read_once(
            Action("get", POD_LOGS, "default", "p"), POD_LOGS.path("default", "p"), [], within=5.0, max_bytes=4096
        )
