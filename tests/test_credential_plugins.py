"""Credential plugins (a kubeconfig user's exec) against HttpsStubKubeApiServer (a loopback stub behind TLS, not an
API server): a plugin that is missing, fails, prints something that is not an ExecCredential or hangs stops the
command before any request, with its stderr (secrets masked) and the kubeconfig's installHint; the real
gke-gcloud-auth-plugin, where installed, fails for want of a login and says which gcloud commands fix it; a token
that expires is fetched again before the next request."""

from __future__ import annotations

import base64
import inspect
import json
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pwdeploy.cli import cli
from pwdeploy.cluster.jobsets import get_jobset
from pwdeploy.errors import ClusterError, ConfigError
from pwdeploy.kube.kubeconfig import PluginLimits, load_kube
from pwdeploy.text import masked as mask_secrets
from tests.conftest import SeamRunner
from tests.fake_clock import FakeClock
from tests.https_stub import HttpsStubKubeApiServer
from tests.kube_stub import StubKubeApiServer

V1BETA1 = "client.authentication.k8s.io/v1beta1"
GKE_PLUGIN = shutil.which("gke-gcloud-auth-plugin")
FAST = PluginLimits(timeout=5.0, notice_after=5.0)


@pytest.fixture
def https_stub() -> Iterator[HttpsStubKubeApiServer]:
    with HttpsStubKubeApiServer(tokens={"plugin-token-1": "alice", "plugin-token-2": "alice"}) as server:
        yield server


def plugin(tmp_path: Path, body: str, name: str = "fake-plugin") -> Path:
    """A fake credential plugin: a Python script whose body runs with ``count`` (how often it ran, this run
    included) and ``info`` (KUBERNETES_EXEC_INFO) defined."""
    script = tmp_path / name
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys, time\n"
        f"counter = {str(tmp_path / (name + '.count'))!r}\n"
        "count = (int(open(counter).read()) if os.path.exists(counter) else 0) + 1\n"
        "open(counter, 'w').write(str(count))\n"
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n" + body
    )
    script.chmod(0o755)
    return script


def runs(script: Path) -> int:
    counter = script.parent / (script.name + ".count")
    return int(counter.read_text()) if counter.exists() else 0


def exec_user(command: str | Path, **extra: Any) -> dict[str, Any]:
    return {"exec": {"apiVersion": V1BETA1, "command": str(command), **extra}}


def credential(token: str, expires: str | None = None) -> str:
    status: dict[str, Any] = {"token": token}
    if expires is not None:
        status["expirationTimestamp"] = expires
    return json.dumps({"apiVersion": V1BETA1, "kind": "ExecCredential", "status": status})


def get_demo(kube: Any) -> object:
    return get_jobset(kube, "default", "demo")


# ---------------------------------------------------------------------------------------------- working plugins


def test_a_plugins_token_is_sent_over_tls_against_https_stub(
    https_stub: HttpsStubKubeApiServer, tmp_path: Path
) -> None:
    script = plugin(tmp_path, f"print({credential('plugin-token-1')!r})")
    kc = https_stub.write_user_kubeconfig(tmp_path / "kc", exec_user(script))
    assert get_demo(load_kube(kc, plugin_limits=FAST)) is None
    assert https_stub.requests[-1].headers["authorization"] == "Bearer plugin-token-1"
    assert runs(script) == 1


