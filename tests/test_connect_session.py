"""A connect session as Pathways has it, against PortForwardApiFake (a loopback stub of the API server's
pods/portforward WebSocket) and TcpStandIn (a loopback TCP server standing in for the IFRT proxy): a lost
connection is a lost JAX session and connect says what to do; `connect` and `status` show the resource manager's
count of ready slices while the job starts."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import Result

from pwdeploy import identifiers as ids
from pwdeploy.cluster.ready_slices import SlicesReady, latest
from pwdeploy.kube.kubeconfig import load_kube
from pwdeploy.kube.portforward import Forwarder
from pwdeploy.kube.seam import Kube
from pwdeploy.session.headless import Head, HeadStreams, session_notes
from tests.conftest import SeamRunner
from tests.fake_clock import FakeClock
from tests.portforward_fake import PortForwardApiFake, TcpStandIn
from tests.test_connect import HEAD, JOB, PORT, PROXY_LOG, Notes, head_pod, headless_jobset

# The resource manager's lines (Google's "Troubleshoot Pathways on Cloud" page, "Health monitoring").
RM_LOG = (
    "I1101 04:50:41.967764 1 server_lib.cc:1473] Pathways Server serving on [::]:29001\n"
    "I1101 04:52:41.967764 1 multi_job_allocator.cc:1063] *** 1/2 Pathways Slices Now Ready ***\n"
)
RUNNING = {"running": {"startedAt": "2026-01-01T00:01:00Z"}}


@pytest.fixture
def kc(api: PortForwardApiFake, tmp_path: Path) -> list[str]:
    path = api.write_kubeconfig(tmp_path / "kubeconfig", {"fake": ("stub-token", None)}, current="fake")
    return ["--kubeconfig", str(path)]


@pytest.fixture
def starting(api: PortForwardApiFake) -> Iterator[PortForwardApiFake]:
    """A headless job whose proxy serves while the resource manager has one of its two slices."""
    pod = head_pod()
    pod["status"]["containerStatuses"].append({"name": ids.RM_CONTAINER, "started": True, "state": RUNNING})
    api.put("jobsets", headless_jobset())
    api.put("pods", pod)
    api.logs[("default", HEAD, ids.PROXY_CONTAINER)] = PROXY_LOG
    api.logs[("default", HEAD, ids.RM_CONTAINER)] = RM_LOG
    with TcpStandIn() as standin:
        api.route("default", HEAD, PORT, standin.address)
        yield api


def cli(args: list[str]) -> Result:
    from pwdeploy.cli import cli as group

    return SeamRunner().invoke(group, args, obj={"clock": FakeClock()})


def test_a_dropped_connection_says_the_session_is_lost_and_what_to_do_stub(
    starting: PortForwardApiFake, kc: list[str]
) -> None:
    kube: Kube = load_kube(Path(kc[1]), clock=FakeClock())
    notes = Notes()
    head = Head(HEAD, PORT)
    streams = HeadStreams(kube, "default", JOB, head, notify=notes.notify)
    listener = socket.create_server(("127.0.0.1", 0))
    notify = session_notes(notes.notify, "default", JOB, lambda: streams.head.pod)
    forwarder = Forwarder(listener, streams.open, notify, "the proxy", notes.sleep).start()
    try:
        for _ in range(2):
            with socket.create_connection(("127.0.0.1", forwarder.port), timeout=10) as conn:
                conn.sendall(b"session")
                assert conn.recv(100) == b"session"
                assert starting.drop_streams() == 1
                assert conn.recv(100) == b""
            assert notes.said("the stream broke off")
        assert notes.said("the JAX session on that connection is lost", "restart the client", "CANCELLED")
        assert notes.said(f"pwdeploy delete {JOB} -n default", f"kubectl delete pod {HEAD} -n default")
        full = [line for line in notes.lines if "CANCELLED" in line]
        assert len(full) == 1  # in full once, in short after
        assert notes.said("the JAX session on that connection is lost: restart the client")
    finally:
        forwarder.close()


def test_connect_shows_the_resource_managers_slices_while_waiting_stub(
    starting: PortForwardApiFake, kc: list[str]
) -> None:
    result = cli(["connect", JOB, *kc, "--local-port", "0", "--", sys.executable, "-c", "pass"])
    assert result.exit_code == 0, result.stderr
    assert "resource manager: 1/2 Pathways slices ready" in result.stderr
    assert "the proxy serves; resource manager: 1/2 Pathways slices ready: a client may connect now" in result.stderr
    rm_reads = [r for r in starting.sent("GET", "/log") if r.q("container") == ids.RM_CONTAINER]
    assert rm_reads and all(r.q("tailLines") and r.q("limitBytes") for r in rm_reads)


def test_status_shows_the_resource_managers_slices_stub(starting: PortForwardApiFake, kc: list[str]) -> None:
    result = cli(["status", JOB, *kc])
    assert result.exit_code == 0, result.output
    assert "  resource manager: 1/2 Pathways slices ready" in result.stdout.splitlines()


def test_status_of_a_job_whose_resource_manager_does_not_run_reads_no_log_stub(
    api: PortForwardApiFake, kc: list[str]
) -> None:
    api.put("jobsets", headless_jobset())
    api.put("pods", head_pod("Pending", {"waiting": {"reason": "ContainerCreating"}}, started=False))
    result = cli(["status", JOB, *kc])
    assert result.exit_code == 0 and "resource manager" not in result.stdout
    assert api.sent("GET", "/log") == []


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ([], SlicesReady(0, 4)),
        (["I1101 multi_job_allocator.cc:1063] *** 2 /4 Pathways Slices Now Ready ***"], SlicesReady(2, 4)),
        (["*** 1/4 Pathways Slices Now Ready ***", "step", "*** 4/4 Pathways Slices Now Ready ***"], SlicesReady(4, 4)),
    ],
)
def test_the_latest_count_wins(lines: list[str], expected: SlicesReady) -> None:
    assert latest(lines, 4) == expected
