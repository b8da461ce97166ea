"""What a local run must hold however it ends: the /dev/shm a job leaves when it exits is still measured, and
`kill -9` of pwdeploy ends the job it started (its watchdog)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from pwdeploy.cli import cli
from pwdeploy.local.limits import SHM, sampled
from pwdeploy.local.unshare import available
from tests.conftest import REPO
from tests.job_processes import in_folder


def test_shm_left_at_exit_is_sampled_once_the_job_has_exited() -> None:
    """The loop never samples here (an hour's interval): only the first sample and the one after the job."""
    job = subprocess.Popen([sys.executable, "-c", "pass"])
    left = SHM / f"pwdeploy-test-{uuid.uuid4().hex}"
    try:
        with sampled(job.pid, interval=3600) as usage:
            job.wait()
            left.write_bytes(b"\0" * (8 * 2**20))  # as a job that fills /dev/shm and exits at once
        assert usage.shm_bytes >= 8 * 2**20 and usage.memory_bytes >= usage.shm_bytes and usage.samples == 2
    finally:
        left.unlink(missing_ok=True)


JOB = """\
import os, subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
if "--escape" in sys.argv:  # a child that leaves the job's session (setsid), as a daemon does
    daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
held = open(sys.argv[1], "wb")  # a /dev/shm file the job holds, as a data loader's block
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "escape",
    [
        False,
        pytest.param(
            True,
            marks=pytest.mark.skipif(
                available(2**20) is not None,
                reason="a process that left the job's session is ended by the job's PID namespace, not here",
            ),
        ),
    ],
    ids=["workers", "setsid"],
)
def test_kill_9_of_pwdeploy_ends_the_job_its_workers_and_those_that_left_its_session(
    tmp_path: Path, escape: bool
) -> None:
    (tmp_path / "job.py").write_text(JOB)
    (tmp_path / "job.yaml").write_text(
        textwrap.dedent(
            """\
            name: kill-test
            pathways_version: 0.10.2
            tpu: {type: v5p-8}
            main: {image: "registry.example/none:0", command: python3 job.py}
            storage: {scratch: gs://bkt/s}
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    block = SHM / f"pwdeploy-test-{uuid.uuid4().hex}"
    pwdeploy = subprocess.Popen(
        [sys.executable, "-m", "pwdeploy", "local", "run", "-f", "job.yaml", "--no-limits-check", "--devices", "1",
         "--", "python3", "job.py", str(block), *(["--escape"] if escape else [])],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
    )  # fmt: skip
    assert pwdeploy.stdout is not None
    assert pwdeploy.stdout.readline() == b"ready\n"
    deadline = time.monotonic() + 30  # a bound on waiting, not a timing assertion
    job = [p for p in in_folder(tmp_path) if p.pid != pwdeploy.pid and "job.py" in " ".join(p.cmdline())]
    expected = 4 if escape else 3  # pwdeploy, the job, its worker (and the one that left its session)
    while time.monotonic() < deadline and len(in_folder(tmp_path)) < expected:
        time.sleep(0.05)
    assert len(in_folder(tmp_path)) >= expected and job
    os.kill(pwdeploy.pid, signal.SIGKILL)
    pwdeploy.wait()
    pwdeploy.stdout.close()
    while time.monotonic() < deadline and in_folder(tmp_path):
        time.sleep(0.05)
    left = in_folder(tmp_path)
    for process in left:
        process.kill()
    assert not left, "the job outlived pwdeploy"
    while time.monotonic() < deadline and block.exists():  # removed once its holders are killed
        time.sleep(0.05)
    exists = block.exists()
    block.unlink(missing_ok=True)
    assert not exists, "the /dev/shm file the killed job held is left"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# ---------------------------------------------------------------------------------------------- local folders


@pytest.fixture
def job_file(tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(
        "name: paths-test\npathways_version: 0.10.2\ntpu: {type: v5p-8}\n"
        'main: {image: "registry.example/none:0", command: "true"}\n'
        "storage: {scratch: gs://bkt/s, hlo_dump: gs://bkt/hlo, checkpoints: gs://bkt/ckpt}\n"
    )
    return path


@pytest.mark.parametrize(
    ("flag", "where", "says"),
    [
        ("--compile-cache", "a-file", "is a file"),
        ("--compile-cache", "a-file/cache", "is a file (in the way of"),
        ("--compile-cache", "/proc/1/cache", "does not let pwdeploy create folders"),
        ("--local-hlo-dir", "a-file", "is a file"),
        ("--local-hlo-dir", "/proc/1/hlo", "does not let pwdeploy create folders"),
    ],
)
def test_an_unusable_local_folder_is_exit_2_naming_field_flag_and_path(
    runner: CliRunner, job_file: Path, flag: str, where: str, says: str
) -> None:
    folder = job_file.parent
    (folder / "a-file").write_text("x")
    path = where if where.startswith("/") else str(folder / where)
    result = runner.invoke(cli, ["local", "run", "-f", str(job_file), flag, path, "--", "true"])
    assert result.exit_code == 2, result.output
    field = "local.compile_cache" if flag == "--compile-cache" else "local.hlo_dir"
    assert f"error: {field}: the local " in result.stderr and says in result.stderr and flag in result.stderr
    assert path.split("/a-file")[0] in result.stderr and "internal error" not in result.stderr
    assert not (folder / ".pwdeploy").exists(), "nothing is created when one folder cannot be"


def test_a_pwdeploy_state_file_is_exit_2_saying_it_must_be_a_folder(runner: CliRunner, job_file: Path) -> None:
    (job_file.parent / ".pwdeploy").write_text("not a folder")
    result = runner.invoke(cli, ["local", "run", "-f", str(job_file), "--", "true"])
    assert result.exit_code == 2, result.output
    assert f"{job_file.parent / '.pwdeploy'} is a file (in the way of" in result.stderr
    assert "storage.checkpoints: " in result.stderr and "must be a folder" in result.stderr
