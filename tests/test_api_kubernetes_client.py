"""api.from_kubernetes: the official client a notebook configured becomes pwdeploy's own, against StubKubeApiServer
(a loopback stub, not an API server, over TLS from a throwaway CA): the same server, the same token (refreshed as
the official client refreshes it), the same TLS trust; and nothing of the official client is imported to do it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pwdeploy import api
from pwdeploy.errors import ArgumentError, ClusterError
from tests.conftest import REPO
from tests.kube_objects import rendered_jobset
from tests.kube_stub import StubKubeApiServer

kubernetes = pytest.importorskip("kubernetes", reason="the official client is a test dependency, not pwdeploy's")


def official(kubeconfig: Path) -> Any:
    return kubernetes.config.new_client_from_config(config_file=str(kubeconfig))


def test_the_official_clients_server_token_and_tls_are_pwdeploys_against_the_stub(
    kubeconfig: Path, stub: StubKubeApiServer
) -> None:
    stub.put("jobsets", rendered_jobset())
    cluster = api.from_kubernetes(official(kubeconfig), "default")
    assert api.status(cluster, "dp-example").jobset["metadata"]["name"] == "dp-example"
    assert [job.name for job in api.list_jobs(cluster)] == ["dp-example"]
    assert _authorization(stub.requests[-1]) == "Bearer stub-token"  # the stub answers 401 without it
    assert cluster.kube.host == stub.url.rstrip("/") and stub.url.startswith("https://")  # verified by the CA only


def test_a_token_the_official_client_refreshes_is_asked_again_before_each_request_against_the_stub(
    kubeconfig: Path, stub: StubKubeApiServer
) -> None:
    client = official(kubeconfig)
    now = {"token": "stub-token"}

    def refresh(conf: Any) -> None:  # what load_kube_config's hook does for an exec plugin's expiring token
        conf.api_key["BearerToken"] = f"Bearer {now['token']}"

    client.configuration.refresh_api_key_hook = refresh
    cluster = api.from_kubernetes(client)
    api.list_jobs(cluster)
    now["token"] = "token-b"
    api.list_jobs(cluster)
    assert [_authorization(r) for r in stub.requests] == ["Bearer stub-token", "Bearer token-b"]


def test_a_configuration_alone_works_and_its_prefixed_key_is_sent_against_the_stub(stub: StubKubeApiServer) -> None:
    conf = kubernetes.client.Configuration(host=stub.url, api_key={"authorization": "stub-token"})
    conf.api_key_prefix = {"authorization": "Bearer"}
    conf.ssl_ca_cert = _ca_file(stub)
    assert api.list_jobs(api.from_kubernetes(conf, "team")) == []
    assert _authorization(stub.requests[-1]) == "Bearer stub-token"
    assert "/namespaces/team/" in stub.requests[-1].path


def test_without_the_ca_the_server_is_not_trusted_against_the_stub(stub: StubKubeApiServer) -> None:
    conf = kubernetes.client.Configuration(host=stub.url, api_key={"BearerToken": "Bearer stub-token"})
    with pytest.raises(ClusterError, match="certificate"):
        api.list_jobs(api.from_kubernetes(conf))
    assert stub.requests == []


def test_the_client_is_bounded_and_rate_limited_as_the_callers_settings_say() -> None:
    from pwdeploy.kube.throttle import limit_from

    conf = kubernetes.client.Configuration(host="https://10.0.0.1", api_key={"BearerToken": "Bearer t"})
    limits = api.RequestLimits(timeout=(1.0, 2.0), deadline=3.0, slow_after=0.5)
    rate = limit_from(5, 2)
    kube = api.from_kubernetes(conf, settings=api.ClientSettings(requests=limits, rate=rate)).kube
    assert (kube.timeout, kube.deadline, kube.slow_after) == ((1.0, 2.0), 3.0, 0.5)
    assert kube.throttle is not None and kube.throttle.limit == rate


def test_credentials_are_not_sent_over_plain_http() -> None:
    conf = kubernetes.client.Configuration(host="http://127.0.0.1:1", api_key={"BearerToken": "Bearer secret"})
    heard: list[str] = []
    cluster = api.from_kubernetes(conf, on_notice=heard.append)
    sent = cluster.kube.api_client.headers({})
    assert "authorization" not in sent and "plain http" in heard[0] and "secret" not in heard[0]


@pytest.mark.parametrize("given", ["https://10.0.0.1", {"host": "https://10.0.0.1"}, None])
def test_anything_but_the_official_client_is_the_callers_argument_error(given: object) -> None:
    with pytest.raises(ArgumentError) as caught:
        api.from_kubernetes(given)
    assert caught.value.field == "client"


def test_nothing_of_the_official_client_is_imported_to_use_its_configuration() -> None:
    """The official client costs its users their own import; pwdeploy adds none (it does not depend on it)."""
    code = (
        "import sys, types\n"
        "from pwdeploy import api\n"
        "conf = types.SimpleNamespace(host='https://10.0.0.1', verify_ssl=True, api_key={'BearerToken': 'Bearer t'},"
        " api_key_prefix={}, refresh_api_key_hook=None, auth_settings=lambda: {})\n"
        "cluster = api.from_kubernetes(conf)\n"
        "assert cluster.kube.api_client.headers({})['authorization'] == 'Bearer t'\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.strip() == "[]"


def _authorization(recorded: Any) -> str | None:
    return next((v for k, v in recorded.headers.items() if k.lower() == "authorization"), None)


def _ca_file(stub: StubKubeApiServer) -> str:
    from pwdeploy.kube.http_client import private_file

    assert stub.ca_pem is not None
    return private_file(stub.ca_pem)
