"""`local run --evict-after / --evict-at-step / --evict-by`: the head pod deleted from outside, main stopped as the
kubelet stops a container (SIGTERM, then SIGKILL after the rendered head pod's grace period), in the PID namespace
the rendered head pod gives it (PID 1 of its own without shareProcessNamespace), and the failure evaluator deciding
what follows: Kueue's requeue, a new head pod, a restart, or the end. Real processes; no jax in the job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pwdeploy.cli import cli
from pwdeploy.cli.local import EVICTED_BY
from pwdeploy.local.eviction import CAUSES, Eviction, sigterm_reaches
from pwdeploy.local.runner import run_child
from pwdeploy.local.unshare import available
from tests.conftest import REPO
from tests.pid_namespace import Launched, why_not

WHY_NOT = available(2**20)
needs_private = pytest.mark.skipif(WHY_NOT is not None, reason=f"no PID namespace for the job here: {WHY_NOT}")

# Each run appends {pid, attempt} to runs.jsonl; the first runs steps (runtime.step_done after each) until it is
# stopped, a later one (after a requeue, a new pod or a restart) ends at once. No SIGTERM handler: CPython has none.
HANDLERLESS = """
import json, os, sys, time
from pwdeploy import runtime
earlier = os.path.exists("runs.jsonl")
with open("runs.jsonl", "a") as runs:
    runs.write(json.dumps({"pid": os.getpid(), "attempt": runtime.restart_attempt()}) + "\\n")
if earlier:
    sys.exit(0)
for step in range(1, 10_000):
    time.sleep(0.05)
    runtime.step_done(step)
"""
# A training loop as pwdeploy.runtime.stop_on_sigterm makes it: it resumes from ckpt.txt, and on SIGTERM saves its
# step there at the next step boundary and exits 143. A run that resumed ends after a few more steps.
SAVES = """
import json, os, time
from pwdeploy import runtime
stop = runtime.stop_on_sigterm()
start = int(open("ckpt.txt").read()) if os.path.exists("ckpt.txt") else 0
with open("runs.jsonl", "a") as runs:
    runs.write(json.dumps({"pid": os.getpid(), "start": start}) + "\\n")
for step in range(start + 1, start + (3 if start else 10_000)):
    time.sleep(0.05)
    if stop.requested:
        with open("ckpt.txt", "w") as ckpt:
            ckpt.write(str(step))
        stop.exit()
    runtime.step_done(step)
