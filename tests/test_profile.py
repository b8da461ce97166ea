"""`pwdeploy profile` against PortForwardApiFake (a loopback stub of the API server's pods/portforward WebSocket)
forwarding to a stand-in profiler endpoint: a loopback HTTP server that accepts only the request pathwaysutils'
profiler server takes (pathwaysutils 0.1.13 profiling.py: ``POST /profiling``, JSON body of its
``ProfilingConfig``: ``duration_ms`` int, ``repository_path`` str; bearer token when
PATHWAYS_PROFILING_AUTH_TOKEN is set)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from pwdeploy import identifiers as ids
from pwdeploy import manifests
from tests.conftest import SeamRunner
from tests.fake_clock import FakeClock
from tests.kube_objects import small_job
from tests.portforward_fake import PortForwardApiFake, TcpStandIn

JOB = "prof"
HEAD = f"{JOB}-{ids.HEAD_JOB}-0-0-abcde"
PROFILES = "gs://stub-bucket/profiles"
RUNNING = {"running": {"startedAt": "2026-01-01T00:02:00Z"}}


class ProfilerStandIn:
    """Answers as pathwaysutils' FastAPI server does: 200 ``{"response": "profiling completed"}`` for a valid
    request, 422 for a body its ProfilingConfig rejects, 404 elsewhere, 401 without the expected token."""

    def __init__(self, token: str | None = None) -> None:
        self.token = token
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []

    def serve(self, conn: socket.socket) -> None:
        reader = conn.makefile("rb")
        request_line = reader.readline().decode().strip()
        headers: dict[str, str] = {}
        while (line := reader.readline().decode().strip()) != "":
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        body = reader.read(int(headers.get("content-length", "0")))
        self.headers.append(headers)
        status, answer = self._answer(request_line, headers, body)
        payload = json.dumps(answer).encode()
        conn.sendall(
            f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(payload)}\r\n\r\n".encode()
            + payload
        )

    def _answer(self, request_line: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        if request_line != "POST /profiling HTTP/1.1":
            return 404, {"detail": "Not Found"}
        if self.token is not None and headers.get("authorization") != f"Bearer {self.token}":
            return 401, {"detail": "Unauthorized: invalid or missing authentication token"}
        try:
            config = json.loads(body)
        except ValueError:
            return 422, {"detail": "JSON decode error"}
        valid = (
            isinstance(config, dict)
            and set(config) == {"duration_ms", "repository_path"}
            and type(config["duration_ms"]) is int
            and isinstance(config["repository_path"], str)
        )
        if not valid:
            return 422, {"detail": f"not a ProfilingConfig: {config!r}"}
        self.bodies.append(config)
        return 200, {"response": "profiling completed"}


def batch_jobset(**overrides: Any) -> dict[str, Any]:
    (obj,) = manifests.build(small_job({"storage.profiles": PROFILES, **overrides}, name=JOB))
    return obj


def head_pod(main_state: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": HEAD,
            "namespace": "default",
            "creationTimestamp": "2026-01-01T00:01:00Z",
            "labels": {ids.JOBSET_NAME_LABEL: JOB, ids.REPLICATED_JOB_LABEL: ids.HEAD_JOB, ids.JOB_INDEX_LABEL: "0"},
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [{"name": ids.MAIN_CONTAINER, "state": main_state or RUNNING}],
        },
    }


@pytest.fixture
def kc(api: PortForwardApiFake, tmp_path: Path) -> list[str]:
    path = api.write_kubeconfig(tmp_path / "kubeconfig", {"fake": ("stub-token", None)}, current="fake")
    return ["--kubeconfig", str(path)]


@pytest.fixture
def profiler() -> ProfilerStandIn:
    return ProfilerStandIn()


@pytest.fixture
def running(api: PortForwardApiFake, profiler: ProfilerStandIn) -> Iterator[PortForwardApiFake]:
    """A batch job with storage.profiles whose program runs, its profiler server routed on the default port."""
    api.put("jobsets", batch_jobset())
    api.put("pods", head_pod())
    with TcpStandIn(profiler.serve) as standin:
        api.route("default", HEAD, ids.PROFILER_PORT, standin.address)
        yield api


def cli(args: list[str]) -> Result:
    from pwdeploy.cli import cli as group

    return SeamRunner().invoke(group, args, obj={"clock": FakeClock()})


def test_profile_asks_pathwaysutils_server_for_a_trace_into_storage_profiles_stub(
    running: PortForwardApiFake, profiler: ProfilerStandIn, kc: list[str]
) -> None:
    result = cli(["profile", JOB, *kc, "--duration", "2.5"])
    assert result.exit_code == 0, result.stderr
    assert profiler.bodies == [{"duration_ms": 2500, "repository_path": PROFILES}]
    assert "authorization" not in profiler.headers[0]  # no token configured, none sent
    (upgrade,) = running.sent("GET", "/portforward")
    assert upgrade.path == f"/api/v1/namespaces/default/pods/{HEAD}/portforward"
    assert upgrade.q("ports") == str(ids.PROFILER_PORT)
    assert result.stdout.splitlines() == [
        f"trace of job {JOB} (2.5 s, pod/{HEAD}) written under {PROFILES}/plugins/profile/",
        f"tensorboard --logdir {PROFILES}",
    ]


def test_the_token_goes_to_the_server_and_nowhere_else_stub(
    running: PortForwardApiFake, profiler: ProfilerStandIn, kc: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    profiler.token = "s3cret-token"
    refused = cli(["profile", JOB, *kc, "--duration", "1"])
    assert refused.exit_code == 4
    assert "wants a token (HTTP 401)" in refused.stderr and "PATHWAYS_PROFILING_AUTH_TOKEN" in refused.stderr
    monkeypatch.setenv("PATHWAYS_PROFILING_AUTH_TOKEN", "s3cret-token")
    result = cli(["profile", JOB, *kc, "--duration", "1"])
    assert result.exit_code == 0, result.stderr
    assert profiler.headers[-1]["authorization"] == "Bearer s3cret-token"
    assert "s3cret" not in result.output


def test_a_program_without_a_profiler_server_gets_the_line_to_add_stub(
    running: PortForwardApiFake, kc: list[str]
) -> None:
    result = cli(["profile", JOB, *kc, "--duration", "1", "--port", "9012"])  # nothing routed there
    assert result.exit_code == 4
    assert f"no answer from a profiler server on pod/{HEAD}:9012" in result.stderr
    assert "jax.profiler.start_server(9012) after pathwaysutils.initialize()" in result.stderr


def test_a_server_that_is_not_pathwaysutils_is_named_stub(api: PortForwardApiFake, kc: list[str]) -> None:
    api.put("jobsets", batch_jobset())
    api.put("pods", head_pod())

    def grpc_like(conn: socket.socket) -> None:
        conn.recv(1024)
        conn.sendall(b"\x00\x00\x12\x04\x00\x00\x00\x00\x00")  # an HTTP/2 SETTINGS frame, not HTTP/1.1

    with TcpStandIn(grpc_like) as standin:
        api.route("default", HEAD, ids.PROFILER_PORT, standin.address)
        result = cli(["profile", JOB, *kc, "--duration", "1"])
    assert result.exit_code == 4
    assert "did not answer as an HTTP server" in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"storage.profiles": None}, "storage.profiles: job prof has no profile location"),
        ({"headless": True, "main.image": None, "main.command": None}, "job prof is headless"),
    ],
)
def test_a_job_without_a_place_for_profiles_is_exit_2_before_any_stream_stub(
    api: PortForwardApiFake, kc: list[str], overrides: dict[str, Any], expected: str
) -> None:
    api.put("jobsets", batch_jobset(**overrides))
    api.put("pods", head_pod())
    result = cli(["profile", JOB, *kc, "--duration", "1"])
    assert result.exit_code == 2 and expected in result.stderr
    assert api.upgrades == 0 and "tracing" not in result.stderr


def test_more_hosts_than_the_server_traces_is_refused_with_the_way_to_do_it_stub(
    running: PortForwardApiFake, kc: list[str]
) -> None:
    result = cli(["profile", JOB, *kc, "--duration", "1", "--hosts", "4"])
    assert result.exit_code == 2
    assert "--hosts: 4: pathwaysutils' profiler server" in result.stderr and "max_num_hosts=N" in result.stderr
    assert running.sent("GET", "/jobsets") == []


def test_a_job_whose_program_does_not_run_is_exit_4_stub(api: PortForwardApiFake, kc: list[str]) -> None:
    api.put("jobsets", batch_jobset())
    api.put("pods", head_pod({"waiting": {"reason": "PodInitializing"}}))
    result = cli(["profile", JOB, *kc, "--duration", "1"])
    assert result.exit_code == 4
    assert "has no head pod whose program runs now" in result.stderr and "pwdeploy status prof" in result.stderr


def test_a_server_that_goes_quiet_after_the_request_is_a_bounded_wait_stub(
    api: PortForwardApiFake, kc: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pwdeploy.session import profiling

    monkeypatch.setattr(profiling, "ANSWER_MARGIN_S", 0.0)  # the wait is the duration alone
    api.put("jobsets", batch_jobset())
    api.put("pods", head_pod())
    release = threading.Event()

    def quiet(conn: socket.socket) -> None:
        conn.recv(4096)
        release.wait(20)  # holds the connection, answers nothing

    with TcpStandIn(quiet) as standin:
        api.route("default", HEAD, ids.PROFILER_PORT, standin.address)
        result = cli(["profile", JOB, *kc, "--duration", "0.2"])
        release.set()
    assert result.exit_code == 4
    assert "stopped answering" in result.stderr and f"pwdeploy logs {JOB} --component main" in result.stderr


def test_a_duration_out_of_range_is_refused_before_tracing_is_announced_stub(
    running: PortForwardApiFake, kc: list[str]
) -> None:
    result = cli(["profile", JOB, *kc, "--duration", "100000"])
    assert result.exit_code == 2 and "--duration: 100000 s is not in (0, 3600] seconds" in result.stderr
    assert "tracing" not in result.stderr and running.sent("GET", "/jobsets") == []


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (b'HTTP/1.1 200 OK\r\ncontent-length: 38\r\n\r\n{"response": "prof', "18 of 38 bytes"),
        (b'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n26\r\n{"response"', "no last chunk"),
        (b"HTTP/1.1 200 OK\r\ncontent-le", "its headers"),
    ],
)
def test_a_200_that_breaks_off_is_not_a_written_trace_stub(
    api: PortForwardApiFake, kc: list[str], answer: bytes, said: str
) -> None:
    api.put("jobsets", batch_jobset())
    api.put("pods", head_pod())

    def cut(conn: socket.socket) -> None:
        conn.recv(4096)
        conn.sendall(answer)  # then the connection closes

    with TcpStandIn(cut) as standin:
        api.route("default", HEAD, ids.PROFILER_PORT, standin.address)
        result = cli(["profile", JOB, *kc, "--duration", "1"])
    assert result.exit_code == 4, result.output
    assert f"but the answer broke off ({said})" in result.stderr and "written under" not in result.output