def test_a_relative_plugin_command_is_relative_to_the_kubeconfig_against_https_stub(
    https_stub: HttpsStubKubeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = plugin(tmp_path, f"print({credential('plugin-token-1')!r})")
    kc = https_stub.write_user_kubeconfig(tmp_path / "kc", exec_user(f"./{script.name}"))  # as kubectl resolves it
    monkeypatch.chdir(tmp_path.parent)
    assert get_demo(load_kube(kc, plugin_limits=FAST)) is None
    assert runs(script) == 1


def test_the_plugin_gets_exec_info_and_cluster_info_against_https_stub(
    https_stub: HttpsStubKubeApiServer, tmp_path: Path
) -> None:
    script = plugin(
        tmp_path,
        "assert info['spec']['interactive'] is False and info['apiVersion'] == 'client.authentication.k8s.io/v1beta1'\n"
        "assert info['spec']['cluster']['server'].startswith('https://127.0.0.1:'), info\n"
        "assert os.environ['EXTRA'] == 'yes' and sys.argv[1:] == ['get-token', '--x']\n"
        f"print({credential('plugin-token-1')!r})",
    )
    user = exec_user(
        script, args=["get-token", "--x"], env=[{"name": "EXTRA", "value": "yes"}], provideClusterInfo=True
    )
    kc = https_stub.write_user_kubeconfig(tmp_path / "kc", user)
    assert get_demo(load_kube(kc, plugin_limits=FAST)) is None


def test_provide_cluster_info_hands_a_ca_files_contents_to_the_plugin_as_kubectl_does_against_https_stub(
    https_stub: HttpsStubKubeApiServer, tmp_path: Path
) -> None:
    """client-go loads certificate-authority into the config's CA data, and spec.cluster carries that data."""
    assert https_stub.ca_pem is not None
    (tmp_path / "ca.crt").write_bytes(https_stub.ca_pem)
    seen = tmp_path / "seen-ca"
    script = plugin(
        tmp_path,
        f"open({str(seen)!r}, 'w').write(info['spec']['cluster'].get('certificate-authority-data', ''))\n"
        f"print({credential('plugin-token-1')!r})",
    )
    kc = https_stub.write_user_kubeconfig(tmp_path / "kc", exec_user(script, provideClusterInfo=True))
    config = yaml.safe_load(kc.read_text())
    del config["clusters"][0]["cluster"]["certificate-authority-data"]
    config["clusters"][0]["cluster"]["certificate-authority"] = "ca.crt"  # relative to the kubeconfig
    kc.write_text(yaml.safe_dump(config))
    assert get_demo(load_kube(kc, plugin_limits=FAST)) is None
    assert base64.b64decode(seen.read_text()).strip() == https_stub.ca_pem.strip()


def test_a_plugins_client_certificate_is_the_clients_certificate_against_https_stub(
    https_stub: HttpsStubKubeApiServer, tmp_path: Path
) -> None:
    from tests.tls import session_pki

    issued = session_pki().client("carol")
    pem = {"clientCertificateData": issued.cert.read_text(), "clientKeyData": issued.key.read_text()}
    answer = json.dumps({"apiVersion": V1BETA1, "kind": "ExecCredential", "status": pem})
    kc = https_stub.write_user_kubeconfig(tmp_path / "kc", exec_user(plugin(tmp_path, f"print({answer!r})")))
    configuration = load_kube(kc, plugin_limits=FAST).api_client.configuration
    assert Path(configuration.cert_file).read_text() == pem["clientCertificateData"]
    assert Path(configuration.key_file).read_text() == pem["clientKeyData"]
    assert "BearerToken" not in configuration.api_key


def test_an_expiring_token_is_fetched_again_before_the_next_request_against_https_stub(
    https_stub: HttpsStubKubeApiServer, tmp_path: Path
) -> None:
    clock = FakeClock()  # utc_now() starts at 00:05; each token the plugin prints is good for 5 more minutes
    status = "{'token': f'plugin-token-{count}', 'expirationTimestamp': f'2026-01-01T00:{5 * (count + 1):02d}:00Z'}"
    script = plugin(
        tmp_path, f"print(json.dumps({{'apiVersion': {V1BETA1!r}, 'kind': 'ExecCredential', 'status': {status}}}))"
    )
    kc = https_stub.write_user_kubeconfig(tmp_path / "kc", exec_user(script))
    kube = load_kube(kc, clock=clock, plugin_limits=FAST)
    for _ in range(3):  # long before the expiry: the first token is reused
        get_demo(kube)
        assert https_stub.requests[-1].headers["authorization"] == "Bearer plugin-token-1"
    assert runs(script) == 1
    clock.sleep(5 * 60 - 5)  # within 10 s of the expiry: fetched again, once, for the next request
    get_demo(kube)
    get_demo(kube)
    assert https_stub.requests[-1].headers["authorization"] == "Bearer plugin-token-2"
    assert runs(script) == 2
    headers = kube.api_client.headers({})  # what connect's WebSocket upgrade is signed with
    assert {k.lower(): v for k, v in headers.items()}["authorization"] == "Bearer plugin-token-2"


# ---------------------------------------------------------------------------------------------- failing plugins


def assert_no_request(stub: StubKubeApiServer) -> None:
    assert stub.requests == [], "a request went out although the credential plugin gave no credentials"


def test_a_plugin_missing_from_path_is_exit_2_with_the_install_hint_against_https_stub(
    https_stub: HttpsStubKubeApiServer, tmp_path: Path
) -> None:
    user = exec_user("no-such-credential-plugin", installHint="install it from https://example.com/plugin")
    kc = https_stub.write_user_kubeconfig(tmp_path / "kc", user)
    with pytest.raises(ConfigError) as info:
        load_kube(kc, plugin_limits=FAST)
    assert info.value.exit_code == 2
    assert "the credential plugin 'no-such-credential-plugin' is not on PATH" in str(info.value)
    assert "hint: install it from https://example.com/plugin" in str(info.value)
    assert_no_request(https_stub)


def test_a_plugin_that_fails_is_exit_4_with_its_stderr_masked_against_https_stub(
    https_stub: HttpsStubKubeApiServer, tmp_path: Path
) -> None:
    script = plugin(
        tmp_path,
        "sys.stderr.write('error: login expired; old header Authorization: Bearer s3cr3t-t0ken\\n"
        "refresh_token=1//0abcDEF and ya29.a0AfH6SMB\\x1b[31m\\n')\nsys.exit(3)",
    )
    kc = https_stub.write_user_kubeconfig(tmp_path / "kc", exec_user(script, installHint="run fake-login first"))
    with pytest.raises(ClusterError) as info:
        load_kube(kc, plugin_limits=FAST)
    text = str(info.value)
    assert info.value.exit_code == 4
    assert "the credential plugin fake-plugin of " in text and "failed (exit status 3); no request was sent" in text
    assert "error: login expired" in text and "\x1b" not in text
    assert "s3cr3t" not in text and "0abcDEF" not in text and "a0AfH6SMB" not in text
    assert "hint: run fake-login first; run the plugin yourself" in text
    assert_no_request(https_stub)


@pytest.mark.parametrize(
    ("output", "says"),
    [
        ("hello", "printed no JSON"),
        ("", "printed nothing"),
        (json.dumps({"apiVersion": "v1", "kind": "Pod"}), "printed a 'Pod' of 'v1', not an ExecCredential of"),
        (json.dumps({"apiVersion": V1BETA1, "kind": "ExecCredential", "status": {}}), "without status.token"),
        (
            json.dumps(
                {
                    "apiVersion": V1BETA1,
                    "kind": "ExecCredential",
                    "status": {"token": "t", "expirationTimestamp": "soon"},
                }
            ),
            "expirationTimestamp that is not an RFC 3339 time",
        ),
    ],
)
def test_a_plugin_that_prints_no_exec_credential_is_exit_4_against_https_stub(
    https_stub: HttpsStubKubeApiServer, tmp_path: Path, output: str, says: str
) -> None:
    script = plugin(tmp_path, f"sys.stdout.write({output!r})")
    kc = https_stub.write_user_kubeconfig(tmp_path / "kc", exec_user(script))
    with pytest.raises(ClusterError, match=says) as info:
        load_kube(kc, plugin_limits=FAST)
    assert info.value.exit_code == 4 and "no request was sent" in str(info.value)
    assert_no_request(https_stub)


def test_a_plugin_that_hangs_is_stopped_with_a_notice_against_https_stub(
    https_stub: HttpsStubKubeApiServer, tmp_path: Path
) -> None:
    script = plugin(tmp_path, "time.sleep(600)")
    kc = https_stub.write_user_kubeconfig(tmp_path / "kc", exec_user(script))
    notices: list[str] = []
    with pytest.raises(ClusterError) as info:
        load_kube(kc, plugin_limits=PluginLimits(timeout=1.0, notice_after=0.2), on_notice=notices.append)
    assert "the credential plugin fake-plugin of " in str(info.value)
    assert "did not answer within 1 s; no request was sent" in str(info.value)
    assert len(notices) == 1 and "waiting for the credential plugin fake-plugin" in notices[0]
    assert "(giving up after 1 s)" in notices[0]
    assert_no_request(https_stub)


def test_a_plugin_that_leaves_a_daemon_holding_its_stdout_is_not_waited_for_against_https_stub(
    https_stub: HttpsStubKubeApiServer, tmp_path: Path
) -> None:
    """The plugin prints its credential and exits, but a process it started in a session of its own keeps the
    pipe open: reading to the pipe's end waited for that process (here 600 s), past the plugin's bound."""
    pid_file = tmp_path / "daemon.pid"
    daemon = (
        "import subprocess\n"
        "held = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
        f"open({str(pid_file)!r}, 'w').write(str(held.pid))\n"
    )
    script = plugin(tmp_path, daemon + f"print({credential('plugin-token-1')!r})")
    kc = https_stub.write_user_kubeconfig(tmp_path / "kc", exec_user(script))
    try:
        kube = load_kube(kc, plugin_limits=PluginLimits(timeout=20.0, notice_after=20.0))  # the daemon lives 600 s
        assert get_demo(kube) is None
    finally:
        os.kill(int(pid_file.read_text()), signal.SIGKILL)  # it left the plugin's session: pwdeploy leaves it be
    assert https_stub.requests[-1].headers["authorization"] == "Bearer plugin-token-1"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("sys.stdout.write('x' * (3 << 20))", "printed more than 1 MiB on stdout, not an ExecCredential"),
        ("sys.stdout.write('[' * 100_000 + ']' * 100_000)", "printed JSON nested deeper than any ExecCredential"),
        ("os.close(1); os.close(2); time.sleep(600)", "did not exit within 2 s"),
    ],
    ids=["3 MiB", "nested 100,000 deep", "stdout closed, still running"],
)
def test_a_plugins_output_is_read_within_bounds_against_https_stub(
    https_stub: HttpsStubKubeApiServer, tmp_path: Path, body: str, says: str
) -> None:
    script = plugin(tmp_path, body)
    kc = https_stub.write_user_kubeconfig(tmp_path / "kc", exec_user(script))
    with pytest.raises(ClusterError, match=says) as info:
        load_kube(kc, plugin_limits=PluginLimits(timeout=2.0, notice_after=2.0))
    assert info.value.exit_code == 4
    assert_no_request(https_stub)


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"command": "x"}, "has apiVersion None"),
        ({"apiVersion": V1BETA1}, "has no command"),
        ({"apiVersion": V1BETA1, "command": "x", "env": ["A=b"]}, "has env that is not a list of {name, value}"),
        ({"apiVersion": "client.authentication.k8s.io/v1alpha1", "command": "x"}, "has apiVersion 'client.auth"),
        ({"apiVersion": V1BETA1, "command": "x", "env": [{"name": "A=B", "value": "v"}]}, r"env\[0\].name .* '='"),
        ({"apiVersion": V1BETA1, "command": "x", "env": [{"name": "A", "value": "v\0w"}]}, r"env\[0\].value \(A\)"),
        ({"apiVersion": V1BETA1, "command": "x", "env": [{"name": "", "value": "v"}]}, r"env\[0\].name"),
        ({"apiVersion": V1BETA1, "command": "x", "env": [{"name": "A", "value": 3}]}, r"env\[0\].value"),
    ],
)
def test_a_malformed_exec_entry_is_exit_2_against_https_stub(
    https_stub: HttpsStubKubeApiServer, tmp_path: Path, entry: dict[str, Any], says: str
) -> None:
    kc = https_stub.write_user_kubeconfig(tmp_path / "kc", {"exec": entry})
    with pytest.raises(ConfigError, match=says):
        load_kube(kc, plugin_limits=FAST)
    assert_no_request(https_stub)


