"""pwdeploy.runtime.stop_on_sigterm: a program told to stop (SIGTERM, the kubelet's stop) saves at its next step
boundary and exits 143 within the pod's grace period; one that never reaches a boundary still exits 143 before the
kubelet's SIGKILL would make it 137; and the handler makes SIGTERM reach a program that is PID 1 of its container."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pwdeploy import identifiers as ids
from pwdeploy import stopping
from tests.conftest import REPO
from tests.pid_namespace import Launched, why_not

# A training loop in the shape MaxText's and Orbax's users write: a step, then at the boundary a look at whether
# the job is being stopped; on a stop, the last checkpoint (a file here), then the exit code that requeues it.
LOOP = """
import sys, time
from pwdeploy import runtime
stop = runtime.stop_on_sigterm()
print("ready", flush=True)
step = 0
while True:
    step += 1
    time.sleep(0.02)  # the step
    if stop.requested:
        with open(sys.argv[1], "w") as saved:
            saved.write(str(step))
        stop.exit()
"""

# The same, but the step never ends (a hung collective, a long compile): the timer exits in its place.
STUCK = """
import time
from pwdeploy import runtime
stop = runtime.stop_on_sigterm()
print("ready", flush=True)
while True:
    time.sleep(3600)
"""


def run(program: str, *argv: str, grace: str = "30") -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), **{ids.TERMINATION_GRACE_ENV: grace})
    process = subprocess.Popen(
        [sys.executable, "-c", program, *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    return process


def test_a_loop_saves_at_its_next_step_boundary_and_exits_143(tmp_path: Path) -> None:
    saved = tmp_path / "step"
    process = run(LOOP, str(saved))
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode == ids.STOPPED_EXIT_CODE, err
    assert int(saved.read_text()) >= 1
    assert "SIGTERM: the job is being stopped; saving at the next step boundary, then exiting 143" in err
    assert "(at the latest in 27 s, before the grace period of 30 s ends in SIGKILL)" in err


def test_a_loop_that_never_reaches_a_boundary_exits_143_before_the_grace_period_ends() -> None:
    process = run(STUCK, grace="1")  # the timer: 1 - 0.1 = 0.9 s after the SIGTERM
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode == ids.STOPPED_EXIT_CODE, err
    assert "no step boundary reached within 0.9 s of SIGTERM: exiting 143 without the last checkpoint" in err


@pytest.mark.skipif(why_not() is not None, reason="no PID namespaces here")
def test_the_handler_makes_sigterm_reach_a_program_that_is_pid_1(tmp_path: Path) -> None:
    """A JobSet rendered without shareProcessNamespace: main is PID 1 of its container, and only a handler makes the
    kernel deliver the kubelet's SIGTERM (pid_namespaces(7)); the program saves and exits 143, not 137."""
    saved = tmp_path / "step"
    main = Launched.as_init(["env", f"PYTHONPATH={REPO}", sys.executable, "-c", LOOP, str(saved)])
    try:
        assert main.line() == "ready"
        os.kill(main.pid, signal.SIGTERM)
        status = main.status()
    finally:
        main.stop()
    assert status == ids.STOPPED_EXIT_CODE
    assert saved.exists()


def test_the_time_left_counts_down_from_the_sigterm_on_the_pods_grace_period() -> None:
    now = [100.0]
    stop = stopping.Stop(143, 30.0, 3.0, say=lambda line: None, clock=lambda: now[0])
    assert not stop.requested and stop.seconds_left() is None
    stop.received_at = now[0]  # as the handler records it, without its timer
    now[0] += 10
    assert stop.requested and stop.seconds_left() == 17.0
    with pytest.raises(SystemExit) as exited:
        stop.exit()
    assert exited.value.code == 143


@pytest.mark.parametrize("code", [0, 137, 256])
def test_a_code_that_would_complete_or_fail_the_job_is_refused(code: int) -> None:
    with pytest.raises(ValueError, match=rf"exit_code {code}: a stopped job must exit 143"):
        stopping.install(code)


def test_the_grace_period_comes_from_the_pod_else_kubernetes_default() -> None:
    assert stopping.grace_seconds({}) == 30.0
    assert stopping.grace_seconds({ids.TERMINATION_GRACE_ENV: "120"}) == 120.0
    with pytest.raises(ValueError, match="is not a number of seconds"):
        stopping.grace_seconds({ids.TERMINATION_GRACE_ENV: "soon"})
