"""Proxies and TLS settings decided as kubectl decides them: a kubeconfig's proxy-url (http, socks5, socks5h) wins
over NO_PROXY; HTTPS_PROXY/HTTP_PROXY apply unless NO_PROXY names the host, and never to a loopback server;
insecure-skip-tls-verify with a CA is refused with kubectl's own words. Requests go through a SOCKS5 proxy stub
(tests/proxies.py: a loopback relay, not a proxy product) to HttpsStubKubeApiServer (a loopback stub behind TLS)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from pwdeploy.cluster.jobsets import get_jobset
from pwdeploy.errors import ConfigError, DependencyError
from pwdeploy.kube.kubeconfig import load_kube
from pwdeploy.kube.reach import INSECURE_WITH_CA, kubectl_proxy
from tests.https_stub import HttpsStubKubeApiServer
from tests.proxies import Socks5Proxy

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


@pytest.fixture
def https_stub() -> Iterator[HttpsStubKubeApiServer]:
    with HttpsStubKubeApiServer() as server:
        yield server


@pytest.fixture
def socks() -> Iterator[Socks5Proxy]:
    with Socks5Proxy() as relay:
        yield relay


def with_cluster_fields(kc: Path, **fields: object) -> Path:
    data = yaml.safe_load(kc.read_text())
    data["clusters"][0]["cluster"].update(fields)
    kc.write_text(yaml.safe_dump(data))
    return kc


@pytest.mark.parametrize("scheme", ["socks5", "socks5h"])
def test_a_socks_proxy_url_carries_the_requests_against_https_stub(
    https_stub: HttpsStubKubeApiServer,
    socks: Socks5Proxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    scheme: str,
) -> None:
    monkeypatch.setenv("NO_PROXY", "*")  # the kubeconfig's proxy-url is used all the same
    kc = https_stub.write_user_kubeconfig(tmp_path / "kc", {"token": "stub-token"})
    with_cluster_fields(kc, **{"proxy-url": socks.url(scheme)})
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
