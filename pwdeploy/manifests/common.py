"""Small builders shared by the head and worker pods: env entries, resources, volumes, names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Manifest = dict[str, Any]

HEAD = "pathways-head"
WORKER = "worker"
MAIN_CONTAINER = "main"
PROXY_CONTAINER = "pathways-proxy"
RM_CONTAINER = "pathways-rm"
WORKER_CONTAINER = "pathways-worker"
SIDECAR_CONTAINER = "colocated-python-sidecar"

PROXY_PORT = 29000
RM_PORT = 29001
WORKER_PORT = 29005
SIDECAR_PORT = 50051

SHM_VOLUME = "dshm"
SIDECAR_SHM_VOLUME = "sidecar-shm"
SIDECAR_SHM_DIR = "/tmp/pathways-sidecar-shm"

COORDINATOR_LABEL = "jobset.sigs.k8s.io/coordinator"
GENERATED_SUFFIX = 5  # the random suffix Kubernetes appends to pod names


def drop_none(**items: Any) -> Manifest:
    """A dict of the items that are set (kr8s' xdict): optional fields simply vanish."""
    return {key: value for key, value in items.items() if value is not None and value != [] and value != {}}


def env_value(name: str, value: str) -> Manifest:
    return {"name": name, "value": value}


def env_field(name: str, field_path: str) -> Manifest:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def env_label(name: str, label: str) -> Manifest:
    return env_field(name, f"metadata.labels['{label}']")


def env_annotation(name: str, annotation: str) -> Manifest:
    return env_field(name, f"metadata.annotations['{annotation}']")


def env_list(values: Mapping[str, str]) -> list[Manifest]:
    return [env_value(name, value) for name, value in values.items()]


def ports(*numbers: int) -> list[Manifest]:
    return [{"containerPort": number, "protocol": "TCP"} for number in numbers]


def limits(resources: Mapping[str, str | int | None]) -> Manifest:
    """Limits with equal requests, so the pod gets the Guaranteed QoS class it was sized for."""
    values = {key: str(value) for key, value in resources.items() if value is not None}
    return {"limits": values, "requests": dict(values)}


def memory_volume(name: str, size: str) -> Manifest:
    return {"name": name, "emptyDir": {"medium": "Memory", "sizeLimit": size}}


def mount(name: str, path: str) -> Manifest:
    return {"name": name, "mountPath": path}


def hardened(privileged: bool = False) -> Manifest:
    """The security context of a container that needs no privilege (or, by explicit opt-in, does)."""
    if privileged:
        return {"privileged": True}
    return {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
