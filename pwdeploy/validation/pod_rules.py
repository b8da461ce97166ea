"""Pod-spec rules of the Kubernetes API server that its OpenAPI schema does not carry: unique container names,
native sidecars, ports, volumes and their mounts, memory-backed volumes within the memory limit of each
container that mounts them, node selectors and tolerations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pwdeploy.names import dns1123_label, dns1123_subdomain, label_key, label_value, port_name, short
from pwdeploy.validation.container_rules import env_problems, memory_limit, quantity, resource_problems
from pwdeploy.validation.problems import Problem, duplicates, integer, items, mapping, tagged
from pwdeploy.validation.tpu_requests import tpu_request_problems

_PROBES = ("lifecycle", "livenessProbe", "readinessProbe", "startupProbe")
_PROTOCOLS = ("TCP", "UDP", "SCTP")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# Enumerated container fields: the OpenAPI schemas carry them as free strings, the API server rejects others.
_CONTAINER_ENUMS = {
    "imagePullPolicy": ("Always", "IfNotPresent", "Never"),
    "terminationMessagePolicy": ("File", "FallbackToLogsOnError"),
}

Container = tuple[str, Mapping[str, Any]]  # (path, container)


def containers_of(pod: Mapping[str, Any], path: str) -> list[Container]:
    """Init containers first, then containers, each with its path."""
    return [
        (f"{path}.{section}[{i}]", container)
        for section in ("initContainers", "containers")
        for i, container in items(pod.get(section))
    ]


def pod_spec_problems(pod: Mapping[str, Any], path: str) -> list[Problem]:
    containers = containers_of(pod, path)
    problems: list[Problem] = []
    if not items(pod.get("containers")):
        problems.append(Problem(f"{path}.containers", "a pod needs at least one container"))
    problems += _name_problems(containers)
    for container_path, container in containers:
        problems += _container_problems(container, container_path)
        problems += env_problems(container, container_path)
        problems += resource_problems(container, container_path)
    problems += _port_problems(containers, bool(pod.get("hostNetwork")))
    problems += _volume_problems(pod, path, containers)
    problems += _scheduling_problems(pod, path)
    problems += tagged(tpu_request_problems(pod, path), "tpu-chips")
    return problems


def _name_problems(containers: list[Container]) -> list[Problem]:
    names = [(f"{path}.name", container.get("name")) for path, container in containers]
    problems = duplicates(names, "container names must be unique across containers and initContainers")
    for at, name in names:
        if isinstance(name, str) and (reason := dns1123_label(name)):
            problems.append(Problem(at, reason))
    return problems


def _container_problems(container: Mapping[str, Any], path: str) -> list[Problem]:
    problems: list[Problem] = []
    is_init = ".initContainers[" in path
    policy = container.get("restartPolicy")
    if not container.get("image"):
        problems.append(Problem(f"{path}.image", "required field is missing"))
    for field, valid in _CONTAINER_ENUMS.items():
        value = container.get(field)
        if value is not None and value not in valid:
            problems.append(Problem(f"{path}.{field}", f"{short(value)} is not one of {', '.join(valid)}"))
    if not is_init and policy is not None:
        problems.append(
            Problem(
                f"{path}.restartPolicy",
                "only initContainers may set restartPolicy (Always makes a native sidecar); remove it here",
            )
        )
    if is_init and policy is not None and policy != "Always":
        problems.append(Problem(f"{path}.restartPolicy", f"{policy!r} is not allowed; the only value is Always"))
    if is_init and policy is None:
        problems += [
            Problem(f"{path}.{probe}", "only native sidecars (restartPolicy Always) may set this on an initContainer")
            for probe in _PROBES
            if container.get(probe) is not None
        ]
    return problems


def _port_problems(containers: list[Container], host_network: bool) -> list[Problem]:
    problems: list[Problem] = []
    seen_host: dict[tuple[int, str], str] = {}  # (port on the host, protocol) -> the container that takes it
    seen_names: dict[str, str] = {}
    for container_path, container in containers:
        seen_here: set[tuple[int, str]] = set()
        for k, port in items(container.get("ports")):
            at = f"{container_path}.ports[{k}]"
            problems += _port_fields(port, at, host_network)
            problems += _port_name(port, at, seen_names)
            number, protocol = integer(port.get("containerPort")), str(port.get("protocol") or "TCP")
            if number is None:
                continue
            if (number, protocol) in seen_here:
                problems.append(
                    Problem(f"{at}.containerPort", f"{number}/{protocol} is listed twice in this container")
                )
            seen_here.add((number, protocol))
            on_host = number if host_network else integer(port.get("hostPort"))
            if on_host is None:
                continue
            taker = seen_host.setdefault((on_host, protocol), container_path)
            if taker != container_path:
                problems.append(
                    Problem(f"{at}.containerPort", f"host port {on_host}/{protocol} is also used by {taker}")
                )
    return problems


def _port_fields(port: Mapping[str, Any], at: str, host_network: bool) -> list[Problem]:
    """One port's numbers and protocol."""
    number, host = integer(port.get("containerPort")), integer(port.get("hostPort"))
    protocol = str(port.get("protocol") or "TCP")
    problems = [
        Problem(f"{at}.{key}", f"{value} is not a port number: use 1..65535")
        for key, value in (("containerPort", number), ("hostPort", host))
        if value is not None and not 1 <= value <= 65535
    ]
    if protocol not in _PROTOCOLS:
        problems.append(Problem(f"{at}.protocol", f"{protocol!r} is not one of {', '.join(_PROTOCOLS)}"))
    if host_network and host is not None and host != number:
        problems.append(Problem(f"{at}.hostPort", f"{host} must equal containerPort {number} with hostNetwork"))
    return problems


