"""`local run` gives each attempt a /dev/shm of its own, of main.shm_size, in mount and PID namespaces of its own:
the job fails where the pod would, leaves nothing in the machine's /dev/shm, and nothing it starts outlives it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from pwdeploy.cli import cli
from pwdeploy.local.unshare import available
from tests.conftest import REPO
from tests.job_processes import in_folder
from tests.shm_watch import SHM

MiB = 2**20
WHY_NOT = available(MiB)
needs_private = pytest.mark.skipif(WHY_NOT is not None, reason=f"no private /dev/shm here: {WHY_NOT}")


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    (tmp_path / "job.yaml").write_text(
        textwrap.dedent(
            """\
            name: shm-test
            pathways_version: 0.10.2
            tpu: {type: v5p-8}
            main: {image: "registry.example/none:0", command: "true", shm_size: 16Mi}
            storage: {scratch: gs://bkt/s}
            """
        ),
        encoding="utf-8",
    )
    return tmp_path


def local_run(job_dir: Path, program: str, *argv: str, flags: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "pwdeploy", "local", "run", "-f", "job.yaml", "--devices", "1", "--compile-cache", "",
         "--summary-json", "summary.json", *flags, "--", "python3", "-c", program, *argv],
        cwd=job_dir, env=env, capture_output=True, text=True, timeout=90,
    )  # fmt: skip


def summary(job_dir: Path) -> dict[str, object]:
    loaded = json.loads((job_dir / "summary.json").read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


# Prints the size of its /dev/shm, then writes argv[2] MiB into /dev/shm/argv[1] and keeps the file.
WRITE = """
import os, sys
shm = os.statvfs("/dev/shm")
print(shm.f_blocks * shm.f_frsize, flush=True)
with open(f"/dev/shm/{sys.argv[1]}", "wb") as f:
    for _ in range(int(sys.argv[2])):
        f.write(b"x" * (1 << 20))
        f.flush()
"""


@needs_private
def test_writing_past_main_shm_size_fails_with_enospc_as_in_the_pod_and_the_machines_shm_is_untouched(
    job_dir: Path,
) -> None:
    name = f"pwdeploy-namespace-test-{uuid.uuid4().hex}"
    done = local_run(job_dir, WRITE, name, "32")
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == [str(16 * MiB)], "the job's /dev/shm is main.shm_size"
    assert "OSError: [Errno 28] No space left on device" in done.stderr
    assert "the job filled its /dev/shm (main.shm_size 16Mi) before it failed" in done.stderr
    assert "peak /dev/shm 16 MiB of main.shm_size 16Mi" in done.stderr
    assert summary(job_dir)["peak_shm_bytes"] == 16 * MiB
    assert not (SHM / name).exists(), "the job wrote into the machine's /dev/shm"


MAP_PAST = """
import mmap, os
fd = os.open("/dev/shm/block", os.O_RDWR | os.O_CREAT)
os.ftruncate(fd, 32 << 20)  # a sparse file may be larger than the tmpfs: its pages are not there yet
block = mmap.mmap(fd, 32 << 20)
for offset in range(0, 32 << 20, 4096):
    block[offset] = 1  # past 16 MiB, the tmpfs has no page to give: SIGBUS
print("not reached", flush=True)
"""


@needs_private
def test_touching_a_mapped_page_past_main_shm_size_is_sigbus_as_in_the_pod(job_dir: Path) -> None:
    done = local_run(job_dir, MAP_PAST)
    assert done.returncode == 135, done.stderr  # 128 + SIGBUS
    assert "not reached" not in done.stdout
    assert "attempt 0 killed by SIGBUS (exit status 135)" in done.stderr


@needs_private
def test_a_job_within_main_shm_size_reports_the_namespaces_peak_and_its_files_go_with_it(job_dir: Path) -> None:
    name = f"pwdeploy-namespace-test-{uuid.uuid4().hex}"
    done = local_run(job_dir, f"{WRITE}\nimport time; time.sleep(0.5)", name, "12")
    assert done.returncode == 0, done.stderr
    assert "its private /dev/shm went with it" in done.stderr
    assert summary(job_dir)["peak_shm_bytes"] == 12 * MiB  # the job's file alone: nobody else writes there
    assert not (SHM / name).exists()


@needs_private
def test_a_fraction_of_a_byte_mounts_one_page_as_the_kubelet_does_never_an_unlimited_tmpfs(
    job_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A job built in code (the config refuses ``512m``) still gets what the kubelet would mount: its sizeLimit
    rounded up (1 byte: one page), never ``size=0``, which is a tmpfs without a limit."""
    from pwdeploy import api
    from pwdeploy.local.limits import PAGE
    from pwdeploy.quantity import canonical

    loaded = api.load(job_dir / "job.yaml", installed_jax=lambda: "0.10.2")
    job = loaded._replace(main=loaded.main._replace(shm_size=canonical("512m", "main.shm_size")))
    name = f"pwdeploy-namespace-test-{uuid.uuid4().hex}"
    command = [sys.executable, "-c", WRITE, name, "1"]
    options = api.LocalRunOptions(check_program=False, check_limits=False)
    run = api.run_local(job, command, options, cwd=job_dir, environ=dict(os.environ))
    out, err = capfd.readouterr()
    assert out.splitlines() == [str(PAGE)], "the job's /dev/shm is one page"
    assert run.exit_status == 1 and "No space left on device" in err


def test_shm_use_is_read_from_the_files_blocks_where_statvfs_reads_no_blocks(tmp_path: Path) -> None:
    """A tmpfs mounted with ``size=0`` has no limit, and statvfs reports 0 blocks for it: the 4 MiB the files hold
    are counted all the same (and a sparse file counts what it holds, not its length)."""
    program = textwrap.dedent(
        """\
        import os, sys
        from pathlib import Path
        from pwdeploy.local.limits import shm_used
        folder = Path(sys.argv[1])
        (folder / "full").write_bytes(b"x" * (4 << 20))
        with open(folder / "sparse", "wb") as f:
            f.truncate(64 << 20)
        print(os.statvfs(folder).f_blocks, shm_used(folder))
        """
    )
    mount = 'mount -t tmpfs -o size=0 tmpfs "$1" && exec "$2" -c "$3" "$1"'
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, "sh", str(tmp_path), sys.executable,
         program],
        capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(REPO)),
    )  # fmt: skip
    if done.returncode != 0 and ("Operation not permitted" in done.stderr or "not found" in done.stderr):
        pytest.skip(f"no mount namespace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", str(4 << 20)]


