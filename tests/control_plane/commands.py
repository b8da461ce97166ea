"""Running the installed ``pwdeploy`` against the control plane as a user does, and waiting on what it says."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.control_plane.cluster import ControlPlane, NodePool, TpuPool

PWDEPLOY = Path(sys.executable).with_name("pwdeploy")
# The marks of a module of tests that run jobs on the plane: the tier's marker, a bound on each test, and no JobSet
# pods before or after each (a job left behind holds the nodes' host ports: tests/conftest.py's no_jobs_left).
JOB_TESTS = [
    pytest.mark.control_plane,
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.usefixtures("no_jobs_left"),
]
HEAD_POOL = NodePool("cpu-np", nodes=1, cpu="64", memory="256Gi")  # the pool head.node_pool selects by default
V5P_2X2X1 = TpuPool("tpu-v5p-slice", "2x2x1", 4)  # the nodes of one v5p-8 slice: one VM of 4 chips
V5P_2X2X4 = TpuPool("tpu-v5p-slice", "2x2x4", 4)  # the nodes of one v5p-32 slice: four VMs of 4 chips
V5P_32_VMS = 4


def slice_pools(prefix: str, slices: int, tpu: TpuPool = V5P_2X2X4, vms: int = V5P_32_VMS) -> tuple[NodePool, ...]:
    """One TPU node pool per slice, of one node per VM, as GKE makes a multi-host slice's node pool (its VMs are
    an atomic unit, each a node labelled with the pool's name, accelerator and topology): ``PREFIX-0``, ... The
    workers' exclusive placement puts each slice on a pool of its own, the leader pod first, its followers on the
    nodes of the leader's pool."""
    return tuple(NodePool(f"{prefix}-{s}", nodes=vms, tpu=tpu) for s in range(slices))


def pwdeploy(
    plane: ControlPlane, *args: str, user: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``pwdeploy ARGS`` with the namespace-scoped user's kubeconfig (``user=False``: the admin's)."""
    return subprocess.run(
        [str(PWDEPLOY), *args], env=plane.env(user=user), capture_output=True, text=True, timeout=timeout, check=False
    )


def job_flags(name: str, namespace: str, *extra: str) -> list[str]:
    """A one-slice v5p-8 job whose head selects the node pool ``cpu-np`` (head.node_pool's default)."""
    return [
        "--name", name, "--namespace", namespace, "--tpu-type", "v5p-8", "--num-slices", "1",
        "--image", "python:3.11.9-slim", "--command", "python3 -c 'print(1)'",
        "--gcs-scratch", "gs://pwdeploy-e2e/scratch", *extra,
    ]  # fmt: skip


def wait_for(get: Callable[[], Any], holds: Callable[[Any], bool], timeout: float = 60, every: float = 0.5) -> Any:
    """``get()`` once it ``holds``, asked every ``every`` seconds; AssertionError with the last value after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    value = get()
    while not holds(value):
        if time.monotonic() > deadline:
            raise AssertionError(f"not after {timeout} s: {str(value)[:1500]}")
        time.sleep(every)
        value = get()
    return value


def status(plane: ControlPlane, name: str, namespace: str, user: bool = True) -> dict[str, Any]:
    answer = pwdeploy(plane, "status", name, "-n", namespace, "-o", "json", user=user)
    assert answer.returncode == 0, answer.stderr
    parsed: dict[str, Any] = json.loads(answer.stdout)
    return parsed


def diagnosis(plane: ControlPlane, name: str, namespace: str, user: bool = True) -> dict[str, Any]:
    """``pwdeploy diagnose NAME -o json`` (exit 0 without an error finding, 10 with one)."""
    answer = pwdeploy(plane, "diagnose", name, "-n", namespace, "-o", "json", user=user)
    assert answer.returncode in (0, 10), answer.stderr
    parsed: dict[str, Any] = json.loads(answer.stdout)
    return parsed


def kueue_queues(plane: ControlPlane, namespace: str, tpu_quota: int) -> None:
    """A ResourceFlavor, a ClusterQueue with ``tpu_quota`` chips (and room for the head) and a LocalQueue ``lq``."""
    plane.api.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "rf"}})
    quotas = [("cpu", "1000"), ("memory", "10Ti"), ("google.com/tpu", str(tpu_quota))]
    plane.api.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": [q[0] for q in quotas],
                        "flavors": [{"name": "rf", "resources": [{"name": n, "nominalQuota": v} for n, v in quotas]}],
                    }
                ],
            },
        }
    )
    plane.api.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": namespace},
            "spec": {"clusterQueue": "cq"},
        }
    )
