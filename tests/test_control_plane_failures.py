"""The failure rules on the real Job and JobSet controllers: each staged failure ends as
pwdeploy.manifests.failure_policy predicts for the JobSet the API server holds (docs/restarts.md's rows).

A staged failure is what a kubelet would report (tests/control_plane/kwok.py): ``main`` ending with an exit code
(a signal N as 128 + N), or a pod evicted through the Eviction API (DisruptionTarget, then stopped: exit 143)."""

from __future__ import annotations

import json
import re
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest

from pwdeploy import identifiers as ids
from pwdeploy.manifests.failure_policy import Action, Decision, PodFailure, decide
from tests.control_plane import ControlPlane, NodePool, TpuPool
from tests.control_plane.commands import JOB_TESTS, PWDEPLOY, job_flags

pytestmark = JOB_TESTS

NS = "default"
HEAD, WORKER = ids.HEAD_JOB, ids.WORKER_JOB
DISRUPTED = ("DisruptionTarget",)
LOST_TAINT = "pwdeploy.test/lost=true"
CPU = NodePool("fail-cpu", nodes=2, cpu="64", memory="256Gi", labels={"cloud.google.com/gke-nodepool": "cpu-np"})
TPU = NodePool("fail-tpu", nodes=2, tpu=TpuPool("tpu-v5p-slice", "2x2x1", 4))


class Step(NamedTuple):
    replicated_job: str
    exit_code: int | None  # None: evicted
    restarts: int = 0  # > 0: the container exits with exit_code and is restarted this many times (OnFailure)
    node_lost: bool = False  # the pod's node lost: a NoExecute taint, so the taint manager deletes its pods


class Staged(NamedTuple):
    name: str
    steps: tuple[Step, ...]
    failures: tuple[PodFailure, ...]  # the same events, as the evaluator takes them


def main_exits(code: int) -> tuple[Step, PodFailure]:
    return Step(HEAD, code), PodFailure(HEAD, exit_code=code, container=ids.MAIN_CONTAINER)


def evicted(replicated_job: str) -> tuple[Step, PodFailure]:
    return Step(replicated_job, None), PodFailure(replicated_job, signal=signal.SIGTERM, conditions=DISRUPTED)


def node_lost(replicated_job: str) -> tuple[Step, PodFailure]:
    """The pod's node goes away as the node lifecycle controller sees it: a NoExecute taint the pod does not
    tolerate (a lost node gets node.kubernetes.io/unreachable, which pods tolerate for 300 s by default), so the
    taint manager deletes the pod with DisruptionTarget (reason DeletionByTaintManager), as a drain's eviction
    does, and the kubelet (KWOK) stops it."""
    return Step(replicated_job, None, node_lost=True), PodFailure(
        replicated_job, signal=signal.SIGTERM, conditions=DISRUPTED
    )


def worker_restarts(times: int, code: int = 1) -> tuple[Step, PodFailure]:
    """The worker container exits ``times`` times and the kubelet restarts it (restartPolicy OnFailure); the
    evaluator gets the last of them, with the ones before counted."""
    step = Step(WORKER, code, restarts=times)
    return step, PodFailure(WORKER, exit_code=code, container=ids.WORKER_CONTAINER, failed_before=times - 1)


def staged(name: str, *events: tuple[Step, PodFailure]) -> Staged:
    return Staged(name, tuple(e[0] for e in events), tuple(e[1] for e in events))