# Starts a child that leaves the job's session (setsid) and ignores SIGTERM, then exits 0 at once.
ESCAPES = """
import subprocess, sys
stubborn = "import signal as s, time; s.signal(s.SIGTERM, s.SIG_IGN); print('up', flush=True); time.sleep(600)"
child = subprocess.Popen([sys.executable, "-c", stubborn], start_new_session=True, stdout=subprocess.PIPE)
child.stdout.readline()
"""


@needs_private
def test_a_process_that_left_the_jobs_session_does_not_outlive_the_job(job_dir: Path) -> None:
    done = local_run(job_dir, ESCAPES, flags=("--no-limits-check",))
    assert done.returncode == 0, done.stderr
    assert "ended 1 process the job left running" in done.stderr
    assert in_folder(job_dir) == []


# A child that is still ending when the main process exits, as multiprocessing's resource tracker is (it reads its
# pipe to the end, then exits): not a process the job left running.
ENDING_CHILD = """
import subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
"""


@needs_private
def test_a_child_that_ends_on_its_own_just_after_main_is_not_counted_as_left_running(job_dir: Path) -> None:
    done = local_run(job_dir, ENDING_CHILD, flags=("--no-limits-check",))
    assert done.returncode == 0, done.stderr
    assert "ended 0 processes the job left running" in done.stderr, done.stderr


def test_where_no_private_shm_can_be_made_one_line_says_so_and_the_run_goes_on(
    job_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the probe stubbed to refuse (as a machine without user namespaces does): the machine's /dev/shm."""
    monkeypatch.setattr("pwdeploy.local.unshare.Probe.answer", lambda self: "unshare: Operation not permitted")
    monkeypatch.chdir(job_dir)
    result = CliRunner().invoke(cli, ["local", "run", "-f", "job.yaml", "--devices", "1", "--compile-cache", "",
                                      "--", sys.executable, "-c", "pass"])  # fmt: skip
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if "machine's /dev/shm" in line]
    assert notes == [
        "note: the job uses the machine's /dev/shm, not a private one of main.shm_size (unshare: Operation not "
        "permitted): a private one needs root or user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
        "user.max_user_namespaces > 0)"
    ]
    assert "removed 0 files it left in /dev/shm" in result.stderr


def test_the_namespace_probe_answers_once_and_leaves_nothing_running() -> None:
    """The probe starts at once and is asked later; asked twice it gives one answer, and it is reaped."""
    from pwdeploy.local.unshare import Probe

    probe = Probe(MiB)
    process = probe._process
    assert process is not None
    assert probe.answer() == WHY_NOT == probe.answer()
    assert process.returncode is not None  # reaped: no zombie of it
    assert probe._read == -1  # its pipe closed


def test_a_probe_never_asked_is_killed_and_reaped_when_closed() -> None:
    """pwdeploy failed before it needed the answer (a program that cannot start): nothing of the probe is left."""
    from pwdeploy.local.unshare import Probe

    probe = Probe(MiB)
    process = probe._process
    assert process is not None
    probe.close()
    probe.close()  # again: nothing happens
    assert process.returncode is not None
    assert probe._read == -1


def test_a_local_run_that_cannot_start_its_program_leaves_no_probe_behind(
    job_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe runs while the program is checked: the run refused after it started still ends it."""
    import psutil

    from pwdeploy.local import unshare

    started: list[unshare.Probe] = []
    real = unshare.Probe.__init__

    def recorded(self: unshare.Probe, size: int) -> None:
        real(self, size)
        started.append(self)

    monkeypatch.setattr(unshare.Probe, "__init__", recorded)
    monkeypatch.chdir(job_dir)
    result = CliRunner().invoke(cli, ["local", "run", "-f", "job.yaml", "--devices", "1", "--compile-cache", "",
                                      "--", "./no-such-program"])  # fmt: skip
    assert result.exit_code != 0
    assert "no-such-program" in result.stderr and "not found" in result.stderr, result.stderr
    assert len(started) == 1
    assert started[0]._process is None and started[0]._read == -1
    assert not [p for p in psutil.Process().children() if "probe" in " ".join(p.cmdline())]


@pytest.mark.parametrize("first_line, second_line", [(b"init 41\n", b"started\n"), (b"started\n", b"init 41\n")])
def test_the_launchers_first_lines_name_init_in_whichever_order_its_two_writers_wrote_them(
    first_line: bytes, second_line: bytes
) -> None:
    """init writes "started" and the launcher "init PID" to one pipe: init's line can come first. Reading only up to
    "started" once left init unknown, the run unsampled and its summary at "peak memory 0 B"."""
    import threading

    from pwdeploy.local.unshare import Reports

    read, write = os.pipe()
    os.write(write, first_line)

    def write_the_second_line() -> None:
        os.write(write, second_line)
        os.close(write)

    later = threading.Timer(0.2, write_the_second_line)
    later.start()
    try:
        reports = Reports(read)
        reports.first()  # returns once both are known: the second line is written 0.2 s later
    finally:
        later.join()
        os.close(read)
    assert reports.started
    assert reports.init == 41
