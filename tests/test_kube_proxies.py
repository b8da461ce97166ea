"""Proxies and TLS settings decided as kubectl decides them: a kubeconfig's proxy-url (http, socks5, socks5h) wins
over NO_PROXY; HTTPS_PROXY/HTTP_PROXY apply unless NO_PROXY names the host, and never to a loopback server;
insecure-skip-tls-verify with a CA is refused with kubectl's own words. Requests go through a SOCKS5 proxy stub
(a loopback relay, not a proxy product) to HttpsStubKubeApiServer (a loopback stub behind TLS)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from pwdeploy.cluster.jobsets import get_jobset
from pwdeploy.errors import ConfigError, DependencyError
from pwdeploy.kube.kubeconfig import load_kube
from pwdeploy.kube.reach import INSECURE_WITH_CA, kubectl_proxy
from tests.https_stub import HttpsStubKubeApiServer

SERVER = "https://10.1.2.3:443"


@pytest.mark.parametrize(
    ("server", "proxy_url", "env", "expected"),
    [
        (SERVER, "socks5h://bastion:1080", {"NO_PROXY": "*"}, "socks5h://bastion:1080"),  # proxy-url beats NO_PROXY
        (SERVER, "http://proxy:3128", {"NO_PROXY": "10.0.0.0/8"}, "http://proxy:3128"),
        ("https://127.0.0.1:6443", "socks5://bastion:1080", {}, "socks5://bastion:1080"),  # named: used for loopback
        (SERVER, None, {"HTTPS_PROXY": "http://corp:8080"}, "http://corp:8080"),
        (SERVER, None, {"https_proxy": "corp:8080"}, "http://corp:8080"),  # a bare host:port is an http proxy
        (SERVER, None, {"HTTPS_PROXY": "http://corp:8080", "NO_PROXY": "10.0.0.0/8"}, None),
        (SERVER, None, {"HTTPS_PROXY": "http://corp:8080", "NO_PROXY": "10.1.2.3"}, None),
        (SERVER, None, {"HTTPS_PROXY": "http://corp:8080", "no_proxy": "*"}, None),
        ("https://api.corp.example", None, {"HTTPS_PROXY": "http://c:1", "NO_PROXY": ".corp.example"}, None),
        ("https://api.corp.example", None, {"HTTPS_PROXY": "http://c:1", "NO_PROXY": "corp.example"}, None),
        ("https://api.corp.example", None, {"HTTPS_PROXY": "http://c:1", "NO_PROXY": "other.example"}, "http://c:1"),
        (SERVER, None, {"HTTP_PROXY": "http://corp:8080"}, None),  # an https server reads HTTPS_PROXY only
        ("http://10.1.2.3", None, {"HTTP_PROXY": "http://corp:8080"}, "http://corp:8080"),
        ("https://127.0.0.1:6443", None, {"HTTPS_PROXY": "http://corp:8080"}, None),  # loopback: never proxied
        ("https://127.3.4.5:6443", None, {"HTTPS_PROXY": "http://corp:8080"}, None),
        ("https://localhost:6443", None, {"HTTPS_PROXY": "http://corp:8080"}, None),
        ("https://[::1]:6443", None, {"HTTPS_PROXY": "http://corp:8080"}, None),
    ],
)
def test_the_proxy_is_the_one_kubectl_uses(
    server: str, proxy_url: str | None, env: dict[str, str], expected: str | None
) -> None:
    assert kubectl_proxy(server, proxy_url, env) == expected


@pytest.mark.parametrize("url", ["ftp://proxy:21", "proxy:3128", 5])
def test_a_proxy_url_pwdeploy_cannot_use_is_a_config_error(url: object) -> None:
    with pytest.raises(ConfigError, match="is not a proxy URL pwdeploy can use"):
        kubectl_proxy(SERVER, url, {})


def test_a_socks_proxy_without_pysocks_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "socks", None)  # as if PySocks were not installed
    with pytest.raises(DependencyError) as info:
        kubectl_proxy(SERVER, "socks5://user:pw@bastion:1080", {})
    assert "pip install 'urllib3[socks]'" in str(info.value) and "pw@" not in str(info.value)


# ---------------------------------------------------------------------------------------------- through the stubs


class Socks5Stub:
    """A loopback SOCKS5 relay (no authentication, CONNECT only) that records the targets it was asked for."""

    def __init__(self) -> None:
        self.targets: list[str] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client:
            _exactly(client, _exactly(client, 2)[1])  # the greeting's methods: "no authentication" is chosen
            client.sendall(b"\x05\x00")
            head = _exactly(client, 4)
            if head[3] == 3:  # a name (socks5h)
                host = _exactly(client, _exactly(client, 1)[0]).decode()
            else:
                host = socket.inet_ntoa(_exactly(client, 4))
            port = int.from_bytes(_exactly(client, 2), "big")
            self.targets.append(f"{host}:{port}")
            upstream = socket.create_connection((host, port))
            client.sendall(b"\x05\x00\x00\x01" + socket.inet_aton("127.0.0.1") + b"\x00\x00")
            threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
            _pipe(client, upstream)

    def close(self) -> None:
        self._listener.close()


def _exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the client hung up")
        data += chunk
    return data


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        sink.close()


@pytest.fixture
def https_stub() -> Iterator[HttpsStubKubeApiServer]:
    server = HttpsStubKubeApiServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def socks() -> Iterator[Socks5Stub]:
    relay = Socks5Stub()
    yield relay
    relay.close()


def with_cluster_fields(kc: Path, **fields: object) -> Path:
    data = yaml.safe_load(kc.read_text())
    data["clusters"][0]["cluster"].update(fields)
    kc.write_text(yaml.safe_dump(data))
    return kc


@pytest.mark.parametrize("scheme", ["socks5", "socks5h"])
def test_a_socks_proxy_url_carries_the_requests_against_https_stub(
    https_stub: HttpsStubKubeApiServer,
    socks: Socks5Stub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    scheme: str,
) -> None:
    monkeypatch.setenv("NO_PROXY", "*")  # the kubeconfig's proxy-url is used all the same
    kc = https_stub.write_user_kubeconfig(tmp_path / "kc", {"token": "stub-token"})
    with_cluster_fields(kc, **{"proxy-url": f"{scheme}://{socks.url}"})
    kube = load_kube(kc)
    assert get_jobset(kube, "default", "demo") is None
    assert socks.targets == [https_stub.url.removeprefix("https://")]
    assert https_stub.requests[-1].headers["authorization"] == "Bearer stub-token"


def test_https_proxy_is_not_used_for_a_loopback_server_against_https_stub(
    https_stub: HttpsStubKubeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    kube = load_kube(https_stub.write_user_kubeconfig(tmp_path / "kc", {"token": "stub-token"}))
    assert kube.api_client.configuration.proxy is None
    assert get_jobset(kube, "default", "demo") is None


def insecure_with_ca(tmp_path: Path) -> Path:
    (tmp_path / "ca.crt").write_text("not read\n")
    fields = {"insecure-skip-tls-verify": True, "certificate-authority": "ca.crt"}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9", **fields}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    (tmp_path / "kc").write_text(yaml.safe_dump(config))
    return tmp_path / "kc"


def test_insecure_skip_tls_verify_with_a_ca_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_kube(insecure_with_ca(tmp_path))
    assert INSECURE_WITH_CA in str(info.value) and "cluster 'c'" in str(info.value)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed: its message is checked in")
def test_kubectl_refuses_insecure_with_a_ca_in_the_same_words(tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    assert kubectl is not None
    argv = [kubectl, "--kubeconfig", str(insecure_with_ca(tmp_path)), "get", "--raw", "/version"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and INSECURE_WITH_CA in done.stderr
