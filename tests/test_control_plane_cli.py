"""pwdeploy as a user runs it (the installed command, in a subprocess) against the real control plane, with the
admin's kubeconfig and the namespace-scoped user's; kubectl reads what it wrote."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.control_plane import ControlPlane, NodePool, TpuPool

pytestmark = [pytest.mark.control_plane, pytest.mark.slow, pytest.mark.timeout(300)]

PWDEPLOY = Path(sys.executable).with_name("pwdeploy")
CPU = NodePool("cpu-np", nodes=1, cpu="64", memory="256Gi")
TPU = NodePool("tpu-v5p", nodes=1, tpu=TpuPool("tpu-v5p-slice", "2x2x1", 4))


@pytest.fixture(scope="module")
def pools(control_plane: ControlPlane) -> Iterator[None]:
    with control_plane.node_pools(CPU, TPU):
        yield


def pwdeploy(
    plane: ControlPlane, *args: str, user: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PWDEPLOY), *args], env=plane.env(user=user), capture_output=True, text=True, timeout=timeout, check=False
    )


def job_flags(name: str, namespace: str, *extra: str) -> list[str]:
    return [
        "--name", name, "--namespace", namespace, "--tpu-type", "v5p-8", "--num-slices", "1",
        "--image", "python:3.11.9-slim", "--command", "python3 -c 'print(1)'",
        "--gcs-scratch", "gs://pwdeploy-e2e/scratch", *extra,
    ]  # fmt: skip


def wait_for(get: Callable[[], Any], holds: Callable[[Any], bool], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    value = get()
    while not holds(value):
        if time.monotonic() > deadline:
            raise AssertionError(f"not after {timeout} s: {str(value)[:1500]}")
        time.sleep(0.5)
        value = get()
    return value


def status(plane: ControlPlane, name: str, namespace: str) -> dict[str, Any]:
    answer = pwdeploy(plane, "status", name, "-n", namespace, "-o", "json")
    assert answer.returncode == 0, answer.stderr
    parsed: dict[str, Any] = json.loads(answer.stdout)
    return parsed


def head_pod(plane: ControlPlane, name: str, namespace: str) -> dict[str, Any]:
    pods = plane.pods(
        namespace, f"jobset.sigs.k8s.io/jobset-name%3D{name},jobset.sigs.k8s.io/replicatedjob-name%3Dpathways-head"
    )
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") == "Running"]
    assert live, [p["metadata"]["name"] for p in pods]
    return live[0]


def test_a_job_through_its_life_as_the_namespace_scoped_user(control_plane: ControlPlane, pools: None) -> None:
    plane, ns = control_plane, control_plane.user_namespace
    name = f"cli-{secrets.token_hex(3)}"
    flags = job_flags(name, ns)

    dry = pwdeploy(plane, "submit", *flags, "--skip-preflight", "--dry-run=server")
    assert dry.returncode == 0, dry.stderr
    assert plane.kubectl("get", "jobsets", "-n", ns, "-o", "name").stdout.strip() == ""  # nothing persisted

    created = pwdeploy(plane, "submit", *flags, "--skip-preflight")
    assert created.returncode == 0, created.stderr
    jobset = json.loads(plane.kubectl("get", "jobset", name, "-n", ns, "-o", "json").stdout)
    assert jobset["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "pwdeploy"
    managers = {m["manager"] for m in jobset["metadata"]["managedFields"]}
    assert "pwdeploy" in managers

    again = pwdeploy(plane, "submit", *flags, "--skip-preflight")
    assert again.returncode == 0, again.stderr
    assert "unchanged" in again.stdout + again.stderr
    assert (
        json.loads(plane.kubectl("get", "jobset", name, "-n", ns, "-o", "json").stdout)["metadata"]["resourceVersion"]
        == jobset["metadata"]["resourceVersion"]
    )

    changed = pwdeploy(plane, "submit", *job_flags(name, ns, "--env", "X=1"), "--skip-preflight")
    assert changed.returncode != 0
    assert "--replace" in changed.stderr

    running = wait_for(
        lambda: status(plane, name, ns), lambda s: all(g["running"] == g["expected"] for g in s["groups"])
    )
    assert running["state"]["phase"] == "Running", running["state"]
    listed = json.loads(pwdeploy(plane, "list", "-n", ns, "-o", "json").stdout)
    assert [(j["name"], j["state"], j["slices"]) for j in listed["jobs"]] == [(name, "Running", "1/1")]

    head = head_pod(plane, name, ns)["metadata"]["name"]
    plane.write_pod_log(ns, head, ["training step 1", "training step 2"], container="main")
    logs = pwdeploy(plane, "logs", name, "-n", ns)
    assert logs.returncode == 0, logs.stderr
    assert "training step 2" in logs.stdout

    plane.exit_pod(ns, head, 0, container="main")
    done = wait_for(lambda: status(plane, name, ns), lambda s: s["state"]["phase"] in ("Completed", "Failed"))
    assert done["state"]["phase"] == "Completed", done["state"]

    deleted = pwdeploy(plane, "delete", name, "-n", ns, "--yes", "--wait")
    assert deleted.returncode == 0, deleted.stderr
    assert plane.kubectl("get", "jobsets,jobs,pods", "-n", ns, "-o", "name").stdout.strip() == ""
