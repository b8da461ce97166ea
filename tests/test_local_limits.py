"""`local run` against the cluster's limits: a job's process tree sampled for memory and /dev/shm."""

from __future__ import annotations

import subprocess
import sys

from pwdeploy.config import JobConfig, load_job
from pwdeploy.local.limits import Usage, exceeded, human, summary
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"
MiB = 2**20
# Writes 64 MiB into /dev/shm, keeps it there long enough for several samples, then removes it.
WRITE_SHM = (
    "import os, time; path = f'/dev/shm/pwdeploy-limits-test-{os.getpid()}'\n"
    "with open(path, 'wb') as f: f.write(b'x' * (64 << 20))\n"
    "time.sleep(0.6); os.unlink(path)"
)
HOLD_MEMORY = "import time; held = b'x' * (400 << 20); time.sleep(0.6)"  # 400 MiB written, so resident


def job(**overrides: str) -> JobConfig:
    return load_job(EXAMPLE, {k.replace("__", "."): v for k, v in overrides.items()}, installed_jax=lambda: "0.10.2")


def local_run(*flags: str, program: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(EXAMPLE), "--devices", "1",
         "--compile-cache", "", *flags, "--", "python3", "-c", program],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_limits_name_the_field_to_raise() -> None:
    config = job(main__shm_size="32Mi", main__memory="256Mi")
    assert exceeded(Usage(memory_bytes=100 * MiB, shm_bytes=10 * MiB), config) == []
    shm, memory = exceeded(Usage(memory_bytes=300 * MiB, shm_bytes=64 * MiB), config)
    assert shm.startswith("main.shm_size: the job used 64 MiB of /dev/shm, more than 32Mi") and "SIGBUS" in shm
    assert memory.startswith("main.memory: the job's processes held 300 MiB, more than 256Mi") and "OOM" in memory


def test_summary_line() -> None:
    line = summary(Usage(memory_bytes=int(1.3 * 2**30), shm_bytes=48 * MiB, children=8), job(), cpus=2)
    assert line == (
        "pwdeploy local: peak memory 1.3 GiB of main.memory 32Gi, peak /dev/shm 48 MiB of main.shm_size 8Gi, "
        "peak 8 child processes (main.data_workers 7) on 2 local CPUs"
    )
    assert [human(0), human(3 * 1024), human(5 * MiB)] == ["0 B", "3 KiB", "5 MiB"]


def test_shm_beyond_main_shm_size_is_refused_with_exit_8() -> None:
    done = local_run("--shm-size", "32Mi", program=WRITE_SHM)
    assert done.returncode == 8, done.stderr
    assert "error: main.shm_size: the job used 64 MiB of /dev/shm, more than 32Mi" in done.stderr
    assert "pwdeploy local: peak memory" in done.stderr


def test_shm_within_main_shm_size_passes() -> None:
    done = local_run("--shm-size", "256Mi", program=WRITE_SHM)
    assert done.returncode == 0, done.stderr
    assert "peak /dev/shm 64 MiB of main.shm_size 256Mi" in done.stderr


def test_memory_beyond_main_memory_is_refused_and_the_check_can_be_skipped() -> None:
    done = local_run("--main-memory", "256Mi", "--shm-size", "64Mi", program=HOLD_MEMORY)
    assert done.returncode == 8, done.stderr
    assert "error: main.memory: the job's processes held" in done.stderr and "raise main.memory" in done.stderr
    skipped = local_run("--main-memory", "256Mi", "--shm-size", "64Mi", "--no-limits-check", program=HOLD_MEMORY)
    assert skipped.returncode == 0, skipped.stderr
    assert "peak memory" not in skipped.stderr


def test_memory_of_child_processes_counts() -> None:
    """Data-loader workers are children of the job: their memory is the container's too."""
    program = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {HOLD_MEMORY!r}], check=True)"
    done = local_run("--main-memory", "256Mi", "--shm-size", "64Mi", program=program)
    assert done.returncode == 8, done.stderr


def test_a_failed_job_keeps_its_status_and_still_reports() -> None:
    done = local_run("--shm-size", "32Mi", program=f"{WRITE_SHM}\nraise SystemExit(3)")
    assert done.returncode == 3
    assert "pwdeploy local: main.shm_size: the job used 64 MiB" in done.stderr


def test_psutil_is_imported_only_when_a_run_is_checked() -> None:
    code = "import sys, pwdeploy.cli.local, pwdeploy.local.runner; print('psutil' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr
