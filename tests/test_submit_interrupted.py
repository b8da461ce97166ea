"""`submit` interrupted (Ctrl-C, SIGTERM) while its apply is in flight: the installed CLI, run as a user runs it,
against StubKubeApiServer (a loopback stub, not an API server). The apply may or may not have created the JobSet;
pwdeploy looks, and says which and how to delete it, with the exit code of the signal."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.kube_stub import StubKubeApiServer

EXAMPLE = str(REPO / "examples" / "data_parallel" / "job.yaml")  # dp-example
PWDEPLOY = shutil.which("pwdeploy", path=str(Path(sys.executable).parent)) or "pwdeploy"


def submit_until(kubeconfig: Path, ready: object, signum: int) -> subprocess.CompletedProcess[str]:
    """Start `pwdeploy submit`, send ``signum`` once ``ready()`` holds (the apply in flight), and wait for it."""
    args = [PWDEPLOY, "submit", "-f", EXAMPLE, "--kubeconfig", str(kubeconfig), "--skip-preflight"]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not ready() and process.poll() is None:  # type: ignore[operator]
            assert time.monotonic() < deadline, "the apply never started"
            time.sleep(0.05)
        process.send_signal(signum)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return subprocess.CompletedProcess(args, process.returncode, out, err)


@pytest.mark.parametrize(("signum", "code", "name"), [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")])
def test_an_interrupt_after_the_jobset_landed_says_it_was_created_and_how_to_delete_it_against_stub(
    stub: StubKubeApiServer, kubeconfig: Path, signum: int, code: int, name: str
) -> None:
    stub.slow_answers["PATCH"] = 60  # created at once; the answer never arrives in time
    done = submit_until(kubeconfig, lambda: stub.get("jobsets", "default", "dp-example") is not None, signum)
    assert done.returncode == code, done.stderr
    assert f"{name} while jobset dp-example was being applied: it WAS created" in done.stderr
    assert "pwdeploy delete dp-example -n default" in done.stderr
    assert "Aborted." not in done.stderr and "Traceback" not in done.stderr


def test_an_interrupt_before_the_jobset_landed_says_nothing_was_created_against_stub(
    stub: StubKubeApiServer, kubeconfig: Path
) -> None:
    stub.hang("PATCH", "/jobsets/dp-example$")  # the request is in, and nothing is carried out
    done = submit_until(kubeconfig, lambda: bool(stub.sent("PATCH", "/jobsets/dp-example")), signal.SIGINT)
    assert done.returncode == 130, done.stderr
    assert "Ctrl-C while jobset dp-example was being applied: it was not created" in done.stderr
    assert stub.get("jobsets", "default", "dp-example") is None and "Traceback" not in done.stderr