def test_the_cli_stops_before_any_request_without_a_traceback_against_https_stub(
    https_stub: HttpsStubKubeApiServer, tmp_path: Path
) -> None:
    script = plugin(tmp_path, "sys.stderr.write('cannot log in\\n'); sys.exit(1)")
    kc = https_stub.write_user_kubeconfig(tmp_path / "kc", exec_user(script))
    result = SeamRunner().invoke(cli, ["delete", "demo", "-y", "--kubeconfig", str(kc)])
    assert result.exit_code == 4, result.output
    assert "cannot log in" in result.output and "Traceback" not in result.output
    missing = https_stub.write_user_kubeconfig(tmp_path / "kc2", exec_user("no-such-credential-plugin"))
    result = SeamRunner().invoke(cli, ["list", "--kubeconfig", str(missing)])
    assert result.exit_code == 2 and "is not on PATH" in result.output
    assert_no_request(https_stub)


@pytest.mark.skipif(GKE_PLUGIN is None, reason="gke-gcloud-auth-plugin is not installed (google-cloud-cli)")
@pytest.mark.timeout(90)
def test_the_real_gke_plugin_without_a_login_names_the_gcloud_commands_against_https_stub(
    https_stub: HttpsStubKubeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))  # a gcloud with no account, whatever the machine
    user = exec_user(
        "gke-gcloud-auth-plugin",
        installHint="Install gke-gcloud-auth-plugin for use with kubectl by following "
        "https://cloud.google.com/kubernetes-engine/docs/how-to/cluster-access-for-kubectl#install_plugin",
        provideClusterInfo=True,
    )
    kc = https_stub.write_user_kubeconfig(tmp_path / "kc", user, context="gke_project_us-central1_demo")
    with pytest.raises(ClusterError) as info:
        load_kube(kc, plugin_limits=PluginLimits(timeout=60.0))
    text = str(info.value)
    assert info.value.exit_code == 4
    assert "the credential plugin gke-gcloud-auth-plugin of " in text and "no request was sent" in text
    said, hint = text.split("\n  hint: ")
    assert "It said:" in said and "gcloud" in said  # the plugin's own stderr (it names the gcloud command it ran)
    assert "gcloud auth login" in hint
    assert "gcloud auth application-default login" in text and "gcloud container clusters get-credentials" in text
    assert "cluster-access-for-kubectl#install_plugin" in text
    assert_no_request(https_stub)