STAGED = [
    staged("program bug: main exits 1", main_exits(1)),
    staged("program killed by SIGKILL (137)", main_exits(128 + signal.SIGKILL)),
    staged("SIGTERM to main without a DisruptionTarget condition (143)", main_exits(128 + signal.SIGTERM)),
    staged("main exits with the retry code 75", main_exits(ids.RETRY_EXIT_CODE)),
    staged("the head pod evicted (DisruptionTarget)", evicted(HEAD)),
    staged("one worker pod evicted, retries left", evicted(WORKER)),
    staged("slice lost, then main exits 75", evicted(WORKER), main_exits(ids.RETRY_EXIT_CODE)),
    staged("a TPU node lost (its pods deleted by the taint manager)", node_lost(WORKER)),
    staged("a TPU node lost, then main exits 75", node_lost(WORKER), main_exits(ids.RETRY_EXIT_CODE)),
    staged("slice lost, then main exits 1", evicted(WORKER), main_exits(1)),
    staged("a worker Job exhausts its retries (backoffLimit)", worker_restarts(5)),
    staged("a worker Job exhausts its retries and main exits 1 at the same time", worker_restarts(5), main_exits(1)),
]


@pytest.fixture(scope="module")
def pools(control_plane: ControlPlane) -> Iterator[None]:
    with control_plane.node_pools(CPU, TPU):
        yield


def jobset_path(name: str) -> str:
    return f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets/{name}"


def live_pods(plane: ControlPlane, name: str, replicated_job: str) -> list[dict[str, Any]]:
    selector = f"jobset.sigs.k8s.io/jobset-name%3D{name},jobset.sigs.k8s.io/replicatedjob-name%3D{replicated_job}"
    return [
        p
        for p in plane.pods(NS, selector)
        if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") == "Running"
    ]


def until(what: str, holds: Any, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = holds()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout} s")
        time.sleep(0.3)


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return dict(c)
    return None


def child_jobs(plane: ControlPlane, name: str) -> list[dict[str, Any]]:
    query = f"?labelSelector=jobset.sigs.k8s.io/jobset-name%3D{name}"
    return list(plane.api.get(f"/apis/batch/v1/namespaces/{NS}/jobs{query}")["items"])


