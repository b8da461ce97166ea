"""Restarts and faults in `pwdeploy local run`, on small programs (real processes; no jax in the job): restarts
as the rendered JobSet's failure policy decides them (tests/test_failure_policy.py has the rules themselves)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.job_processes import in_folder

# Each attempt appends {attempt, fail_at_step, pid} to attempts.jsonl, then exits with the status the
# attempt's number picks from argv[1] ("75,75,0": attempts 0 and 1 exit 75, the retry code; attempt 2 succeeds).
BY_ATTEMPT = """
import json, os, sys
attempt = int(os.environ["PWDEPLOY_RESTART_ATTEMPT"])
with open("attempts.jsonl", "a") as f:
    f.write(json.dumps({"attempt": attempt, "fail_at_step": os.environ.get("PWDEPLOY_FAIL_AT_STEP")}) + "\\n")
statuses = [int(s) for s in sys.argv[1].split(",")]
sys.exit(statuses[min(attempt, len(statuses) - 1)])
"""
# A training loop: a /dev/shm file per attempt (its name in shm-N.txt), held open by two children that ignore
# SIGTERM (pids in pids-N.json), and runtime.step_done after every step; on attempt 0, given --sleep, it sleeps
# after step 2 (for --kill-after).
STEPS = """
import json, os, subprocess, sys, time
from pwdeploy import runtime
attempt = runtime.restart_attempt()
shm = f"/dev/shm/pwdeploy-restart-test-{os.getpid()}"
with open(shm, "wb") as f:
    f.write(b"x" * 4096)
with open(f"shm-{attempt}.txt", "w") as f:
    f.write(shm)
stubborn = "import signal as s, sys, time; s.signal(s.SIGTERM, s.SIG_IGN); f = open(sys.argv[-1]); time.sleep(60)"
kids = [subprocess.Popen([sys.executable, "-c", stubborn, shm]) for _ in range(2)]
with open(f"pids-{attempt}.json", "w") as f:
    json.dump([k.pid for k in kids], f)
for step in range(1, 6):
    time.sleep(0.15)
    runtime.step_done(step)
    print(f"attempt {attempt} step {step}", flush=True)
    if attempt == 0 and step == 2 and "--sleep" in sys.argv:
        time.sleep(60)
"""


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    (tmp_path / "by_attempt.py").write_text(BY_ATTEMPT, encoding="utf-8")
    (tmp_path / "steps.py").write_text(STEPS, encoding="utf-8")
    (tmp_path / "job.yaml").write_text(
        textwrap.dedent(
            """\
            name: restart-test
            pathways_version: 0.10.2
            tpu: {type: v5p-8}
            main: {image: "registry.example/none:0", command: "python3 by_attempt.py 75,75,0"}
            storage: {scratch: gs://bkt/s}
            scheduling: {max_restarts: 2}
            """
        ),
        encoding="utf-8",
    )
    return tmp_path


def local_run(job_dir: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return subprocess.run(
        [sys.executable, "-m", "pwdeploy", "local", "run", "-f", "job.yaml", "--compile-cache", "", *args],
        cwd=job_dir, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def attempts(job_dir: Path) -> list[dict[str, object]]:
    lines = (job_dir / "attempts.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def restart_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "restarting from scratch" in line]


def alive(job_dir: Path) -> list[int]:
    """The job's processes still running (found by their working directory: in a PID namespace of the job's own,
    the pids it wrote name other processes here)."""
    pids = [pid for path in job_dir.glob("pids-*.json") for pid in json.loads(path.read_text(encoding="utf-8"))]
    assert pids, "the job wrote no pids"
    return [process.pid for process in in_folder(job_dir)]


RETRIED = (
    "rule retry_exit_code (RestartJobSet, restart {n} of {limit}): Job restart-test-pathways-head-0 failed with "
    "BackoffLimitExceeded (main exited 75: no podFailurePolicy rule matched: failure 1 counted, over backoffLimit 0)"
)
PROGRAM_FAILED = (
    "rule user_program_failed (FailJobSet): Job restart-test-pathways-head-0 failed with PodFailurePolicy (main "
    "{how}: podFailurePolicy rule 2 (FailJob on exit codes of main NotIn [0, 75, 143]))"
)
SLICE_LOST = (
    "rule slice_lost (RestartJobSet, restart 1 of 2): Job restart-test-worker-0 failed with MaxFailedIndexesExceeded "
    "(the pod ended with DisruptionTarget, no exit code: failure 5 of index 0 counted, over backoffLimitPerIndex 4; "
    "1 failed index(es), over maxFailedIndexes 0)"
)


def test_the_retry_exit_code_restarts_up_to_max_restarts_with_the_attempt_number(job_dir: Path) -> None:
    done = local_run(job_dir)
    assert done.returncode == 0, done.stderr
    assert [a["attempt"] for a in attempts(job_dir)] == [0, 1, 2]
    assert restart_lines(done.stderr) == [
        f"pwdeploy local: attempt 0 exited with status 75; {RETRIED.format(n=1, limit=2)}; restarting from "
        "scratch as attempt 1",
        f"pwdeploy local: attempt 1 exited with status 75; {RETRIED.format(n=2, limit=2)}; restarting from "
        "scratch as attempt 2",
    ]
    assert "; 3 attempts; " in done.stderr


def test_a_programs_own_failure_fails_at_once_as_the_jobset_does(job_dir: Path) -> None:
    """max_restarts is 2, yet sys.exit(3) runs once: the head's podFailurePolicy fails the JobSet on it."""
    done = local_run(job_dir, "--", "python3", "by_attempt.py", "3")
    assert done.returncode == 3
    assert len(attempts(job_dir)) == 1 and not restart_lines(done.stderr)
    assert f"pwdeploy local: attempt 0 exited with status 3; {PROGRAM_FAILED.format(how='exited 3')}; no restart" in (
        done.stderr.splitlines()
    )


