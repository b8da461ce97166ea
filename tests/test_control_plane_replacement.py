"""The worker Job's ``podReplacementPolicy: Failed`` on the real Job controller: an evicted worker pod is replaced
once it has stopped, not while it is still terminating. A worker's first process is PID 1 of its container, which
a SIGTERM from outside does not end without a handler, so KWOK stops it as a kubelet does, at the end of the grace
period (tests/control_plane/kwok.py): GRACE_S here. The same JobSet without the field shows Kubernetes' default, a
replacement created beside the terminating pod (once the Job's 10 s pod-failure backoff has passed), which is what
the field is there to prevent (docs/manifests.md)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from pwdeploy import identifiers as ids
from tests.control_plane import ControlPlane, NodePool
from tests.control_plane.commands import HEAD_POOL, JOB_TESTS, V5P_2X2X1, job_flags, pwdeploy, wait_for

pytestmark = JOB_TESTS

NS = "default"
TPU = NodePool("replace-tpu", nodes=1, tpu=V5P_2X2X1)
POLL_S = 0.1
GRACE_S = 15  # seconds: longer than the Job controller's first pod-failure backoff (10 s)
WATCH_S = 45.0  # the replacement of a failed pod waits 10 s after it failed


@pytest.fixture(scope="module")
def pools(control_plane: ControlPlane) -> Iterator[None]:
    with control_plane.node_pools(HEAD_POOL, TPU):
        yield


def worker_pods(plane: ControlPlane, name: str) -> list[dict[str, Any]]:
    selector = f"jobset.sigs.k8s.io/jobset-name%3D{name},jobset.sigs.k8s.io/replicatedjob-name%3D{ids.WORKER_JOB}"
    return plane.pods(NS, selector)


def submitted(plane: ControlPlane, *, policy: bool) -> str:
    """A rendered one-slice job applied as rendered, or (``policy`` False) without podReplacementPolicy."""
    name = f"rp-{secrets.token_hex(3)}"
    rendered = pwdeploy(plane, "render", *job_flags(name, NS, "--termination-grace-seconds", str(GRACE_S)), user=False)
    assert rendered.returncode == 0, rendered.stderr
    jobset = yaml.safe_load(rendered.stdout)
    (worker,) = [r for r in jobset["spec"]["replicatedJobs"] if r["name"] == ids.WORKER_JOB]
    assert worker["template"]["spec"]["podReplacementPolicy"] == "Failed"
    if not policy:
        del worker["template"]["spec"]["podReplacementPolicy"]
    plane.kubectl("apply", "-f", "-", input_text=yaml.safe_dump(jobset))
    return name


def replaced_early(plane: ControlPlane, name: str) -> bool:
    """Evict the running worker pod; whether a replacement existed while the evicted pod had not yet stopped."""
    running = wait_for(
        lambda: worker_pods(plane, name), lambda pods: any(p["status"].get("phase") == "Running" for p in pods)
    )
    (old,) = [p for p in running if p["status"].get("phase") == "Running"]
    uid = old["metadata"]["uid"]
    plane.evict(NS, old["metadata"]["name"])
    early = False
    deadline = time.monotonic() + WATCH_S
    while time.monotonic() < deadline:
        pods = worker_pods(plane, name)
        evicted = [p for p in pods if p["metadata"]["uid"] == uid]
        others = [p for p in pods if p["metadata"]["uid"] != uid]
        if others and evicted and evicted[0]["status"].get("phase") not in ("Failed", "Succeeded"):
            early = True
        if others and not evicted:
            break
        time.sleep(POLL_S)
    assert any(p["metadata"]["uid"] != uid for p in worker_pods(plane, name)), "no replacement came"
    return early


def test_a_worker_pod_is_replaced_once_it_has_stopped(control_plane: ControlPlane, pools: None) -> None:
    name = submitted(control_plane, policy=True)
    assert replaced_early(control_plane, name) is False


def test_without_the_field_the_job_controller_replaces_a_terminating_pod_at_once(
    control_plane: ControlPlane, pools: None
) -> None:
    name = submitted(control_plane, policy=False)
    assert replaced_early(control_plane, name) is True
