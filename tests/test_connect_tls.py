"""connect's port-forward streams, and the REST requests beside them, over every kubeconfig TLS shape, against
PortForwardApiFake (a loopback stub of the API server, not an API server) serving HTTPS from the test session's
throwaway CA (tests/tls.py); and kubectl against the same fake, so the fake is known to speak what a real client
speaks."""

from __future__ import annotations

import base64
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pwdeploy.kube.kubeconfig import load_kube
from pwdeploy.kube.port_stream import PortStream, open_port_stream
from pwdeploy.kube.seam import PODS, Action, ApiError, Kube
from tests.fake_clock import FakeClock
from tests.portforward_fake import PortForwardApiFake, TcpStandIn
from tests.proxies import HttpConnectProxy, Socks5Proxy
from tests.tls import SERVER_NAME, session_pki

POD, PORT = "sess-pathways-head-0-0-abcde", 29000
KUBECTL = shutil.which("kubectl")


@pytest.fixture(autouse=True)
def no_proxy_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kubeconfig alone says whether a proxy is used in these tests."""
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)


def serve(api: PortForwardApiFake, standin: TcpStandIn) -> PortForwardApiFake:
    api.put("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": POD}, "status": {"phase": "Running"}})
    api.route("default", POD, PORT, standin.address)
    return api


@pytest.fixture
def standin() -> Iterator[TcpStandIn]:
    with TcpStandIn() as server:
        yield server


def kubeconfig(
    api: PortForwardApiFake, path: Path, cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None
) -> Path:
    """The fake's kubeconfig (token ``stub-token``), with ``cluster`` fields and ``user`` (in place of the token)."""
    api.write_kubeconfig(path, {"fake": ("stub-token", None)}, current="fake", cluster=cluster)
    if user is not None:
        config = yaml.safe_load(path.read_text())
        config["users"][0]["user"] = user
        path.write_text(yaml.safe_dump(config))
    return path


def round_trip(kube: Kube, payload: bytes) -> bytes:
    """The pod via REST, then one stream: its port announcements, ``payload`` out and its echo back."""
    pod = kube.request(Action("get", PODS, "default", POD), "GET", f"/api/v1/namespaces/default/pods/{POD}")
    assert pod["metadata"]["name"] == POD
    stream: PortStream = open_port_stream(kube, "default", POD, PORT)
    try:
        stream.send(payload)
        echoed = b""
        while len(echoed) < len(payload):
            echoed += stream.recv()
        return echoed
    finally:
        stream.close()


def client_user(tmp_path: Path, *, files: bool) -> dict[str, str]:
    issued = session_pki().client("carol")
    if files:
        return {"client-certificate": str(issued.cert), "client-key": str(issued.key)}
    data = {"client-certificate-data": issued.cert.read_bytes(), "client-key-data": issued.key.read_bytes()}
    return {key: base64.b64encode(value).decode() for key, value in data.items()}


