"""Shared fixtures. Goldens are refreshed only with `pytest --update-goldens`."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner, Result

if TYPE_CHECKING:
    from pwdeploy.cluster.api import Kube
    from tests.kube_stub import FakeClock, StubKubeApiServer

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

# Keep the schema cache (and anything else written under the user's cache folder) out of the home directory,
# for this process and every pwdeploy process the tests start.
os.environ["XDG_CACHE_HOME"] = _CACHE = tempfile.mkdtemp(prefix="pwdeploy-test-cache-")
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens", action="store_true", default=False,
        help="Rewrite golden manifests (tests/golden, manifests/) from the current renderer.",
    )  # fmt: skip


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def jax_version(monkeypatch: pytest.MonkeyPatch) -> str:
    """Pin the 'installed jax' seen by the config, so tests do not depend on what pip installed."""
    import pwdeploy.config

    monkeypatch.setattr(pwdeploy.config, "installed_jax_version", lambda: "0.10.2")
    return "0.10.2"


# ---------------------------------------------------------------------------------------------- cluster (stub)

ClusterCli = Callable[..., Result]


@pytest.fixture
def stub() -> Iterator[StubKubeApiServer]:
    """StubKubeApiServer (a loopback stub, not an API server) with namespaces default and team."""
    from tests.kube_stub import StubKubeApiServer

    with StubKubeApiServer(tokens={"stub-token": "alice", "token-b": "bob"}, namespaces=("default", "team")) as server:
        yield server


@pytest.fixture
def kubeconfig(stub: StubKubeApiServer, tmp_path: Path) -> Path:
    return stub.write_kubeconfig(tmp_path / "kubeconfig", {"stub": ("stub-token", None)}, current="stub")


@pytest.fixture
def clock() -> FakeClock:
    from tests.kube_stub import FakeClock

    return FakeClock()


@pytest.fixture
def kube(kubeconfig: Path, clock: FakeClock) -> Kube:
    from pwdeploy.cluster.connect import connect

    return connect(kubeconfig, clock=clock)


@pytest.fixture
def kc(kubeconfig: Path) -> list[str]:
    """The flags that point a cluster command at the stub."""
    return ["--kubeconfig", str(kubeconfig)]


@pytest.fixture
def cluster_cli(clock: FakeClock) -> ClusterCli:
    """Run ``pwdeploy ARGS`` with the fake clock passed in the click context object (the CLI's clock seam)."""
    from pwdeploy.cli import cli

    runner = CliRunner()

    def invoke(args: list[str], input: str | None = None) -> Result:
        return runner.invoke(cli, args, input=input, obj={"clock": clock})

    return invoke
