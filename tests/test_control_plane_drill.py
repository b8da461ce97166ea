"""`pwdeploy drill` on the real controllers (issue 34's proof): the fault goes through the real Eviction API, the
real Job and JobSet controllers decide, and the drill's report must say what they did, beside the prediction of
the evaluator `local run` uses. The head's main "reports steps" through the pod log KWOK serves, as the example
prints them; the timeline (`logs --all -f`) follows the same run. `--kill-worker` signals a process through the
exec subresource, which KWOK does not run in a container: its test stays on the stand-in (tests/test_drill*)."""

from __future__ import annotations

import json
import secrets
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from pwdeploy import identifiers as ids
from tests.control_plane import ControlPlane, NodePool
from tests.control_plane.commands import (
    HEAD_POOL,
    JOB_TESTS,
    PWDEPLOY,
    V5P_2X2X1,
    job_flags,
    pwdeploy,
    status,
    wait_for,
)

pytestmark = JOB_TESTS

NS = "default"
CPU = HEAD_POOL
TPU = NodePool("tpu-v5p", nodes=1, tpu=V5P_2X2X1)


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


def is_running(state: dict[str, Any]) -> bool:
    """Running as a drill requires: every pod runs and the JobSet controller counts every Job ready."""
    return state["state"]["phase"] == "Running" and all(g["running"] == g["expected"] for g in state["groups"])


def started(plane: ControlPlane, name: str) -> str:
    """A running two-restart job whose main has reported steps 1 to 5; its head pod."""
    answer = pwdeploy(plane, "submit", *job_flags(name, NS, "--max-restarts", "2"), "--skip-preflight", user=False)
    assert answer.returncode == 0, answer.stderr
    wait_for(lambda: status(plane, name, NS, user=False), is_running)
    head = wait_for(lambda: running_head(plane, name, 0), bool)
    plane.write_pod_log(NS, head, [f"step {n}" for n in range(1, 6)], container=ids.MAIN_CONTAINER)
    WORKERS_BEFORE[name] = worker_uids(plane, name)
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


