"""head.insecure_grpc: plain gRPC between the JAX client and the IFRT proxy, set on both sides or on neither (XLA's
IFRT proxy reads IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS in the client and in the server, and a client on ALTS
cannot talk to a proxy without it): the rendered proxy and main, the refusal of one side alone, and connect's
exports for a headless job whose proxy runs with it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from pwdeploy import identifiers as ids
from pwdeploy import manifests
from pwdeploy.errors import ConfigError
from tests.kube_objects import small_job
from tests.portforward_fake import PortForwardApiFake, TcpStandIn
from tests.test_connect import HEAD, JOB, PROXY_LOG, cli, head_pod, kc, standin  # noqa: F401 (fixtures)

INSECURE = {"name": ids.INSECURE_GRPC_ENV, "value": "true"}


def containers(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    (jobset,) = manifests.build(small_job(values))
    (head,) = [r for r in jobset["spec"]["replicatedJobs"] if r["name"] == ids.HEAD_JOB]
    pod = head["template"]["spec"]["template"]["spec"]
    return {c["name"]: c for c in [*pod.get("initContainers", []), *pod["containers"]]}


def test_off_by_default_neither_side_gets_the_variable() -> None:
    found = containers({})
    assert all(INSECURE not in c.get("env", []) for c in found.values())


def test_on_the_proxy_and_main_get_it_together_and_nothing_else_does() -> None:
    found = containers({"head.insecure_grpc": True})
    with_it = sorted(name for name, c in found.items() if INSECURE in c.get("env", []))
    assert with_it == [ids.MAIN_CONTAINER, ids.PROXY_CONTAINER]


@pytest.mark.parametrize("field", ["main.env", "proxy_env"])
def test_one_side_alone_is_refused_naming_the_switch(field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        small_job({field: {ids.INSECURE_GRPC_ENV: "true"}})
    assert caught.value.field == f"{field}.{ids.INSECURE_GRPC_ENV}"
    assert "head.insecure_grpc (--insecure-grpc)" in str(caught.value)


@pytest.fixture
def insecure_session(api: PortForwardApiFake, standin: TcpStandIn) -> PortForwardApiFake:  # noqa: F811
    (jobset,) = manifests.build(
        small_job({"headless": True, "main.image": None, "main.command": None, "head.insecure_grpc": True}, name=JOB)
    )
    api.put("jobsets", jobset)
    api.put("pods", head_pod())
    api.logs[("default", HEAD, ids.PROXY_CONTAINER)] = PROXY_LOG
    return api


def test_connect_exports_it_for_a_proxy_that_runs_with_it_stub(
    insecure_session: PortForwardApiFake,
    kc: list[str],  # noqa: F811
) -> None:
    result = cli(["connect", JOB, *kc, "--print-env", "--local-port", "29123"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [
        "export JAX_PLATFORMS=proxy",
        "export JAX_BACKEND_TARGET=grpc://127.0.0.1:29123",
        f"export {ids.INSECURE_GRPC_ENV}=true",
    ]


CHILD = f"import os, sys; open(sys.argv[1], 'w').write(os.environ.get({ids.INSECURE_GRPC_ENV!r}, 'unset'))"


def test_connect_gives_it_to_the_command_it_runs_stub(
    insecure_session: PortForwardApiFake,
    kc: list[str],  # noqa: F811
    tmp_path: Path,
) -> None:
    out = tmp_path / "child.txt"
    result = cli(["connect", JOB, *kc, "--local-port", "0", "--", sys.executable, "-c", CHILD, str(out)])
    assert result.exit_code == 0, result.stderr
    assert out.read_text() == "true"
