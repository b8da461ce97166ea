"""`local run` against the cluster's limits: a job's process tree sampled for memory and /dev/shm."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pwdeploy.config import JobConfig, load_job
from pwdeploy.local.limits import Usage, exceeded, human, summary
from pwdeploy.local.unshare import available
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"
MiB = 2**20
# Writes 64 MiB into /dev/shm, keeps it there long enough for several samples, then removes it.
WRITE_SHM = (
    "import os, time; path = f'/dev/shm/pwdeploy-limits-test-{os.getpid()}'\n"
    "with open(path, 'wb') as f: f.write(b'x' * (64 << 20))\n"
    "time.sleep(2); os.unlink(path)"
)  # held 2 s: the sampler reads every 0.1 s, but on a machine busy with other runs 0.6 s was once missed
HOLD_MEMORY = "import time; held = b'x' * (400 << 20); time.sleep(0.6)"  # 400 MiB written, so resident


def job(**overrides: str) -> JobConfig:
    return load_job(EXAMPLE, {k.replace("__", "."): v for k, v in overrides.items()}, installed_jax=lambda: "0.10.2")


def local_run(*flags: str, program: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(EXAMPLE), "--devices", "1",
         "--compile-cache", "", *flags, "--", "python3", "-c", program],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def shm_mib(pattern: str, stderr: str) -> int:
    """The MiB of /dev/shm a line of ``stderr`` matching ``pattern`` (with one ``(\\d+)``) reports. /dev/shm is
    the machine's: another program writing there during the run adds to what the job wrote, never takes from it."""
    found = re.search(pattern, stderr)
    assert found, stderr
    return int(found[1])


def test_limits_name_the_field_to_raise() -> None:
    config = job(main__shm_size="32Mi", main__memory="256Mi", head__transfer_shm_size="0")
    assert exceeded(Usage(memory_bytes=100 * MiB, shm_bytes=10 * MiB), config) == []
    shm, memory = exceeded(Usage(memory_bytes=300 * MiB, shm_bytes=64 * MiB), config)
    assert shm.startswith("main.shm_size: the job used 64 MiB of /dev/shm, more than 32Mi") and "SIGBUS" in shm
    assert memory.startswith("main.memory: the job held 300 MiB (its processes and /dev/shm), more than 256Mi")
    # what the kubelet would report, and what the JobSet render prints would do about it (the failure evaluator)
    assert "the kernel's OOM killer would end main (exit code 137, reason OOMKilled)" in memory
    assert (
        "and rule user_program_failed (FailJobSet): Job " in memory
        and "main killed by SIGKILL (exit code 137)" in memory
    )


def test_summary_line() -> None:
    line = summary(Usage(memory_bytes=int(1.3 * 2**30), shm_bytes=48 * MiB, children=8), job(), cpus=2)
    assert line == (
        "pwdeploy local: peak memory 1.3 GiB of main.memory 32Gi, peak /dev/shm 48 MiB of main.shm_size 8Gi, "
        "peak 8 child processes (main.data_workers 7) on 2 local CPUs"
    )
    assert [human(0), human(3 * 1024), human(5 * MiB)] == ["0 B", "3 KiB", "5 MiB"]


def test_a_run_never_sampled_says_so_rather_than_peak_memory_0_b() -> None:
    from pwdeploy.local.outcome import summary_line
    from pwdeploy.local.runner import Ended

    ended = [Ended(0, None, None, 0, private_shm=True)]
    line = summary_line(Usage(), ended, job(), cores=2)
    assert line.startswith("pwdeploy local: memory and /dev/shm not sampled") and "0 B" not in line, line
    sampled = summary_line(Usage(memory_bytes=5 * MiB, samples=3), ended, job(), cores=2)
    assert sampled.startswith("pwdeploy local: peak memory 5 MiB of main.memory 32Gi"), sampled


PRIVATE = available(1 << 20)  # why this machine gives a job no private /dev/shm (None: it does)


@pytest.mark.skipif(PRIVATE is None, reason="the job gets a private /dev/shm here: test_local_unshare.py")
def test_shm_beyond_main_shm_size_is_refused_with_exit_8_where_the_machines_is_used() -> None:
    done = local_run("--shm-size", "32Mi", program=WRITE_SHM)
    assert done.returncode == 8, done.stderr
    assert shm_mib(r"error: main.shm_size: the job used (\d+) MiB of /dev/shm, more than 32Mi", done.stderr) >= 64
    assert "pwdeploy local: peak memory" in done.stderr


def test_shm_within_main_shm_size_passes() -> None:
    done = local_run("--shm-size", "256Mi", program=WRITE_SHM)
    assert done.returncode == 0, done.stderr
    assert shm_mib(r"peak /dev/shm (\d+) MiB of main.shm_size 256Mi", done.stderr) >= 64


