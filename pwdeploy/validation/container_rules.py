"""Per-container rules of the Kubernetes API server that its OpenAPI schema does not carry: env vars and
resource quantities."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pwdeploy import quantity as quantities
from pwdeploy.errors import ConfigError
from pwdeploy.names import env_var_name, label_key, short
from pwdeploy.validation.problems import Problem, child, duplicates, items, mapping

if TYPE_CHECKING:
    from decimal import Decimal

_VALUE_SOURCES = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef", "fileKeyRef")
_FIELD_PATHS = (
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
)
_LABEL_FIELD = re.compile(r"metadata\.(labels|annotations)\['(.+)'\]")
_STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage")


def quantity(value: object) -> int | Decimal | None:
    """The value of a resource quantity (zero allowed); None when ``value`` is not a quantity."""
    try:
        return quantities.amount(value, "quantity", allow_zero=True)  # a rendered one was parsed with the config
    except ConfigError:
        return None


def env_problems(container: Mapping[str, Any], path: str) -> list[Problem]:
    problems: list[Problem] = []
    env = items(container.get("env"))
    problems += duplicates([(f"{path}.env[{k}].name", var.get("name")) for k, var in env], "env names must be unique")
    for k, var in env:
        var_path = f"{path}.env[{k}]"
        name = var.get("name")
        if isinstance(name, str) and (reason := env_var_name(name)):
            problems.append(Problem(f"{var_path}.name", reason))
        problems += _env_source_problems(var, var_path)
    return problems


def _env_source_problems(var: Mapping[str, Any], path: str) -> list[Problem]:
    source = var.get("valueFrom")
    if source is None:
        return []
    if var.get("value"):
        return [Problem(path, "set either value or valueFrom, not both")]
    given = [key for key in _VALUE_SOURCES if mapping(source).get(key) is not None]
    if len(given) != 1:
        return [Problem(f"{path}.valueFrom", f"needs exactly one of {', '.join(_VALUE_SOURCES[:4])}")]
    field_path = mapping(mapping(source).get("fieldRef")).get("fieldPath")
    if not isinstance(field_path, str):
        return []
    match = _LABEL_FIELD.fullmatch(field_path)
    if match:
        reason = label_key(match[2])
        return [Problem(f"{path}.valueFrom.fieldRef.fieldPath", reason)] if reason else []
    if field_path not in _FIELD_PATHS:
        return [
            Problem(
                f"{path}.valueFrom.fieldRef.fieldPath",
                f"{field_path!r} is not supported; valid: {', '.join(_FIELD_PATHS)}, "
                "metadata.labels['KEY'], metadata.annotations['KEY']",
            )
        ]
    return []


def resource_problems(container: Mapping[str, Any], path: str) -> list[Problem]:
    resources = mapping(container.get("resources"))
    parsed: dict[str, dict[str, int | Decimal]] = {"limits": {}, "requests": {}}
    problems: list[Problem] = []
    for section in ("limits", "requests"):
        for resource, value in mapping(resources.get(section)).items():
            at = child(f"{path}.resources.{section}", str(resource))
            if (reason := _resource_name(str(resource))) is not None:
                problems.append(Problem(at, reason))
            amount = quantity(value)
            if amount is None:
                problems.append(Problem(at, f"{short(value)} is not a quantity; use e.g. 8, 500m, 16Gi"))
                continue
            if _extended(str(resource)) and amount % 1 != 0:
                problems.append(Problem(at, f"{value!r} must be a whole number for {resource}"))
            parsed[section][str(resource)] = amount
    for resource, request in parsed["requests"].items():
        limit = parsed["limits"].get(resource)
        at = child(f"{path}.resources.requests", resource)
        if limit is not None and request > limit:
            problems.append(
                Problem(
                    at, f"request {resources['requests'][resource]} exceeds the limit {resources['limits'][resource]}"
                )
            )
        if not _overcommittable(resource) and limit is not None and request != limit:
            problems.append(Problem(at, f"{resource} cannot be overcommitted: request must equal the limit"))
        if not _overcommittable(resource) and limit is None:
            problems.append(Problem(f"{path}.resources.limits", f"{resource} is requested, so it needs a limit too"))
    return problems


def memory_limit(container: Mapping[str, Any]) -> int | Decimal | None:
    return quantity(mapping(mapping(container.get("resources")).get("limits")).get("memory"))


def _extended(resource: str) -> bool:
    """Extended resources (``google.com/tpu``) are counted in whole units."""
    return "/" in resource


def _overcommittable(resource: str) -> bool:
    return not (_extended(resource) or resource.startswith("hugepages-"))


def _resource_name(resource: str) -> str | None:
    if "/" not in resource and resource not in _STANDARD_RESOURCES and not resource.startswith("hugepages-"):
        return f"{resource!r} is not a resource name; use cpu, memory, ephemeral-storage or DOMAIN/NAME"
    return label_key(resource) if "/" in resource else None
