"""Impersonation from the kubeconfig (``as``, ``as-uid``, ``as-groups``, ``as-user-extra``), compared with kubectl:
both send the same ``Impersonate-*`` header lines to the same StubKubeApiServer (a loopback stub, not an API
server), on requests and on streams, and both refuse groups, a uid or extras without a user."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from pwdeploy.errors import ConfigError
from pwdeploy.kube.impersonation import escape_key
from pwdeploy.kube.kubeconfig import load_kube
from pwdeploy.kube.port_stream import open_port_stream
from pwdeploy.kube.seam import PODS, Action
from tests.conftest import ClusterCli
from tests.fake_clock import FakeClock
from tests.kube_answers import Recorded
from tests.kube_stub import StubKubeApiServer
from tests.portforward_fake import PortForwardApiFake, TcpStandIn

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

AS_ADMIN: dict[str, Any] = {
    "as": "admin@example.com",
    "as-uid": "1234-abcd",
    "as-groups": ["system:masters", "tpu-users"],
    "as-user-extra": {"scopes": ["view", "edit"], "acme.com/project": ["p 1"], "Reason%": ["x"]},
}


def with_user(path: Path, **fields: Any) -> Path:
    config = yaml.safe_load(path.read_text())
    config["users"][0]["user"].update(fields)
    path.write_text(yaml.safe_dump(config))
    return path


def impersonation(record: Recorded) -> list[tuple[str, str]]:
    """The Impersonate-* header lines of a request, names lowercased (HTTP names are case-insensitive, and Go
    sends them canonicalised), in the order sent within each name."""
    return sorted((k.lower(), v) for k, v in record.lines if k.lower().startswith("impersonate-"))


def list_pods(kube: Any) -> None:
    kube.list_items(Action("list", PODS, "default"), PODS.path("default"))


@needs_kubectl
def test_requests_carry_the_same_impersonation_headers_as_kubectls_against_stub(
    stub: StubKubeApiServer, kubeconfig: Path
) -> None:
    path = with_user(kubeconfig, **AS_ADMIN)
    list_pods(load_kube(path, clock=FakeClock()))
    ours = impersonation(stub.requests[-1])
    raw = ["--kubeconfig", str(path), "get", "--raw", "/api/v1/namespaces/default/pods"]
    done = subprocess.run([str(KUBECTL), *raw], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    theirs = impersonation(stub.sent("GET", "/api/v1/namespaces/default/pods")[-1])
    assert ours == theirs
    assert ("impersonate-group", "system:masters") in ours and ("impersonate-group", "tpu-users") in ours
    assert ("impersonate-extra-acme.com%2fproject", "p 1") in ours and ("impersonate-extra-reason%25", "x") in ours


@needs_kubectl
@pytest.mark.parametrize("field", [{"as-groups": ["g"]}, {"as-uid": "u"}, {"as-user-extra": {"k": ["v"]}}])
def test_groups_uid_or_extra_without_a_user_are_refused_as_kubectl_refuses_them(
    stub: StubKubeApiServer, kubeconfig: Path, field: dict[str, Any]
) -> None:
    path = with_user(kubeconfig, **field)
    with pytest.raises(ConfigError) as caught:
        load_kube(path, clock=FakeClock())
    assert "without impersonating a user" in str(caught.value) and "as: USER" in str(caught.value.hint)
    raw = ["--kubeconfig", str(path), "get", "--raw", "/version"]
    done = subprocess.run([str(KUBECTL), *raw], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0 and "without impersonating a user" in done.stderr
    assert stub.requests == []


@pytest.mark.parametrize(
    ("field", "said"),
    [
        ({"as": ["a"]}, "as is not a string"),
        ({"as": "a", "as-groups": "g"}, "as-groups is not a list of strings"),
        ({"as": "a", "as-user-extra": ["k"]}, "as-user-extra is not a map"),
        ({"as": "a", "as-user-extra": {"k": "v"}}, "as-user-extra.k is not a list of strings"),
        ({"as": "a\r\nX-Injected: 1"}, "line break or NUL"),
    ],
)
def test_impersonation_fields_of_the_wrong_shape_are_config_errors(
    stub: StubKubeApiServer, kubeconfig: Path, field: dict[str, Any], said: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_kube(with_user(kubeconfig, **field), clock=FakeClock())
    assert said in str(caught.value)
    assert stub.requests == []


def test_streams_carry_the_impersonation_headers_stub(tmp_path: Path) -> None:
    with TcpStandIn() as standin, PortForwardApiFake() as api:
        api.put("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "status": {"phase": "Running"}})
        api.route("default", "p", 8471, standin.address)
        path = api.write_kubeconfig(tmp_path / "kc", {"fake": ("stub-token", None)}, current="fake")
        kube = load_kube(with_user(path, **AS_ADMIN), clock=FakeClock())
        list_pods(kube)
        stream = open_port_stream(kube, "default", "p", 8471)
        stream.close()
        (upgrade,) = api.sent("GET", "/portforward")
        assert impersonation(upgrade) == impersonation(api.sent("GET", "/pods")[0]) != []


def test_a_wrong_websocket_accept_is_one_lasting_error_not_a_network_problem_stub(tmp_path: Path) -> None:
    from pwdeploy.kube.seam import ApiError, stream_retryable

    with TcpStandIn() as standin, PortForwardApiFake() as api:
        api.put("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "status": {"phase": "Running"}})
        api.route("default", "p", 8471, standin.address)
        api.wrong_accept = True
        path = api.write_kubeconfig(tmp_path / "kc", {"fake": ("stub-token", None)}, current="fake")
        with pytest.raises(ApiError) as caught:
            open_port_stream(load_kube(path, clock=FakeClock()), "default", "p", 8471)
    assert "Sec-WebSocket-Accept" in str(caught.value) and not stream_retryable(caught.value)
    assert len(api.sent("GET", "/portforward")) == 1


def test_the_list_command_acts_as_the_impersonated_user_against_stub(
    cluster_cli: ClusterCli, kc: list[str], kubeconfig: Path, stub: StubKubeApiServer
) -> None:
    with_user(kubeconfig, **{"as": "bob", "as-groups": ["team"]})
    result = cluster_cli(["list", *kc])
    assert result.exit_code == 0, result.output
    assert impersonation(stub.requests[-1]) == [("impersonate-group", "team"), ("impersonate-user", "bob")]


def test_an_extra_key_is_escaped_as_client_go_escapes_it() -> None:
    assert escape_key("acme.com/project") == "acme.com%2Fproject"
    assert escape_key("100%") == "100%25" and escape_key("é") == "%C3%A9" and escape_key("a-b_c") == "a-b_c"