# ---------------------------------------------------------------------------------------------- plain http


def plain_http_stub() -> StubKubeApiServer:
    """The stub on plain http (a stub that serves https by default is asked for http)."""
    asks_tls = "tls" in inspect.signature(StubKubeApiServer).parameters
    options: dict[str, Any] = {"tls": False} if asks_tls else {}
    return StubKubeApiServer(**options)


def test_an_http_server_gets_no_credentials_and_no_plugin_runs_against_stub(tmp_path: Path) -> None:
    script = plugin(tmp_path, f"print({credential('plugin-token-1')!r})")
    with plain_http_stub() as stub:
        assert stub.url.startswith("http://")
        for n, user in enumerate([exec_user(script), {"token": "stub-token"}, {"username": "a", "password": "b"}]):
            kc = tmp_path / f"kc{n}"
            kc.write_text(
                yaml.safe_dump(
                    {
                        "clusters": [{"name": "s", "cluster": {"server": stub.url}}],
                        "users": [{"name": "u", "user": user}],
                        "contexts": [{"name": "c", "context": {"cluster": "s", "user": "u"}}],
                        "current-context": "c",
                    }
                )
            )
            notices: list[str] = []
            kube = load_kube(kc, on_notice=notices.append)
            with pytest.raises(ClusterError, match="401"):
                get_demo(kube)
            assert "authorization" not in {k.lower() for k in stub.requests[-1].headers}
            assert len(notices) == 1 and f"{stub.url} is plain http, so the credentials of" in notices[0]
        assert runs(script) == 0


def test_secrets_are_masked() -> None:
    text = (
        'Bearer abc.def token: "t0psecret" password=hunter2 https://me:pw@host/x '
        "eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl AKIAIOSFODNN7EXAMPLEkeyWithDigits123456789 /usr/lib/google-cloud-sdk/bin"
    )
    masked = mask_secrets(text)
    for secret in ("abc.def", "t0psecret", "hunter2", "me:pw", "eyJzdWIiOi", "AKIAIOSFODNN7"):
        assert secret not in masked, masked
    assert "/usr/lib/google-cloud-sdk/bin" in masked and "https://***@host/x" in masked