def test_the_users_own_retry_exit_code_restarts(job_dir: Path) -> None:
    done = local_run(job_dir, "--retry-exit-code", "3", "--", "python3", "by_attempt.py", "3,0")
    assert done.returncode == 0, done.stderr
    assert [a["attempt"] for a in attempts(job_dir)] == [0, 1]
    assert restart_lines(done.stderr)[0].startswith(
        "pwdeploy local: attempt 0 exited with status 3; rule retry_exit_code"
    )


def test_the_exit_status_is_the_last_attempts_and_the_flag_overrides_the_config(job_dir: Path) -> None:
    done = local_run(job_dir, "--max-restarts", "1", "--", "python3", "by_attempt.py", "75,4,0")
    assert done.returncode == 4
    assert [a["attempt"] for a in attempts(job_dir)] == [0, 1]
    assert len(restart_lines(done.stderr)) == 1
    assert done.stderr.splitlines()[-1] == "pwdeploy local: the job exited with status 4"


def test_with_max_restarts_spent_the_retry_code_fails(job_dir: Path) -> None:
    done = local_run(job_dir, "--max-restarts", "1")
    assert done.returncode == 75
    assert [a["attempt"] for a in attempts(job_dir)] == [0, 1]
    assert (
        "pwdeploy local: attempt 1 exited with status 75; rule retry_exit_code (RestartJobSet, but 1 of maxRestarts "
        "1 used: ReachedMaxRestarts): Job restart-test-pathways-head-0 failed with BackoffLimitExceeded (main exited "
        "75: no podFailurePolicy rule matched: failure 1 counted, over backoffLimit 0); no restart"
    ) in done.stderr.splitlines()


def test_a_success_or_no_restart_left_is_not_restarted(job_dir: Path) -> None:
    done = local_run(job_dir, "--", "python3", "by_attempt.py", "0")
    assert done.returncode == 0 and len(attempts(job_dir)) == 1 and not restart_lines(done.stderr)
    (job_dir / "attempts.jsonl").unlink()
    done = local_run(job_dir, "--max-restarts", "0", "--", "python3", "by_attempt.py", "5")
    assert done.returncode == 5 and len(attempts(job_dir)) == 1 and not restart_lines(done.stderr)


def test_a_program_killed_by_a_signal_fails_and_the_line_names_the_signal(job_dir: Path) -> None:
    """A crash (SIGSEGV: 139 on the cluster) is main's own failure: FailJob, then user_program_failed."""
    code = "import os, signal; n = int(os.environ['PWDEPLOY_RESTART_ATTEMPT']); n or os.kill(os.getpid(), 11)"
    done = local_run(job_dir, "--", "python3", "-c", code)
    assert done.returncode == 139, done.stderr
    how = "exited 139"
    assert (
        f"pwdeploy local: attempt 0 killed by SIGSEGV (exit status 139); {PROGRAM_FAILED.format(how=how)}; no restart"
    ) in done.stderr.splitlines()


@pytest.mark.slow
def test_fail_at_step_kills_attempt_0_and_the_restart_runs_through(job_dir: Path) -> None:
    done = local_run(job_dir, "--fail-at-step", "3", "--", "python3", "steps.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"attempt 0 step {n}" for n in (1, 2)] + [
        f"attempt 1 step {n}" for n in range(1, 6)
    ]
    assert "pwdeploy.runtime: step 3 reached PWDEPLOY_FAIL_AT_STEP=3: SIGKILL to the job" in done.stderr
    assert restart_lines(done.stderr) == [
        "pwdeploy local: attempt 0 killed by SIGKILL (exit status 137) at --fail-at-step 3 (a lost slice); "
        f"{SLICE_LOST}; restarting from scratch as attempt 1"
    ]
    assert alive(job_dir) == []
    # attempt 0's file (its tree was SIGKILLed) and attempt 1's (it never removed it)
    private = "; 2 attempts; ended 2 processes the job left running; its private /dev/shm went with it"
    counted = re.search(r"; 2 attempts; ended 2 processes the job left running; removed (\d+) files? it", done.stderr)
    # the machine's /dev/shm is shared: others' leftovers may count too
    assert private in done.stderr or (counted and int(counted[1]) >= 2), done.stderr
    left = [Path(path.read_text(encoding="utf-8")) for path in job_dir.glob("shm-*.txt")]
    assert len(left) == 2 and not any(path.exists() for path in left)


