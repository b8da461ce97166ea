"""Shared fixtures. Goldens are refreshed only with `pytest --update-goldens`."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click
import pytest
from click.testing import CliRunner, Result

if TYPE_CHECKING:
    from pwdeploy.kube.seam import Kube
    from tests.control_plane import ControlPlane
    from tests.drill_stub import DrillStub
    from tests.fake_clock import FakeClock
    from tests.kube_stub import StubKubeApiServer
    from tests.portforward_fake import PortForwardApiFake

REPO = Path(__file__).resolve().parents[1]

# Keep the schema cache (and anything else written under the user's cache folder) out of the home directory,
# for this process and every pwdeploy process the tests start.
os.environ["XDG_CACHE_HOME"] = _CACHE = tempfile.mkdtemp(prefix="pwdeploy-test-cache-")
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

# A shell without job control starts a command put in the background (`cmd &`, as a CI script may) with SIGINT
# ignored, and an ignored signal stays ignored across exec: every pwdeploy the tests start would ignore the Ctrl-C
# the tests send it, as pwdeploy rightly keeps a disposition it was given (nohup's). The tests play a terminal's
# foreground job, whose SIGINT is not ignored: a handler here is reset to the default in every child at exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="Rewrite golden manifests (tests/golden, manifests/) from the current renderer.",
    )


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))


# The jax version the CLI fixtures report as installed, so tests do not depend on what pip installed. Code that
# calls load_job directly passes ``installed_jax=lambda: JAX_VERSION`` itself.
JAX_VERSION = "0.10.2"


class SeamRunner(CliRunner):
    """A CliRunner that passes the CLI's seams (``Seams``) in the click context object: the installed-JAX lookup
    (pinned to JAX_VERSION) and whatever a test adds with ``obj={...}`` (``clock``, ``cores``, ``kube_limits``:
    the fields of ``Seams``)."""

    def invoke(
        self,
        cli: click.Command,
        args: str | Sequence[str] | None = None,
        input: str | bytes | IO[Any] | None = None,
        env: Mapping[str, str | None] | None = None,
        catch_exceptions: bool | None = None,
        color: bool = False,
        **extra: Any,
    ) -> Result:
        from pwdeploy.cli.seams import Seams

        seams = Seams(**{"installed_jax": lambda: JAX_VERSION, **extra.pop("obj", {})})
        return super().invoke(cli, args, input, env, catch_exceptions, color, obj=seams, **extra)


@pytest.fixture
def runner() -> CliRunner:
    return SeamRunner()


@pytest.fixture
def jax_version() -> str:
    """The jax version the CLI fixtures (``runner``, ``cluster_cli``) report as installed."""
    return JAX_VERSION


# ---------------------------------------------------------------------------------------------- cluster (stub)

ClusterCli = Callable[..., Result]


@pytest.fixture
def stub() -> Iterator[StubKubeApiServer]:
    """StubKubeApiServer (a loopback stub, not an API server) with namespaces default and team."""
    from tests.kube_stub import StubKubeApiServer

    with StubKubeApiServer(tokens={"stub-token": "alice", "token-b": "bob"}, namespaces=("default", "team")) as server:
        yield server


@pytest.fixture
def drill_stub() -> Iterator[DrillStub]:
    """DrillStub: the stub plus evictions, timed logs and exec (tests/drill_stub.py)."""
    from tests.drill_stub import DrillStub

    with DrillStub() as server:
        yield server


@pytest.fixture
def api() -> Iterator[PortForwardApiFake]:
    """PortForwardApiFake: the stub plus pods/portforward (tests/portforward_fake.py). A module that uses it
    overrides ``kc`` with a kubeconfig for it."""
    from tests.portforward_fake import PortForwardApiFake

    with PortForwardApiFake(tokens={"stub-token": "alice"}) as server:
        yield server


@pytest.fixture
def kubeconfig(stub: StubKubeApiServer, tmp_path: Path) -> Path:
    return stub.write_kubeconfig(tmp_path / "kubeconfig", {"stub": ("stub-token", None)}, current="stub")


@pytest.fixture
def clock() -> FakeClock:
    from tests.fake_clock import FakeClock

    return FakeClock()


@pytest.fixture
def kube(kubeconfig: Path, clock: FakeClock) -> Kube:
    from pwdeploy.kube.kubeconfig import load_kube

    return load_kube(kubeconfig, clock=clock)


@pytest.fixture
def kc(kubeconfig: Path) -> list[str]:
    """The flags that point a cluster command at the stub."""
    return ["--kubeconfig", str(kubeconfig)]


@pytest.fixture
def cluster_cli(clock: FakeClock) -> ClusterCli:
    """Run ``pwdeploy ARGS`` with the fake clock (and the pinned jax) passed in the click context object."""
    from pwdeploy.cli import cli

    runner = SeamRunner()

    def invoke(args: list[str], input: str | None = None) -> Result:
        return runner.invoke(cli, args, input=input, obj={"clock": clock})

    return invoke


# ------------------------------------------------------------------------------------- cluster (real control plane)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """The real control plane (tests/control_plane: its docstring says what it offers), started once per session
    from the binaries scripts/control-plane.sh built, stopped at the end (also on Ctrl-C and SIGTERM). Outside CI
    a machine without Go, or without the build, skips with one line saying how to get them; under CI (CI=true)
    that, or a failed start, fails."""
    import signal

    from tests.control_plane import binaries, cluster
    from tests.control_plane.processes import StartError

    in_ci = os.environ.get("CI") == "true"
    missing = None
    if not binaries.have_go():
        missing = binaries.NO_GO
    else:
        bin_dir = binaries.built()
        if bin_dir is None:
            missing = "the control plane is not built: bash scripts/control-plane.sh build (a cold build takes long)"
    if missing is not None:
        if in_ci:
            pytest.fail(missing, pytrace=False)
        pytest.skip(missing)
    assert bin_dir is not None
    try:
        plane = cluster.start(bin_dir)
    except StartError as e:
        pytest.fail(f"the control plane did not start: {e}", pytrace=False)
    atexit.register(plane.stop)
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: Any) -> None:
        plane.stop()
        signal.signal(signal.SIGTERM, previous)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield plane
    finally:
        plane.stop()
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def no_jobs_left(control_plane: ControlPlane) -> Iterator[None]:
    """No JobSet and none of their pods in default and the user's namespace before and after the test, also when
    it fails: a job left running holds its nodes' TPUs and host ports, and the next test's pods would not fit."""
    control_plane.clear_jobs()
    yield
    control_plane.clear_jobs()