def _port_name(port: Mapping[str, Any], at: str, seen_names: dict[str, str]) -> list[Problem]:
    """A port's name: valid, and unique in the pod (``seen_names``: the first port of each name)."""
    name = port.get("name")
    if not isinstance(name, str):
        return []
    if reason := port_name(name):
        problem = Problem(f"{at}.name", reason)
    elif name in seen_names:
        problem = Problem(f"{at}.name", f"{name!r} is already used by {seen_names[name]}")
    else:
        problem = None
    seen_names.setdefault(name, at)
    return [problem] if problem else []


def _volume_problems(pod: Mapping[str, Any], path: str, containers: list[Container]) -> list[Problem]:
    problems: list[Problem] = []
    volumes = items(pod.get("volumes"))
    problems += duplicates(
        [(f"{path}.volumes[{k}].name", v.get("name")) for k, v in volumes], "volume names must be unique"
    )
    by_name: dict[object, tuple[str, Mapping[str, Any]]] = {}
    for k, volume in volumes:
        at = f"{path}.volumes[{k}]"
        name = volume.get("name")
        if isinstance(name, str) and (reason := dns1123_label(name)):
            problems.append(Problem(f"{at}.name", reason))
        by_name.setdefault(name, (at, volume))
        size = mapping(volume.get("emptyDir")).get("sizeLimit")
        if size is not None and quantity(size) is None:
            problems.append(Problem(f"{at}.emptyDir.sizeLimit", f"{short(size)} is not a quantity; use e.g. 16Gi"))
    valid = ", ".join(str(name) for name in by_name) or "none defined"
    for container_path, container in containers:
        mount_paths: set[object] = set()
        mounted: dict[object, tuple[str, Mapping[str, Any], str]] = {}  # volume name -> (path, volume, mount)
        for k, mount in items(container.get("volumeMounts")):
            at = f"{container_path}.volumeMounts[{k}]"
            target = by_name.get(mount.get("name"))
            if target is None:
                problems.append(
                    Problem(f"{at}.name", f"{mount.get('name')!r} is not a volume of this pod; valid: {valid}")
                )
            else:
                mounted.setdefault(mount.get("name"), (*target, at))
            if mount.get("mountPath") in mount_paths:
                problems.append(Problem(f"{at}.mountPath", f"{mount.get('mountPath')!r} is mounted twice"))
            mount_paths.add(mount.get("mountPath"))
        problems += _memory_volumes_fit(container, container_path, list(mounted.values()))
    return problems


def _memory_volumes_fit(
    container: Mapping[str, Any], container_path: str, mounted: list[tuple[str, Mapping[str, Any], str]]
) -> list[Problem]:
    """Memory-backed emptyDirs (/dev/shm, shared transfer directories) are charged to the memory limit of the
    containers that write them: together, those a container mounts must fit in its limit."""
    in_memory = [
        (volume_path, spec, at, size)
        for volume_path, spec, at in mounted
        if mapping(spec.get("emptyDir")).get("medium") == "Memory"
        and (size := quantity(mapping(spec.get("emptyDir")).get("sizeLimit"))) is not None
    ]
    limit = memory_limit(container)
    if limit is None or sum(size for *_, size in in_memory) <= limit:
        return []
    memory = mapping(mapping(container.get("resources")).get("limits")).get("memory")
    if len(in_memory) == 1:
        ((volume_path, spec, at, _),) = in_memory
        return [
            Problem(
                f"{volume_path}.emptyDir.sizeLimit",
                f"{spec['emptyDir']['sizeLimit']} exceeds the memory limit {memory} of {container_path} that "
                f"mounts it ({at}); lower sizeLimit or raise the memory limit",
            )
        ]
    sizes = " + ".join(f"{spec.get('name')} ({spec['emptyDir']['sizeLimit']})" for _, spec, _, _ in in_memory)
    return [
        Problem(
            f"{container_path}.resources.limits.memory",
            f"{memory} is less than the memory-backed volumes this container mounts: {sizes}; lower their "
            "sizeLimit or raise the memory limit",
        )
    ]


def _scheduling_problems(pod: Mapping[str, Any], path: str) -> list[Problem]:
    problems: list[Problem] = []
    for selector, value in mapping(pod.get("nodeSelector")).items():
        reason = label_key(str(selector)) or (label_value(value) if isinstance(value, str) else None)
        if reason:
            problems.append(Problem(f"{path}.nodeSelector[{selector}]", reason))
    for k, toleration in items(pod.get("tolerations")):
        at = f"{path}.tolerations[{k}]"
        operator = toleration.get("operator", "Equal")
        key = toleration.get("key")
        if operator not in ("Exists", "Equal"):
            problems.append(Problem(f"{at}.operator", f"{operator!r} is not one of Exists, Equal"))
        if operator == "Exists" and toleration.get("value"):
            problems.append(Problem(f"{at}.value", "must be empty when operator is Exists"))
        if not key and operator != "Exists":
            problems.append(Problem(f"{at}.operator", "must be Exists when key is empty"))
        if isinstance(key, str) and key and (reason := label_key(key)):
            problems.append(Problem(f"{at}.key", reason))
        effect = toleration.get("effect")
        if effect and effect not in _EFFECTS:
            problems.append(Problem(f"{at}.effect", f"{effect!r} is not one of {', '.join(_EFFECTS)}"))
    for field in ("serviceAccountName", "priorityClassName"):
        value = pod.get(field)
        if isinstance(value, str) and value and (reason := dns1123_subdomain(value)):
            problems.append(Problem(f"{path}.{field}", reason))
    return problems