@pytest.mark.parametrize("scenario", STAGED, ids=[s.name for s in STAGED])
def test_the_real_controllers_decide_as_the_evaluator_predicts(
    control_plane: ControlPlane, pools: None, scenario: Staged
) -> None:
    plane = control_plane
    name = f"fp-{secrets.token_hex(3)}"
    submitted = subprocess.run(
        [str(PWDEPLOY), "submit", *job_flags(name, NS, "--max-restarts", "2"), "--skip-preflight"],
        env=plane.env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert submitted.returncode == 0, submitted.stderr
    lost: list[str] = []
    try:
        jobset = plane.api.get(jobset_path(name))
        predicted = decide(jobset, list(scenario.failures))
        until("every pod running", lambda: live_pods(plane, name, HEAD) and live_pods(plane, name, WORKER))
        first_head = live_pods(plane, name, HEAD)[0]["metadata"]["name"]
        for step in scenario.steps:
            pod = live_pods(plane, name, step.replicated_job)[0]
            if step.node_lost:
                lost.append(pod["spec"]["nodeName"])
                plane.kubectl("taint", "nodes", lost[-1], f"{LOST_TAINT}:NoExecute")
            elif step.exit_code is None:
                plane.evict(NS, pod["metadata"]["name"])
            elif step.restarts:
                container = ids.WORKER_CONTAINER
                for _ in range(step.restarts):
                    plane.restart_container(NS, pod["metadata"]["name"], container, step.exit_code)
            else:
                plane.exit_pod(NS, pod["metadata"]["name"], step.exit_code, container=ids.MAIN_CONTAINER)
        observed = observe(plane, name, predicted.action, first_head)
        assert observed == expected(predicted, name), (predicted.why, json.dumps(child_jobs_summary(plane, name)))
    finally:
        # gone before the next scenario: its pods hold the nodes' TPUs and host ports until then
        plane.kubectl("delete", "jobset", name, "-n", NS, "--wait=true", "--timeout=60s", check=False)
        for node in lost:  # the node comes back for the next scenario
            plane.kubectl("taint", "nodes", node, f"{LOST_TAINT}:NoExecute-", check=False)


def expected(predicted: Decision, name: str) -> dict[str, Any]:
    """What the JobSet shows for the evaluator's decision: its Failed condition's reason, or a restart event,
    naming the first failed Job (JobSet's ``messageWithFirstFailedJob``)."""
    matched = re.search(r"Job (\S+) failed with", predicted.why)  # the failed Job the deciding rule matched
    first = matched.group(1) if matched else None
    if predicted.action is Action.FAIL:
        reason = "FailJobSetFailurePolicyAction" if predicted.rule else "FailedJobs"
        if "ReachedMaxRestarts" in predicted.why:
            reason = "ReachedMaxRestarts"
        return {"action": "fail", "reason": reason, "first_failed_job": first, "restarts": 0}
    if predicted.action is Action.RESTART:
        return {
            "action": "restart",
            "reason": "RestartJobSetFailurePolicyAction",
            "first_failed_job": first,
            "restarts": 1,
        }
    return {"action": "nothing", "reason": None, "first_failed_job": None, "restarts": 0}


FIRST_FAILED = re.compile(r"\(first failed job: ([^)]+)\)")
EVENT_GRACE = 15  # seconds a restart's event may follow the restart in the JobSet's status


def observe(plane: ControlPlane, name: str, predicted: Action, first_head: str) -> dict[str, Any]:
    """What the controllers did: waits for the JobSet to fail or restart, or (where the evaluator says nothing
    fails) for a replaced pod to run again, and then a few seconds more in which nothing may happen."""

    restarted_at: list[float] = []  # when the status first showed a restart

    def acted() -> dict[str, Any] | None:
        jobset = plane.api.get(jobset_path(name))
        restarts = int((jobset.get("status") or {}).get("restarts") or 0)
        failed = condition(jobset, "Failed")
        if failed:
            first = FIRST_FAILED.search(str(failed.get("message")))
            return {
                "action": "fail",
                "reason": failed.get("reason"),
                "first_failed_job": first.group(1) if first else None,
                "restarts": restarts,
            }
        if restarts:
            events = plane.api.get(f"/api/v1/namespaces/{NS}/events?fieldSelector=involvedObject.name%3D{name}")
            said = [e for e in events["items"] if e.get("reason") == "RestartJobSetFailurePolicyAction"]
            if not restarted_at:
                restarted_at.append(time.monotonic())
            # The controller records its event after it writes the restart into the status (CI once read the
            # status between the two): the event gets a few seconds before its absence counts.
            if not said and time.monotonic() - restarted_at[0] < EVENT_GRACE:
                return None
            first = FIRST_FAILED.search(str(said[-1].get("message"))) if said else None
            reason = said[-1]["reason"] if said else None
            return {"action": "restart", "reason": reason, "first_failed_job": first.group(1) if first else None,
                    "restarts": restarts}  # fmt: skip
        heads = live_pods(plane, name, HEAD)
        # a pod the Job replaced: counted (status.failed), or ignored (a new head pod runs)
        replaced = any(child_failures(plane, name)) or bool(heads and heads[0]["metadata"]["name"] != first_head)
        if predicted is Action.NOTHING and replaced and live_pods(plane, name, HEAD) and live_pods(plane, name, WORKER):
            return {"action": "nothing", "reason": None, "first_failed_job": None, "restarts": 0}
        return None

    result: dict[str, Any] = until("the JobSet to act", acted)
    if result["action"] == "nothing":
        time.sleep(5)
        result = until("the JobSet to settle", acted)
    return result


def child_failures(plane: ControlPlane, name: str) -> list[int]:
    return [int((job.get("status") or {}).get("failed") or 0) for job in child_jobs(plane, name)]


def child_jobs_summary(plane: ControlPlane, name: str) -> list[dict[str, Any]]:
    return [
        {"job": j["metadata"]["name"], "conditions": (j.get("status") or {}).get("conditions"),
         "failed": (j.get("status") or {}).get("failed")}
        for j in child_jobs(plane, name)
    ]  # fmt: skip
