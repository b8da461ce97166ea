"""The objects tests give the API stub (and the code under test): a small job config, the JobSet pwdeploy renders
for it, a Node as the API returns one."""

from __future__ import annotations

from typing import Any

from pwdeploy import manifests
from pwdeploy.config import JobConfig, load_job


def small_job(
    overrides: dict[str, Any] | None = None, *, name: str = "dp-example", namespace: str | None = "default"
) -> JobConfig:
    """A small job config (``overrides``: dotted config paths such as ``tpu.type``) with the Pathways 0.10.2
    images, whatever jax is installed."""
    values = {
        "name": name,
        "namespace": namespace,
        "tpu.type": "v5p-8",
        "tpu.slices": 2,
        "main.image": "python:3.11.9-slim",
        "main.command": "python3 train.py",
        "storage.scratch": "gs://stub-bucket/scratch",
        **(overrides or {}),
    }
    return load_job(None, {k: v for k, v in values.items() if v is not None}, installed_jax=lambda: "0.10.2")


def rendered_jobset(
    name: str = "dp-example",
    namespace: str = "default",
    *,
    tpu_type: str = "v5p-8",
    slices: int = 2,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JobSet ``pwdeploy.manifests.build`` renders for ``small_job``, with ``status`` when given."""
    (obj,) = manifests.build(small_job({"tpu.type": tpu_type, "tpu.slices": slices}, name=name, namespace=namespace))
    if status:
        obj["status"] = status
    return obj


def node(
    name: str,
    labels: dict[str, str],
    allocatable: dict[str, str],
    *,
    ready: bool = True,
    cordoned: bool = False,
    kubelet: str | None = None,
) -> dict[str, Any]:
    """A Node as the API returns it: labels, allocatable resources, the Ready condition and, when given, the
    kubelet's version (status.nodeInfo.kubeletVersion)."""
    status: dict[str, Any] = {
        "allocatable": dict(allocatable),
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if kubelet is not None:
        status["nodeInfo"] = {"kubeletVersion": kubelet}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": status,
    }