def test_a_lost_slice_the_program_dies_of_restarts_the_jobset_as_predicted(
    control_plane: ControlPlane, pools: None
) -> None:
    """The slice's worker pods are evicted; the program, as pwdeploy.runtime.retry_on_slice_loss makes it, exits
    with the retry code (the test plays it: KWOK runs no program), and the real JobSet controller restarts the job
    (rule retry_exit_code, the head's Job first): the outcome local run predicts. The timeline shows the old
    attempt's last step, the restart and the new attempt's steps, in that order."""
    plane = control_plane
    name = f"dl-{secrets.token_hex(3)}"
    head = started(plane, name)
    timeline = subprocess.Popen(
        [str(PWDEPLOY), "logs", name, "-n", NS, "--all", "-f", "-o", "json"],
        env=plane.env(user=False), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    said: list[str] = []

    def read() -> None:
        for line in timeline.stdout or ():
            said.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        run = drill(plane, name, "--lose-slice", "0")
        wait_for(lambda: worker_uids(plane, name) != WORKERS_BEFORE.get(name), bool, timeout=60)
        plane.exit_pod(NS, head, ids.RETRY_EXIT_CODE, container=ids.MAIN_CONTAINER)
        new_head = wait_for(lambda: running_head(plane, name, 1), bool, timeout=120)
        wait_for(  # main steps again once its slice is back, as Pathways' does
            lambda: status(plane, name, NS, user=False), lambda s: is_running(s) and s["state"]["restarts"] == 1
        )
        plane.write_pod_log(NS, new_head, ["step 4", "step 5", "step 6"], container=ids.MAIN_CONTAINER)
        got = report(run)
        wait_for(lambda: any('"step 6"' in line for line in said), bool, timeout=60)  # the timeline polls logs
    finally:
        timeline.terminate()
        timeline.communicate(timeout=30)
    reader.join(timeout=10)

    real = jobset(plane, name)
    assert real["status"].get("restarts") == 1, real["status"]  # what the JobSet controller did
    assert got["fault"]["kind"] == "lose_slice" and got["fault"]["pods"], got
    assert got["predicted"]["outcome"] == "jobset_restart", got["predicted"]
    assert got["rule_fired"] == "jobset_restart", got
    assert got["restarts_total"] == 1 and got["restarts_consumed"] == 1, got
    assert got["first_failed_job"] == f"{name}-{ids.HEAD_JOB}-0", got  # the program died first
    assert got["stopped"] == "recovered", got
    assert not [f for f in got["findings"] if f.startswith("local run predicts")], got["findings"]
    assert got["last_step_before"] == 5 and got["first_step_after"] == 4 and got["steps_lost"] == 2, got
    assert got["seconds_to_detection"] <= got["seconds_to_all_running"] <= got["seconds_to_first_step"], got

    old_step = next(i for i, s in enumerate(said) if "step 5" in s)
    restart = next(i for i, s in enumerate(said) if "restart" in s.lower() and i > old_step)
    new_step = next(i for i, s in enumerate(said) if "step 6" in s)
    assert old_step < restart < new_step, said


def test_a_lost_slice_the_program_ignores_is_a_finding(control_plane: ControlPlane, pools: None) -> None:
    """Without the program's exit the Job controller only replaces the evicted pod (one failure of backoffLimit 4,
    podFailurePolicy has no worker rule): no restart. The drill says what the controllers did and, as a finding,
    that local run predicts a restart (the program should exit with the retry code)."""
    plane = control_plane
    name = f"dn-{secrets.token_hex(3)}"
    answer = pwdeploy(plane, "submit", *job_flags(name, NS, "--max-restarts", "2"), "--skip-preflight", user=False)
    assert answer.returncode == 0, answer.stderr
    wait_for(lambda: status(plane, name, NS, user=False), is_running)
    got = report(drill(plane, name, "--lose-slice", "0"))
    real = jobset(plane, name)
    assert real["status"].get("restarts", 0) == 0, real["status"]
    assert got["rule_fired"] == "pod_replaced" and got["restarts_consumed"] == 0, got
    assert got["predicted"]["outcome"] == "jobset_restart", got
    assert any(f.startswith("local run predicts jobset_restart") for f in got["findings"]), got["findings"]


WORKERS_BEFORE: dict[str, set[str]] = {}


def worker_uids(plane: ControlPlane, name: str) -> set[str]:
    selector = f"jobset.sigs.k8s.io/jobset-name%3D{name},jobset.sigs.k8s.io/replicatedjob-name%3D{ids.WORKER_JOB}"
    return {p["metadata"]["uid"] for p in plane.pods(NS, selector) if not p["metadata"].get("deletionTimestamp")}


def test_an_evicted_head_is_replaced_without_a_restart_as_predicted(control_plane: ControlPlane, pools: None) -> None:
    """The head's podFailurePolicy ignores a pod with DisruptionTarget: the Job replaces it, restarts stay 0; the
    new head's main reports steps again (written by the test: KWOK runs no program)."""
    plane = control_plane
    name = f"dh-{secrets.token_hex(3)}"
    head = started(plane, name)
    run = drill(plane, name, "--evict-head")
    new_head = wait_for(lambda: (h := running_head(plane, name, 0)) != head and h, bool, timeout=90)
    plane.write_pod_log(NS, new_head, ["step 4", "step 5"], container=ids.MAIN_CONTAINER)
    got = report(run)
    real = jobset(plane, name)
    assert real["status"].get("restarts", 0) == 0, real["status"]
    assert got["predicted"]["outcome"] == "pod_replaced", got["predicted"]
    assert got["rule_fired"] == "pod_replaced", got
    assert got["restarts_consumed"] == 0 and got["restarts_total"] == 0, got
    assert head in got["fault"]["pods"], got
    assert got["stopped"] == "recovered" and got["first_step_after"] == 4, got
    assert not [f for f in got["findings"] if f.startswith("local run predicts")], got["findings"]


def test_a_deleted_head_restarts_the_jobset_as_predicted(control_plane: ControlPlane, pools: None) -> None:
    """--delete-head: a plain DELETE, no DisruptionTarget. The head pod shares its process namespace, so the
    kubelet's SIGTERM ends main (KWOK plays it: 143); the head Job counts the failure, fails on its backoffLimit of
    0, and the JobSet restarts (retry_exit_code), as local run --evict-by delete predicts."""
    plane = control_plane
    name = f"dd-{secrets.token_hex(3)}"
    head = started(plane, name)
    run = drill(plane, name, "--delete-head")
    new_head = wait_for(lambda: running_head(plane, name, 1), bool, timeout=120)
    plane.write_pod_log(NS, new_head, ["step 1", "step 2"], container=ids.MAIN_CONTAINER)
    got = report(run)
    assert got["predicted"]["outcome"] == "jobset_restart" and "retry_exit_code" in got["predicted"]["why"], got
    assert "main killed by SIGTERM (exit code 143)" in got["predicted"]["why"], got
    assert got["rule_fired"] == "jobset_restart" and got["restarts_consumed"] == 1, got
    assert head in got["fault"]["pods"] and got["stopped"] == "recovered", got
    assert not [f for f in got["findings"] if f.startswith("local run predicts")], got["findings"]


def test_deleting_a_head_whose_main_is_pid_1_is_predicted_fatal_and_refused(
    control_plane: ControlPlane, pools: None
) -> None:
    """A JobSet rendered without the shared process namespace: main, PID 1 without a SIGTERM handler, would run
    until the SIGKILL (137), which its FailJob rule fails the JobSet on; the drill says so and injects nothing
    without --allow-fatal."""
    plane = control_plane
    name = f"dp-{secrets.token_hex(3)}"
    answer = pwdeploy(plane, "submit", *job_flags(name, NS, "--no-share-process-namespace"), "--skip-preflight",
                      user=False)  # fmt: skip
    assert answer.returncode == 0, answer.stderr
    wait_for(lambda: status(plane, name, NS, user=False), is_running)
    head = running_head(plane, name, 0)
    out, err = drill(plane, name, "--delete-head").communicate(timeout=120)
    assert "would end job" in err and "main killed by SIGKILL (exit code 137)" in err, err
    assert "user_program_failed" in err and "--allow-fatal" in err, err
    assert out == "" and running_head(plane, name, 0) == head  # nothing was injected


def test_a_disruption_budget_on_the_head_is_named_and_the_head_stays(control_plane: ControlPlane, pools: None) -> None:
    """The real eviction registry answers 429 with a DisruptionBudget cause while a budget allows no disruption;
    kubectl drain retries such a refusal, the drill says it is the budget and injects nothing (it once got 4 tries
    in 4 s and the hint that the control plane was overloaded)."""
    plane = control_plane
    name = f"db-{secrets.token_hex(3)}"
    head = started(plane, name)
    selector = {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": ids.HEAD_JOB}
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": f"{name}-head", "namespace": NS},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": selector}},  # maxUnavailable needs a scale subresource
    }
    plane.kubectl("apply", "-f", "-", input_text=json.dumps(budget))
    try:
        wait_for(  # the disruption controller has counted the head
            lambda: json.loads(plane.kubectl("get", "pdb", f"{name}-head", "-n", NS, "-o", "json").stdout),
            lambda pdb: pdb.get("status", {}).get("observedGeneration") == pdb["metadata"]["generation"],
        )
        out, err = drill(plane, name, "--evict-head").communicate(timeout=120)
        assert "a PodDisruptionBudget refused to create pods/eviction" in err, err
        assert f"The disruption budget {name}-head needs" in err and "overloaded" not in err, err
        assert out == "" and running_head(plane, name, 0) == head  # nothing was injected
    finally:
        plane.kubectl("delete", "pdb", f"{name}-head", "-n", NS, "--ignore-not-found", check=False)
