"""The child-process seam of `pwdeploy local run`: start checks, exit statuses and signals (real children)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pwdeploy.errors import LocalRunError
from pwdeploy.local.runner import check_startable, exit_status, run_child
from tests.conftest import REPO

ENV = dict(os.environ)


def test_exit_status_is_shell_style() -> None:
    assert [exit_status(c) for c in (0, 3, -signal.SIGINT, -signal.SIGKILL)] == [0, 3, 130, 137]


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["no-such-program-xyz"], "'no-such-program-xyz' not found on PATH (working directory {cwd})"),
        (["./missing.sh"], "'./missing.sh' not found (working directory {cwd})"),
        (["./plain.txt"], "'./plain.txt' is not executable"),
        (["./subdir"], "'./subdir' is not executable"),
    ],
)
def test_commands_that_cannot_start(tmp_path: Path, command: list[str], message: str) -> None:
    (tmp_path / "plain.txt").write_text("not a program\n", encoding="utf-8")
    (tmp_path / "subdir").mkdir()
    with pytest.raises(LocalRunError) as raised:
        check_startable(command, cwd=tmp_path, env=ENV)
    assert raised.value.message == f"cannot start the job: {message.format(cwd=tmp_path)}"


def test_missing_working_directory(tmp_path: Path) -> None:
    with pytest.raises(LocalRunError, match=r"working directory .*gone does not exist"):
        run_child([sys.executable, "-c", "pass"], cwd=tmp_path / "gone", env=ENV)


def test_relative_program_is_found_in_the_working_directory(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\nexit 4\n", encoding="utf-8")
    script.chmod(0o755)
    assert run_child(["./job.sh"], cwd=tmp_path, env=ENV) == 4


def test_the_child_gets_the_default_ctrl_c_handling(tmp_path: Path) -> None:
    """pwdeploy waits with SIGINT handled (not ignored): an ignored signal would stay ignored in the child."""
    code = "import signal, sys; sys.exit(0 if signal.getsignal(signal.SIGINT) is signal.default_int_handler else 5)"
    assert run_child([sys.executable, "-c", code], cwd=tmp_path, env=ENV) == 0
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored afterwards


# Runs in its own interpreter: the SIGTERM goes to that process, so a broken handler kills it, not pytest.
_SIGTERM_WHILE_STARTING = """
import os, signal, subprocess, sys
from pathlib import Path
from pwdeploy.local.runner import run_child

def spawn_after_sigterm(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # arrives while the child is being started
    return subprocess.Popen(*args, **kwargs)

command = [sys.executable, "-c", "import time; time.sleep(30)"]
sys.exit(run_child(command, cwd=Path.cwd(), env=dict(os.environ), spawn=spawn_after_sigterm))
"""


def test_sigterm_before_the_child_exists_reaches_it_once_started(tmp_path: Path) -> None:
    env = dict(ENV, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), ENV.get("PYTHONPATH")])))
    done = subprocess.run(
        [sys.executable, "-c", _SIGTERM_WHILE_STARTING], cwd=tmp_path, env=env, capture_output=True, timeout=20
    )
    assert done.returncode == 128 + signal.SIGTERM, done.stderr.decode()
