"""Small builders shared by the head and worker pods: env entries, resources, volumes, and the edits that
variant steps make to a built pod spec."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Manifest = dict[str, Any]

# Key order of the rendered pod specs and containers, however a variant step added the keys.
POD_KEYS = (
    "hostNetwork",
    "dnsPolicy",
    "restartPolicy",
    "nodeSelector",
    "tolerations",
    "serviceAccountName",
    "priorityClassName",
    "terminationGracePeriodSeconds",
    "shareProcessNamespace",
    "initContainers",
    "containers",
    "volumes",
)
CONTAINER_KEYS = (
    "name",
    "image",
    "imagePullPolicy",
    "command",
    "args",
    "env",
    "ports",
    "resources",
    "volumeMounts",
    "securityContext",
    "restartPolicy",
)


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


def memory_volume(name: str, size: str | None) -> Manifest:
    """A memory-backed emptyDir; without ``size`` it has no sizeLimit of its own (the memory limits of the
    containers that write it bound it)."""
    limit = {"sizeLimit": str(size)} if size is not None else {}  # a config Quantity: its text, a plain str
    return {"name": name, "emptyDir": {"medium": "Memory", **limit}}


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


def env_secret(name: str, secret: str, key: str) -> Manifest:
    """An env entry read from a Secret by the kubelet: the manifest names the Secret, never holds the value."""
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def with_env(env: list[Manifest], overrides: list[Manifest]) -> list[Manifest]:
    """``env`` with each override replacing the entry of the same name in place, new names appended."""
    by_name = {entry["name"]: entry for entry in overrides}
    kept = [by_name.pop(entry["name"], entry) for entry in env]
    return kept + list(by_name.values())


def ordered(obj: Manifest, keys: tuple[str, ...]) -> Manifest:
    """``obj`` with ``keys`` first, in that order (the rest after them, as they were)."""
    return {**{key: obj[key] for key in keys if key in obj}, **obj}


# -------------------------------------------------------------------------- edits of a built pod spec


def extend(obj: Manifest, key: str, values: list[Any]) -> Manifest:
    """A copy of ``obj`` whose list ``key`` has ``values`` appended (created when absent)."""
    return {**obj, key: [*obj.get(key, []), *values]}


def edit_container(pod: Manifest, name: str, edit: Callable[[Manifest], Manifest]) -> Manifest:
    """A copy of ``pod`` with its container (or init container) ``name`` replaced by ``edit(container)``."""
    found = [c["name"] for section in ("initContainers", "containers") for c in pod.get(section, [])]
    if name not in found:
        raise AssertionError(f"no container {name!r} in the pod; found {found}")
    return {
        **pod,
        **{
            section: [edit(c) if c["name"] == name else c for c in pod[section]]
            for section in ("initContainers", "containers")
            if section in pod
        },
    }


def add_args(pod: Manifest, name: str, args: list[str]) -> Manifest:
    return edit_container(pod, name, lambda c: extend(c, "args", args))


def add_env(pod: Manifest, name: str, env: list[Manifest]) -> Manifest:
    return edit_container(pod, name, lambda c: {**c, "env": with_env(c.get("env", []), env)})


def add_volume(pod: Manifest, volume: Manifest, mount_path: str, *containers: str) -> Manifest:
    """A copy of ``pod`` with ``volume`` defined and mounted at ``mount_path`` in each of ``containers``."""
    pod = extend(pod, "volumes", [volume])
    for name in containers:
        pod = edit_container(pod, name, lambda c: extend(c, "volumeMounts", [mount(volume["name"], mount_path)]))
    return pod


def add_native_sidecar(pod: Manifest, container: Manifest, *, first: bool = False) -> Manifest:
    """A copy of ``pod`` with ``container`` as a native sidecar; ``first``: it starts first and stops last."""
    native = as_native_sidecar(container)
    inits = pod.get("initContainers", [])
    return {**pod, "initContainers": [native, *inits] if first else [*inits, native]}


def as_native_sidecar(container: Manifest) -> Manifest:
    """A container that starts before, and runs beside, the main one (Kubernetes >= 1.28)."""
    return {**container, "restartPolicy": "Always"}