def ca_file(tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "ca.crt"
    path.write_bytes(session_pki().ca_pem)
    return {"certificate-authority-data": None, "certificate-authority": str(path)}


SHAPES: dict[str, tuple[dict[str, Any], Any, Any]] = {  # id: (fake's arguments, cluster fields, user)
    "ca-data": ({}, None, None),
    "ca-file": ({}, ca_file, None),
    "client-certificate-data": ({}, None, lambda tmp: client_user(tmp, files=False)),
    "client-certificate-files": ({}, None, lambda tmp: client_user(tmp, files=True)),
    "tls-server-name": ({"certificate": "named"}, {"tls-server-name": SERVER_NAME}, None),
    "insecure-skip-tls-verify": (
        {"certificate": "stranger"},
        {"certificate-authority-data": None, "insecure-skip-tls-verify": True},
        None,
    ),
    "plain-http": ({"tls": False}, None, None),
}


@pytest.mark.filterwarnings("ignore:Unverified HTTPS request")  # urllib3's, for insecure-skip-tls-verify
@pytest.mark.parametrize("shape", SHAPES)
def test_every_tls_shape_carries_requests_and_streams_stub(shape: str, standin: TcpStandIn, tmp_path: Path) -> None:
    arguments, cluster, user = SHAPES[shape]
    with PortForwardApiFake(**arguments) as api:
        plain = shape == "plain-http"
        if plain:  # no credentials go to an http server (as kubectl): it lets them in, as `kubectl proxy` does
            api.anonymous = "system:anonymous"
        serve(api, standin)
        fields = cluster(tmp_path) if callable(cluster) else cluster
        path = kubeconfig(api, tmp_path / "kc", fields, user(tmp_path) if user else None)
        payload = os.urandom(300_000) + bytes(range(256))
        assert round_trip(load_kube(path, clock=FakeClock()), payload) == payload
        upgrade = api.sent("GET", "/portforward")[0]
        assert api.url.startswith("http://" if plain else "https://")
        if plain:
            assert "authorization" not in upgrade.headers
        assert api.user_of(upgrade) == ("carol" if user else "system:anonymous" if plain else "alice")
        assert upgrade.peer == ("carol" if user else None)  # the certificate went along on the stream too


@pytest.mark.parametrize(
    ("certificate", "cluster", "expected"),
    [
        ("stranger", None, "certificate verify failed"),
        ("named", None, "IP address mismatch"),
        ("ip", {"tls-server-name": SERVER_NAME}, f"(checked as '{SERVER_NAME}') failed: certificate verify failed"),
    ],
    ids=["untrusted-ca", "name-not-in-certificate", "wrong-tls-server-name"],
)
def test_a_certificate_the_kubeconfig_does_not_trust_is_one_lasting_error_stub(
    certificate: str, cluster: dict[str, Any] | None, expected: str, standin: TcpStandIn, tmp_path: Path
) -> None:
    """Not retried (waiting does not change a certificate), and said as TLS, naming the server."""
    from pwdeploy.kube.seam import stream_retryable

    with PortForwardApiFake(certificate=certificate) as api:
        serve(api, standin)
        kube = load_kube(kubeconfig(api, tmp_path / "kc", cluster), clock=FakeClock())
        with pytest.raises(ApiError) as info:
            open_port_stream(kube, "default", POD, PORT)
    assert str(info.value).startswith(f"TLS with the API server {api.url}")
    assert expected in str(info.value) and "certificate-authority" in (info.value.hint or "")
    assert not stream_retryable(info.value)


def test_streams_go_through_the_kubeconfigs_http_proxy_stub(standin: TcpStandIn, tmp_path: Path) -> None:
    with PortForwardApiFake() as api, HttpConnectProxy() as proxy:
        serve(api, standin)
        port = api.url.rsplit(":", 1)[1]
        proxied = proxy.url.replace("://", "://user:pa%40ss@")
        kube = load_kube(kubeconfig(api, tmp_path / "kc", {"proxy-url": proxied}), clock=FakeClock())
        assert round_trip(kube, b"through the proxy") == b"through the proxy"
    assert proxy.targets == [f"127.0.0.1:{port}"] * 2  # the REST request's tunnel, then the stream's
    assert proxy.authorizations[-1] == "Basic " + base64.b64encode(b"user:pa@ss").decode()


@pytest.mark.parametrize("scheme", ["socks5", "socks5h"])
def test_streams_go_through_a_socks5_proxy_stub(scheme: str, standin: TcpStandIn, tmp_path: Path) -> None:
    """The stream's own SOCKS5 client (the REST side's needs urllib3's socks extra; this test sets the proxy after
    the REST client is made)."""
    with PortForwardApiFake() as api, Socks5Proxy(credentials=("u", "p")) as proxy:
        serve(api, standin)
        kube = load_kube(kubeconfig(api, tmp_path / "kc"), clock=FakeClock())
        kube.api_client.configuration.proxy = proxy.url(scheme)
        stream = open_port_stream(kube, "default", POD, PORT)
        stream.send(b"socks")
        assert stream.recv() == b"socks"
        stream.close()
    assert proxy.targets == [f"127.0.0.1:{api.url.rsplit(':', 1)[1]}"] and proxy.authorizations == ["u:p"]


@pytest.mark.parametrize(
    ("answer", "lasting"), [("407 Proxy Authentication Required", True), ("503 Service Unavailable", False)]
)
def test_a_proxy_that_refuses_the_tunnel_is_one_clear_error_stub(
    answer: str, lasting: bool, standin: TcpStandIn, tmp_path: Path
) -> None:
    """A 4xx is the proxy's rule or credentials (not retried); a 5xx may pass (retried like no answer)."""
    with PortForwardApiFake() as api, HttpConnectProxy(refuse=answer) as proxy:
        serve(api, standin)
        kube = load_kube(kubeconfig(api, tmp_path / "kc"), clock=FakeClock())
        kube.api_client.configuration.proxy = proxy.url.replace("://", "://user:secret@")
        with pytest.raises(ApiError) as info:
            open_port_stream(kube, "default", POD, PORT)
    assert str(info.value).startswith(f"the proxy {proxy.url} did not open a tunnel to 127.0.0.1:")
    assert answer in str(info.value) and "secret" not in str(info.value)
    assert info.value.lasting is lasting


def test_the_no_proxy_rule_of_the_requests_applies_to_streams_stub(standin: TcpStandIn, tmp_path: Path) -> None:
    with PortForwardApiFake() as api, HttpConnectProxy() as proxy:
        serve(api, standin)
        kube = load_kube(kubeconfig(api, tmp_path / "kc"), clock=FakeClock())
        kube.api_client.configuration.proxy = proxy.url
        kube.api_client.configuration.no_proxy = "localhost,127.0.0.0/8"
        stream = open_port_stream(kube, "default", POD, PORT)
        stream.close()
    assert proxy.targets == [] and api.upgrades == 1


def test_an_https_proxy_url_is_refused_for_streams_naming_what_works_stub(standin: TcpStandIn, tmp_path: Path) -> None:
    with PortForwardApiFake() as api:
        serve(api, standin)
        kube = load_kube(kubeconfig(api, tmp_path / "kc"), clock=FakeClock())
        kube.api_client.configuration.proxy = "https://proxy.example:3128"
        with pytest.raises(ApiError) as info:
            open_port_stream(kube, "default", POD, PORT)
    assert "proxy-url https://proxy.example:3128 is not one pwdeploy connect can use" in str(info.value)
    assert "http://, socks5:// or socks5h://" in (info.value.hint or "") and info.value.lasting


# ---------------------------------------------------------------------------------------------- kubectl


needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (google-cloud-cli brings it)")


@needs_kubectl
def test_kubectl_get_reads_the_same_fake_over_tls_stub(standin: TcpStandIn, tmp_path: Path) -> None:
    with PortForwardApiFake() as api:
        serve(api, standin)
        path = kubeconfig(api, tmp_path / "kc")
        done = subprocess.run(
            [str(KUBECTL), "--kubeconfig", str(path), "get", "pods", "-o", "name"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"pod/{POD}\n"
    assert api.url.startswith("https://") and api.sent("GET", "/api/v1/namespaces/default/pods")


@needs_kubectl
@pytest.mark.parametrize("transport", ["websocket", "spdy"])
def test_kubectl_port_forward_carries_bytes_through_the_same_fake_stub(
    transport: str, standin: TcpStandIn, tmp_path: Path
) -> None:
    """kubectl 1.31+ tunnels SPDY in a WebSocket first; KUBECTL_PORT_FORWARD_WEBSOCKETS=false makes it upgrade
    to SPDY directly, as older kubectl versions do."""
    env = {**os.environ, "KUBECTL_PORT_FORWARD_WEBSOCKETS": "true" if transport == "websocket" else "false"}
    with PortForwardApiFake() as api:
        serve(api, standin)
        path = kubeconfig(api, tmp_path / "kc")
        args = [str(KUBECTL), "--kubeconfig", str(path), "port-forward", f"pod/{POD}", f"0:{PORT}"]
        proc = subprocess.Popen(
            [*args, "--address", "127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            found = re.search(r"Forwarding from 127\.0\.0\.1:(\d+) ->", line)
            assert found, line + (proc.stderr.read() if proc.stderr else "")
            payload = os.urandom(1 << 20)
            for _ in range(2):  # each local connection is a stream pair of its own
                assert _echo(int(found[1]), payload) == payload
        finally:
            proc.terminate()
            proc.communicate(timeout=20)
        assert api.spdy_pairs == 2
        upgrade = api.sent(path_contains="/portforward")[0]
    assert upgrade.method == ("GET" if transport == "websocket" else "POST")


def _echo(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
        conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)
        received = bytearray()
        while data := conn.recv(1 << 16):
            received += data
        return bytes(received)