def test_the_fault_is_only_in_attempt_0s_environment(job_dir: Path) -> None:
    done = local_run(job_dir, "--fail-at-step", "7")
    assert done.returncode == 0, done.stderr
    assert [a["fail_at_step"] for a in attempts(job_dir)] == ["7", None, None]


@pytest.mark.slow
def test_kill_after_kills_attempt_0_from_outside(job_dir: Path) -> None:
    done = local_run(job_dir, "--kill-after", "2", "--", "python3", "steps.py", "--sleep")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:2] == ["attempt 0 step 1", "attempt 0 step 2"]
    assert done.stdout.splitlines()[-1] == "attempt 1 step 5"
    assert restart_lines(done.stderr) == [
        "pwdeploy local: attempt 0 killed with SIGKILL by --kill-after 2 (exit status 137) (a lost slice); "
        f"{SLICE_LOST}; restarting from scratch as attempt 1"
    ]
    assert alive(job_dir) == []


@pytest.mark.parametrize(
    ("fault", "program"),
    [(["--fail-at-step", "3"], ["steps.py"]), (["--kill-after", "1.5"], ["steps.py", "--sleep"])],
)
def test_a_fault_without_restarts_fails_and_says_what_to_raise(
    job_dir: Path, fault: list[str], program: list[str]
) -> None:
    done = local_run(job_dir, "--max-restarts", "0", *fault, "--", "python3", *program)
    assert done.returncode == 137
    last = done.stderr.splitlines()[-1]
    assert last.startswith("pwdeploy local: the job died (killed ")
    assert f"after {' '.join(fault)} with no restart left" in last
    assert last.endswith("raise scheduling.max_restarts (--max-restarts N, now 0)")
    assert alive(job_dir) == []


def test_a_job_that_dies_before_the_fault_is_not_blamed_on_it(job_dir: Path) -> None:
    done = local_run(job_dir, "--max-restarts", "0", "--fail-at-step", "3", "--", "python3", "by_attempt.py", "5")
    assert done.returncode == 5
    assert done.stderr.splitlines()[-1] == "pwdeploy local: the job exited with status 5"


def test_the_limits_verdict_covers_every_attempt(job_dir: Path) -> None:
    """Attempt 0 holds 400 MiB (main.memory 256Mi) then dies; attempt 1 succeeds: exit 8 all the same."""
    code = (
        "import os, time\nif os.environ['PWDEPLOY_RESTART_ATTEMPT'] == '0':\n"
        "    held = b'x' * (400 << 20); time.sleep(0.6); raise SystemExit(75)\n"
    )
    done = local_run(job_dir, "--main-memory", "256Mi", "--shm-size", "64Mi", "--transfer-shm-size", "0", "--",
                     "python3", "-c", code)  # fmt: skip
    assert done.returncode == 8, done.stderr
    assert re.search(r"main.memory: the job held \d+ MiB \(its processes and /dev/shm\), more than 256Mi", done.stderr)
    assert len(restart_lines(done.stderr)) == 1


def test_ctrl_c_ends_the_run_without_a_restart(job_dir: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    loop = "import time\ntry:\n    print('ready', flush=True); time.sleep(60)\nexcept KeyboardInterrupt:\n    exit(1)"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pwdeploy", "local", "run", "-f", "job.yaml", "--", "python3", "-c", loop],
        cwd=job_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal does: pwdeploy's foreground process group
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert not restart_lines(err) and "; 1 attempt; " in err
    assert err.splitlines()[-1] == "pwdeploy local: the job was interrupted"


def test_a_hangup_ignored_by_whoever_started_pwdeploy_stays_ignored(job_dir: Path) -> None:
    """As under nohup: SIGHUP was ignored when pwdeploy started, so it neither stops pwdeploy nor the job."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    argv = [sys.executable, "-m", "pwdeploy", "local", "run", "-f", "job.yaml", "--compile-cache", ""]
    program = "import time; open('started', 'w').close(); time.sleep(2)"
    proc = subprocess.Popen(
        [*argv, "--", "python3", "-c", program], cwd=job_dir, env=env, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN), start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not (job_dir / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err


def test_local_run_decides_by_the_jobset_render_prints(job_dir: Path) -> None:
    """The same object `render` builds; a job image no push pinned yet is a placeholder there, not an error."""
    from pwdeploy import manifests
    from pwdeploy.config import load_job
    from pwdeploy.local.restarts import LOCAL_IMAGE, rendered_jobset

    job = load_job(job_dir / "job.yaml", {}, installed_jax=lambda: "0.10.2")
    assert rendered_jobset(job) == manifests.build(job)[0]
    unpushed = load_job(
        job_dir / "job.yaml",
        {"main.image": "", "image.repository": "registry.example/train"},
        installed_jax=lambda: "0.10.2",
    )
    head = rendered_jobset(unpushed)["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert [c["image"] for c in head["containers"]] == [LOCAL_IMAGE]
