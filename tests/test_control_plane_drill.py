"""`pwdeploy drill` on the real controllers (issue 34's proof): the fault goes through the real Eviction API, the
real Job and JobSet controllers decide, and the drill's report must say what they did, beside the prediction of
the evaluator `local run` uses. The head's main "reports steps" through the pod log KWOK serves, as the example
prints them; the timeline (`logs --all -f`) follows the same run. `--kill-worker` signals a process through the
exec subresource, which KWOK does not run in a container: its test stays on the stand-in (tests/test_drill*)."""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from pwdeploy import identifiers as ids
from tests.control_plane import ControlPlane, NodePool, TpuPool
from tests.control_plane.commands import PWDEPLOY, job_flags, pwdeploy, status, wait_for

pytestmark = [
    pytest.mark.control_plane,
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.usefixtures("no_jobs_left"),
]

NS = "default"
CPU = NodePool("cpu-np", nodes=1, cpu="64", memory="256Gi")
TPU = NodePool("tpu-v5p", nodes=1, tpu=TpuPool("tpu-v5p-slice", "2x2x1", 4))


@pytest.fixture(scope="module")
def pools(control_plane: ControlPlane) -> Iterator[None]:
    with control_plane.node_pools(CPU, TPU):
        yield


def running_head(plane: ControlPlane, name: str, attempt: int) -> str | None:
    """The head pod of restart attempt ``attempt`` once it runs."""
    selector = f"jobset.sigs.k8s.io/jobset-name%3D{name},jobset.sigs.k8s.io/replicatedjob-name%3D{ids.HEAD_JOB}"
    for pod in plane.pods(NS, selector):
        labels = pod["metadata"].get("labels") or {}
        if (
            not pod["metadata"].get("deletionTimestamp")
            and pod["status"].get("phase") == "Running"
            and labels.get("jobset.sigs.k8s.io/restart-attempt") == str(attempt)
        ):
            return str(pod["metadata"]["name"])
    return None


def started(plane: ControlPlane, name: str) -> str:
    """A running two-restart job whose main has reported steps 1 to 5; its head pod."""
    answer = pwdeploy(plane, "submit", *job_flags(name, NS, "--max-restarts", "2"), "--skip-preflight", user=False)
    assert answer.returncode == 0, answer.stderr
    wait_for(
        lambda: status(plane, name, NS, user=False), lambda s: all(g["running"] == g["expected"] for g in s["groups"])
    )
    head = wait_for(lambda: running_head(plane, name, 0), bool)
    plane.write_pod_log(NS, head, [f"step {n}" for n in range(1, 6)], container=ids.MAIN_CONTAINER)
    return str(head)


def drill(plane: ControlPlane, name: str, *fault: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(PWDEPLOY), "drill", name, "-n", NS, *fault, "-y", "-o", "json", "--timeout", "150"],
        env=plane.env(user=False), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def report(run: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = run.communicate(timeout=200)
    assert run.returncode == 0, err
    parsed: dict[str, Any] = json.loads(out)
    return parsed


def jobset(plane: ControlPlane, name: str) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(plane.kubectl("get", "jobset", name, "-n", NS, "-o", "json").stdout)
    return parsed


def test_a_lost_slice_restarts_the_jobset_as_predicted_and_the_report_says_what_the_controllers_did(
    control_plane: ControlPlane, pools: None
) -> None:
    plane = control_plane
    name = f"dl-{secrets.token_hex(3)}"
    started(plane, name)
    timeline = subprocess.Popen(
        [str(PWDEPLOY), "logs", name, "-n", NS, "--all", "-f", "-o", "json"],
        env=plane.env(user=False), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        run = drill(plane, name, "--lose-slice", "0")
        new_head = wait_for(lambda: running_head(plane, name, 1), bool, timeout=120)
        plane.write_pod_log(NS, new_head, ["step 4", "step 5", "step 6"], container=ids.MAIN_CONTAINER)
        got = report(run)
    finally:
        timeline.terminate()
    lines = [json.loads(line) for line in timeline.communicate(timeout=30)[0].splitlines() if line.strip()]

    real = jobset(plane, name)
    assert real["status"].get("restarts") == 1, real["status"]  # what the JobSet controller did
    assert got["fault"]["kind"] == "lose_slice" and got["fault"]["pods"], got
    assert got["predicted"]["outcome"] == "jobset_restart", got["predicted"]
    assert got["rule_fired"] == "jobset_restart", got
    assert got["restarts_total"] == 1 and got["restarts_consumed"] == 1, got
    assert got["first_failed_job"] == f"{name}-{ids.WORKER_JOB}-0", got
    assert got["stopped"] == "recovered", got
    assert not [f for f in got["findings"] if f.startswith("local run predicts")], got["findings"]
    assert got["last_step_before"] == 5 and got["first_step_after"] == 4 and got["steps_lost"] == 2, got
    assert got["seconds_to_detection"] <= got["seconds_to_all_running"] <= got["seconds_to_first_step"], got

    said = [json.dumps(line) for line in lines]
    old_step = next(i for i, s in enumerate(said) if "step 5" in s)
    restart = next(i for i, s in enumerate(said) if "restart" in s.lower() and i > old_step)
    new_step = next(i for i, s in enumerate(said) if "step 6" in s)
    assert old_step < restart < new_step, said


def test_an_evicted_head_is_replaced_without_a_restart_as_predicted(control_plane: ControlPlane, pools: None) -> None:
    """The head's podFailurePolicy ignores a pod with DisruptionTarget: the Job replaces it, restarts stay 0."""
    plane = control_plane
    name = f"dh-{secrets.token_hex(3)}"
    head = started(plane, name)
    run = drill(plane, name, "--evict-head")
    got = report(run)
    real = jobset(plane, name)
    assert real["status"].get("restarts", 0) == 0, real["status"]
    assert got["predicted"]["outcome"] == "pod_replaced", got["predicted"]
    assert got["rule_fired"] == "pod_replaced", got
    assert got["restarts_consumed"] == 0 and got["restarts_total"] == 0, got
    assert head in got["fault"]["pods"], got
    assert not [f for f in got["findings"] if f.startswith("local run predicts")], got["findings"]
    assert running_head(plane, name, 0) not in (None, head)  # a new head pod of the same attempt runs
