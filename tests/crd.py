"""Validate an object against a JobSet CRD's openAPIV3Schema, as the API server's structural checks would.

For tests only: the CRDs of the JobSet releases in CRD_VERSIONS are vendored in tests/fixtures/crds (see its README).
Mirrors what the API server adds to plain JSON Schema: unknown fields are errors (kubectl's default strict
field validation; the CRDs set no x-kubernetes-preserve-unknown-fields), and x-kubernetes-list-type map/set
lists must not repeat a key. CEL rules (x-kubernetes-validations) are not evaluated.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

CRD_VERSIONS = ("0.10.1", "0.12.0")
CRDS = Path(__file__).resolve().parent / "fixtures" / "crds"


def crd_path(version: str) -> Path:
    """The vendored JobSet CRD of release ``version`` (``0.10.1``, ``v0.12.0``)."""
    return CRDS / f"jobset-v{version.removeprefix('v')}-crd.yaml"


def _strict(schema: Any) -> Any:
    """``schema`` with additionalProperties false wherever properties are listed and nothing else is allowed."""
    if isinstance(schema, dict):
        schema = {key: _strict(value) for key, value in schema.items()}
        open_ended = "additionalProperties" in schema or schema.get("x-kubernetes-preserve-unknown-fields")
        if "properties" in schema and not open_ended:
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [_strict(entry) for entry in schema]
    return schema


def _list_keys(validator: Any, keys: list[str], instance: Any, schema: Mapping[str, Any]) -> Iterator[Any]:
    if schema.get("x-kubernetes-list-type") != "map" or not isinstance(instance, list):
        return
    defaults = {key: schema.get("items", {}).get("properties", {}).get(key, {}).get("default") for key in keys}
    seen = set()
    for entry in instance:
        if not isinstance(entry, dict):
            continue
        key = tuple(repr(entry.get(k, defaults[k])) for k in keys)
        if key in seen:
            yield jsonschema.ValidationError(f"duplicate entry with {', '.join(keys)} = {', '.join(key)}")
        seen.add(key)


def _list_set(validator: Any, list_type: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[Any]:
    if list_type == "set" and isinstance(instance, list) and len({repr(v) for v in instance}) != len(instance):
        yield jsonschema.ValidationError("duplicate entries in a set")


_Validator = jsonschema.validators.extend(
    jsonschema.Draft7Validator,
    {"x-kubernetes-list-map-keys": _list_keys, "x-kubernetes-list-type": _list_set},
)


@functools.cache
def _crd_text(version: str) -> str:
    return json.dumps(yaml.load(crd_path(version).read_text(), Loader=yaml.CSafeLoader))


def crd_object(version: str) -> dict[str, Any]:
    """The JobSet CustomResourceDefinition of release ``version`` (``0.10.1``), a fresh copy each call."""
    crd: dict[str, Any] = json.loads(_crd_text(version.removeprefix("v")))
    return crd


@functools.cache
def crd_validator(version: str) -> Any:
    crd = crd_object(version)
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2"]
    schema = copy.deepcopy(served["schema"]["openAPIV3Schema"])
    schema["properties"]["apiVersion"] = {"const": "jobset.x-k8s.io/v1alpha2"}
    schema["properties"]["kind"] = {"const": "JobSet"}
    return _Validator(_strict(schema))


def validate_against_crd(obj: dict[str, Any], version: str) -> list[str]:
    """Every error the JobSet CRD ``version`` (``0.10.1``, ``v0.12.0``) finds in ``obj``, as ``path: message``."""
    errors = crd_validator(version.removeprefix("v")).iter_errors(obj)
    return sorted(f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)