"""
EXITS_1 = "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda s, f: sys.exit(1))\ntime.sleep(60)\n"


@pytest.fixture
def job_dir(tmp_path: Path) -> Path:
    for name, text in (("handlerless.py", HANDLERLESS), ("saves.py", SAVES), ("exits_1.py", EXITS_1)):
        (tmp_path / name).write_text(text, encoding="utf-8")
    (tmp_path / "job.yaml").write_text(
        textwrap.dedent(
            """\
            name: evict-test
            pathways_version: 0.10.2
            tpu: {type: v5p-8}
            main: {image: "registry.example/none:0", command: "python3 handlerless.py"}
            storage: {scratch: gs://bkt/s}
            scheduling: {max_restarts: 1, termination_grace_seconds: 1}
            """
        ),
        encoding="utf-8",
    )
    return tmp_path


def local_run(job_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return subprocess.run(
        [sys.executable, "-m", "pwdeploy", "local", "run", "-f", "job.yaml", "--compile-cache", "", "--no-check",
         "--summary-json", "summary.json", *args],
        cwd=job_dir, env=env, capture_output=True, text=True, timeout=90,
    )  # fmt: skip


def runs(job_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (job_dir / "runs.jsonl").read_text(encoding="utf-8").splitlines()]


def summary(job_dir: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((job_dir / "summary.json").read_text(encoding="utf-8"))
    return loaded


OLD_RENDER = "--no-share-process-namespace"  # main PID 1 of its container, as JobSets rendered before


@needs_private
def test_an_old_render_makes_main_pid_1_and_an_eviction_ends_in_137_which_fails_the_job(job_dir: Path) -> None:
    done = local_run(job_dir, OLD_RENDER, "--evict-at-step", "3")
    assert done.returncode == 137, done.stderr
    assert [run["pid"] for run in runs(job_dir)] == [1], "main is PID 1 of its namespace"
    assert "pwdeploy.runtime: step 3 reached PWDEPLOY_EVICT_AT_STEP=3: local run evicts the job" in done.stderr
    assert "has no SIGTERM handler: the kernel drops the SIGTERM, and main runs on until the SIGKILL in 1 s" in (
        done.stderr
    )
    assert "attempt 0 killed with SIGKILL at the end of the grace period (exit status 137) after the eviction" in (
        done.stderr
    )
    assert "rule user_program_failed (FailJobSet)" in done.stderr and "as its suspended Job's pod was deleted" in (
        done.stderr
    )
    assert "the eviction failed the job: main, PID 1 of its container without a SIGTERM handler" in done.stderr


@needs_private
def test_the_rendered_head_pod_lets_sigterm_end_main_143_and_kueue_requeues_it_without_a_restart(
    job_dir: Path,
) -> None:
    done = local_run(job_dir, "--evict-at-step", "3")
    assert done.returncode == 0, done.stderr
    first, again = runs(job_dir)
    assert first["pid"] != 1, "main is an ordinary process of the namespace, as beside the pod's pause container"
    assert (first["attempt"], again["attempt"]) == (0, 0), "a requeue is not a restart"
    assert "attempt 0 killed by SIGTERM (exit status 143) after the eviction" in done.stderr
    assert "not counted, its Job is suspended" in done.stderr
    assert "requeued: Kueue admits the JobSet again, and attempt 1 starts from the top" in done.stderr
    assert (summary(job_dir)["requeues"], summary(job_dir)["restarts"]) == (1, 0)


@needs_private
def test_a_head_pod_deleted_by_hand_restarts_the_jobset_and_the_restart_is_counted(job_dir: Path) -> None:
    done = local_run(job_dir, "--evict-after", "0.5", "--evict-by", "delete")
    assert done.returncode == 0, done.stderr
    assert [run["attempt"] for run in runs(job_dir)] == [0, 1]
    assert "rule retry_exit_code (RestartJobSet, restart 1 of 1)" in done.stderr
    assert (summary(job_dir)["restarts"], summary(job_dir)["requeues"]) == (1, 0)


@needs_private
def test_an_eviction_with_disruption_target_has_the_head_job_replace_its_pod(job_dir: Path) -> None:
    done = local_run(job_dir, OLD_RENDER, "--evict-after", "0.5", "--evict-by", "disruption")
    assert done.returncode == 0, done.stderr  # ignored whatever main exits with: 137 here, as PID 1
    assert "podFailurePolicy rule 1 (Ignore on DisruptionTarget): not counted, the pod is replaced" in done.stderr
    assert "the head Job replaces its pod: attempt 1 starts from the top" in done.stderr
    assert [run["attempt"] for run in runs(job_dir)] == [0, 0]
    assert summary(job_dir)["replaced"] == 1


@needs_private
@pytest.mark.parametrize("render", [(), (OLD_RENDER,)], ids=["shared-namespace", "main-pid-1"])
def test_a_program_that_saves_on_sigterm_is_requeued_and_resumes_from_its_last_step(
    job_dir: Path, render: tuple[str, ...]
) -> None:
    """runtime.stop_on_sigterm: the handler makes the SIGTERM reach main even as PID 1 (pid_namespaces(7)); the
    program saves at its next step boundary and exits 143 within the grace period, so Kueue requeues the job."""
    done = local_run(job_dir, *render, "--termination-grace-seconds", "20", "--evict-at-step", "4", "--", "python3",
                     "saves.py")  # fmt: skip
    assert done.returncode == 0, done.stderr
    first, again = runs(job_dir)
    saved = int((job_dir / "ckpt.txt").read_text())
    assert first["start"] == 0 and again["start"] == saved >= 4
    assert "SIGTERM: the job is being stopped; saving at the next step boundary, then exiting 143" in done.stderr
    assert "attempt 0 exited with status 143 after the eviction" in done.stderr and "requeued" in done.stderr


@needs_private
def test_a_sigterm_handler_that_exits_1_fails_the_job_and_says_so(job_dir: Path) -> None:
    done = local_run(job_dir, "--evict-after", "0.5", "--", "python3", "exits_1.py")
    assert done.returncode == 1, done.stderr
    assert "the eviction failed the job: main exited 1 on SIGTERM, which fails the JobSet" in done.stderr


def test_an_eviction_that_never_came_is_said(job_dir: Path) -> None:
    done = local_run(job_dir, "--evict-after", "30", "--", "python3", "-c", "pass")
    assert done.returncode == 0, done.stderr
    assert "--evict-after 30 --evict-by kueue never fired: attempt 0 exited with status 0 before 30 s" in done.stderr


@needs_private
def test_fail_at_step_still_kills_a_main_that_is_pid_1(job_dir: Path) -> None:
    """The kernel shields PID 1 from a SIGKILL sent from inside its namespace: runtime.step_done ends it as 137."""
    done = local_run(job_dir, OLD_RENDER, "--fail-at-step", "2")
    assert "at --fail-at-step 2 (a lost slice); rule slice_lost (RestartJobSet, restart 1 of 1)" in done.stderr
    assert done.returncode == 0, done.stderr


# The kernel's rule played where the job has no PID namespace of its own: a PID 1 sees SIGTERM only with a handler.
# Each program answers every line on stdin with "alive": an answer after the SIGTERM proves it was dropped.
WAITS = "import sys\nprint('up', flush=True)\nfor _ in sys.stdin:\n    print('alive', flush=True)\n"
HANDLES = "import signal, sys\nsignal.signal(signal.SIGTERM, lambda s, f: sys.exit(143))\n" + WAITS


@pytest.mark.parametrize(("program", "reaches"), [(WAITS, False), (HANDLES, True)], ids=["no-handler", "handler"])
def test_the_rule_played_without_namespaces_agrees_with_the_kernel(program: str, reaches: bool) -> None:
    with subprocess.Popen([sys.executable, "-c", program], stdin=subprocess.PIPE, stdout=subprocess.PIPE) as process:
        try:
            assert process.stdout is not None and process.stdout.readline().strip() == b"up"
            assert sigterm_reaches(process.pid) is reaches
        finally:
            process.kill()
    if why_not() is None:  # the kernel itself, on the same program as PID 1 of a real namespace
        main = Launched.as_init([sys.executable, "-c", program], stdin=True)
        try:
            assert main.line() == "up"
            os.kill(main.pid, signal.SIGTERM)
            main.send("after the SIGTERM\n")
            answered = main.line()
        finally:
            main.stop()
        assert (answered != "alive") is reaches


SLEEPS = "import time\ntime.sleep(30)\n"
SLEEPS_HANDLED = "import signal, sys\nsignal.signal(signal.SIGTERM, lambda s, f: sys.exit(143))\n" + SLEEPS


@pytest.mark.parametrize(("program", "status"), [(SLEEPS, -signal.SIGKILL), (SLEEPS_HANDLED, 143)])
def test_without_namespaces_a_pid_1_main_is_stopped_as_the_kernel_would(
    tmp_path: Path, program: str, status: int
) -> None:
    eviction = Eviction(CAUSES["kueue"], grace=1.0, main_is_pid_1=True, after=0.3, said="--evict-after 0.3")
    ended = run_child([sys.executable, "-c", program], cwd=tmp_path, env=dict(os.environ), eviction=eviction)
    assert ended.returncode == status
    assert ended.evicted is not None and ended.evicted.sigterm_seen is (status == 143)
    assert ended.evicted.killed is (status != 143)


def test_the_flags_name_the_causes_and_allow_one_eviction() -> None:
    assert sorted(CAUSES) == sorted(EVICTED_BY)
    result = CliRunner().invoke(cli, ["local", "run", "--evict-at-step", "3", "--evict-after", "1", "--", "true"])
    assert result.exit_code == 2 and "give one of --evict-at-step and --evict-after" in result.output


def test_evict_by_without_an_eviction_is_refused_before_the_job_runs(job_dir: Path) -> None:
    """--evict-by alone asks for no eviction: refused by name, rather than a run that evicts nothing and says so."""
    done = local_run(job_dir, "--evict-by", "delete")
    assert done.returncode == 2, done.stderr
    assert "--evict-by: 'delete' says what deletes the head pod" in done.stderr
    assert "hint: give --evict-at-step or --evict-after too" in done.stderr
    assert "Traceback" not in done.stderr and not (job_dir / "runs.jsonl").exists()


def test_the_api_refuses_evict_by_without_an_eviction(job_dir: Path) -> None:
    from pwdeploy import api

    job = api.load(job_dir / "job.yaml")
    with pytest.raises(api.ArgumentError, match="no eviction is asked for") as raised:
        api.run_local(job, options=api.LocalRunOptions(evict_by="disruption", check_program=False), cwd=job_dir)
    assert raised.value.field == "evict_by" and not (job_dir / "runs.jsonl").exists()