@pytest.mark.slow
def test_memory_beyond_main_memory_is_refused_and_the_check_can_be_skipped() -> None:
    done = local_run("--main-memory", "256Mi", "--shm-size", "64Mi", "--transfer-shm-size", "0", program=HOLD_MEMORY)
    assert done.returncode == 8, done.stderr
    assert "error: main.memory: the job held" in done.stderr and "raise main.memory" in done.stderr
    skipped = local_run(
        "--main-memory",
        "256Mi",
        "--shm-size",
        "64Mi",
        "--transfer-shm-size",
        "0",
        "--no-limits-check",
        program=HOLD_MEMORY,
    )
    assert skipped.returncode == 0, skipped.stderr
    assert "peak memory" not in skipped.stderr


def test_memory_of_child_processes_counts() -> None:
    """Data-loader workers are children of the job: their memory is the container's too."""
    program = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {HOLD_MEMORY!r}], check=True)"
    done = local_run("--main-memory", "256Mi", "--shm-size", "64Mi", "--transfer-shm-size", "0", program=program)
    assert done.returncode == 8, done.stderr


def test_a_failed_job_keeps_its_status_and_still_reports() -> None:
    done = local_run("--main-memory", "256Mi", "--shm-size", "64Mi", "--transfer-shm-size", "0",
                     program=f"{HOLD_MEMORY}\nraise SystemExit(3)")  # fmt: skip
    assert done.returncode == 3
    assert "pwdeploy local: main.memory: the job held" in done.stderr


def test_psutil_is_imported_only_when_a_run_is_checked() -> None:
    code = "import sys, pwdeploy.cli.local, pwdeploy.local.runner; print('psutil' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


FORKED_HOLDERS = """
import os, sys, time
block = bytearray(os.urandom(1 << 20)) * 200  # 200 MiB written by the parent
children = [os.fork() for _ in range(3)]
if 0 in children:
    time.sleep(30)
    os._exit(0)
print("ready", flush=True)
time.sleep(30)
"""


def test_pages_shared_by_forked_workers_count_once() -> None:
    """Forked loader workers share the parent's pages: resident memory counts them 4 times, the cluster once."""
    import psutil

    from pwdeploy.local.limits import _proportional, tree_memory

    if _proportional(os.getpid()) is None:
        pytest.skip("this kernel's smaps_rollup has no Pss_Anon/Pss_File")
    proc = subprocess.Popen([sys.executable, "-c", FORKED_HOLDERS], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        resident = sum(p.memory_info().rss for p in tree)
        held, _ = tree_memory(proc.pid)
    finally:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    assert resident > 700 * MiB  # four processes each map the 200 MiB
    assert 100 * MiB < held < 300 * MiB  # once (about 200 MiB), not four times


# Allocates (and writes) the MiB it reads on stdin, then forks holders sharing every page, each step on request.
STEPWISE = """
import os, sys, time
held = []
for line in sys.stdin:
    if line.strip() == "fork":
        for _ in range(3):
            if os.fork() == 0:
                time.sleep(60)
                os._exit(0)
    else:
        held.append(bytearray(os.urandom(1 << 20)) * int(line))
    print("done", flush=True)
"""


def test_cheap_samples_between_full_reads_track_a_known_allocation_and_shared_pages_count_once() -> None:
    """statm between smaps_rollup reads: an allocation shows at once; a fork (shared pages) forces a full read."""
    import psutil

    from pwdeploy.local.limits import DETAIL_EVERY, MEMBERS_EVERY, Tree, _proportional

    if _proportional(os.getpid()) is None:
        pytest.skip("this kernel's smaps_rollup has no Pss_Anon/Pss_File")
    proc = subprocess.Popen(
        [sys.executable, "-c", STEPWISE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
    )
    assert proc.stdin is not None and proc.stdout is not None

    def ask(line: str) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(line + "\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == "done\n"

    try:
        ask("0")
        tree = Tree(proc.pid)
        before, _ = tree.read()  # the first read is a full one
        ask("200")
        assert tree.samples % DETAIL_EVERY != 0, "the next read is a cheap one"
        grown, children = tree.read()
        assert children == 0
        assert 195 * MiB <= grown - before <= 215 * MiB, (before, grown)
        ask("fork")
        for _ in range(MEMBERS_EVERY):  # the next listing finds the members changed: a full read, each page once
            shared, children = tree.read()
        resident = sum(p.memory_info().rss for p in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children()])
        assert children == 3 and resident > 700 * MiB
        assert grown - 20 * MiB <= shared <= grown + 40 * MiB, (grown, shared)
    finally:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            stream.close()


def test_the_reported_peak_is_a_known_allocation(tmp_path: Path) -> None:
    """400 MiB written and held: the summary's peak is that plus the interpreter, not twice it."""
    summary = tmp_path / "summary.json"
    done = local_run("--summary-json", str(summary), "--shm-size", "64Mi", program=HOLD_MEMORY)
    assert done.returncode == 0, done.stderr
    peak = json.loads(summary.read_text(encoding="utf-8"))["peak_memory_bytes"]
    assert 400 * MiB <= peak <= 460 * MiB, peak
