"""Two `local run`s of one job share its checkpoint folder (.pwdeploy/checkpoints beside the config): the second is
refused, naming the first's pid, however the first later ends (a `kill -9` leaves no lock). A checkpoint folder
that is a mount point is not emptied."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO

HOLD = "import time\nprint('ready', flush=True)\ntime.sleep(600)"


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    (tmp_path / "job.yaml").write_text(
        textwrap.dedent(
            """\
            name: lock-test
            pathways_version: 0.10.2
            tpu: {type: v5p-8}
            main: {image: "registry.example/none:0", command: "true"}
            storage: {scratch: gs://bkt/s, checkpoints: gs://bkt/ckpt}
            """
        ),
        encoding="utf-8",
    )
    return tmp_path


def argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "pwdeploy", "local", "run", "-f", "job.yaml", "--devices", "1", "--compile-cache",
            "", "--no-check", "--no-limits-check", *args]  # fmt: skip


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO))


def start_holder(job_dir: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        argv("--", "python3", "-c", HOLD), cwd=job_dir, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def second(job_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv(*args, "--", "true"), cwd=job_dir, env=env(), capture_output=True, text=True,
                          timeout=60)  # fmt: skip


def test_a_second_run_of_the_job_is_refused_naming_the_first_and_its_checkpoints_stay(job_dir: Path) -> None:
    first = start_holder(job_dir)
    saved = job_dir / ".pwdeploy" / "checkpoints" / "7" / "state"
    saved.parent.mkdir(parents=True)
    saved.write_text("the first run's step 7")
    try:
        for flags in ((), ("--resume",)):
            refused = second(job_dir, *flags)
            assert refused.returncode == 7, refused.stderr
            assert refused.stderr.startswith(
                f"error: another local run (pid {first.pid}) is using the checkpoint folder "
                f"{job_dir / '.pwdeploy' / 'checkpoints'}: this run would clear or overwrite its checkpoints"
            ), refused.stderr
            assert "hint: wait for that run to end" in refused.stderr and "CPU devices" not in refused.stderr
            assert saved.read_text() == "the first run's step 7"
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    assert second(job_dir).returncode == 0, "the lock goes with the run"


@pytest.mark.parametrize(
    ("plant", "kind"),
    [
        ("symlink", "a symbolic link"),
        ("hard link", "a hard link to another file"),
        ("folder", "not a file pwdeploy can open"),
        ("fifo", "not a regular file"),
    ],
)
def test_something_else_at_the_lock_is_refused_and_what_it_points_at_is_untouched(
    job_dir: Path, tmp_path_factory: pytest.TempPathFactory, plant: str, kind: str
) -> None:
    """A link at .pwdeploy/.checkpoints.lock once had its target truncated (and a pid written into it); a folder
    there was an internal error."""
    target = tmp_path_factory.mktemp("elsewhere") / "precious"
    target.write_text("kept\n")
    lock = job_dir / ".pwdeploy" / ".checkpoints.lock"
    lock.parent.mkdir()
    planted: dict[str, Callable[[Path], object]] = {
        "symlink": lambda path: path.symlink_to(target),
        "hard link": lambda path: os.link(target, path),
        "folder": lambda path: path.mkdir(),
        "fifo": lambda path: os.mkfifo(path),
    }
    planted[plant](lock)
    refused = second(job_dir)
    assert refused.returncode == 7, refused.stderr
    assert refused.stderr.startswith(f"error: {lock} is not pwdeploy's lock file: it is {kind}"), refused.stderr
    assert f"hint: remove it (rm {lock})" in refused.stderr and "Traceback" not in refused.stderr
    assert target.read_text() == "kept\n"


@pytest.mark.slow
def test_kill_9_of_the_first_run_leaves_no_lock(job_dir: Path) -> None:
    first = start_holder(job_dir)
    os.kill(first.pid, signal.SIGKILL)
    first.communicate(timeout=60)
    done = second(job_dir)
    assert done.returncode == 0, done.stderr


def unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = ["unshare", "--map-root-user", "--mount", "sh", "-c", "mount -t tmpfs none /mnt 2>/dev/null || exit 1"]
    return subprocess.run(probe, capture_output=True, timeout=30, check=False).returncode == 0


@pytest.mark.skipif(not unshare_works(), reason="needs unshare(1) with user and mount namespaces to mount a folder")
def test_a_checkpoint_folder_that_is_a_mount_point_is_not_emptied(job_dir: Path) -> None:
    """In a mount namespace of the test's own (nothing reaches the machine): a tmpfs at .pwdeploy/checkpoints."""
    folder = job_dir / ".pwdeploy" / "checkpoints"
    folder.mkdir(parents=True)
    runs = " ; ".join(
        [
            f"mount -t tmpfs none {folder}",
            f"echo kept > {folder}/step",
            f"{' '.join(argv())} -- true; echo status=$?",
            f"{' '.join(argv('--resume'))} -- true; echo status=$?",
            f"cat {folder}/step",
        ]
    )
    done = subprocess.run(["unshare", "--map-root-user", "--mount", "sh", "-c", runs], cwd=job_dir, env=env(),
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.stdout.splitlines() == ["status=2", "status=0", "kept"], done.stderr
    assert (
        f"error: storage.checkpoints: the local checkpoint folder {folder} is a mount point with files in it"
    ) in done.stderr
    assert "hint: pass --resume to keep (and resume from) what is there, or empty it yourself" in done.stderr
