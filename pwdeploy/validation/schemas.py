"""Structural checks against JSON Schemas: the JobSet envelope schema shipped here and the Kubernetes OpenAPI
schemas that kubernetes-validate ships (strict flavour: unknown fields are errors).

kubernetes_validate.validate() stops at the first error and re-reads its 1.3 MB definitions file on every call,
so validators are built here from its schema files, once per process, and report every error.
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import json
import re
from collections.abc import Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pwdeploy.errors import ConfigError
from pwdeploy.validation.problems import Problem, join, short

if TYPE_CHECKING:
    # jsonschema ships no type information; the ignores stay harmless if stubs get installed.
    from jsonschema import ValidationError as SchemaError  # type: ignore[import-untyped,unused-ignore]
    from jsonschema.protocols import Validator  # type: ignore[import-untyped,unused-ignore]

JOBSET_SCHEMA = "jobset-v1alpha2.schema.json"
_SCHEMA_ROOT = "kubernetes-json-schema"
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.\d+)?")


@functools.cache
def _schema_root() -> Path:
    """kubernetes-validate's schema folder, found without importing the package (which costs ~15 ms)."""
    spec = importlib.util.find_spec("kubernetes_validate")
    if spec is None or spec.origin is None:
        raise ConfigError(
            None, "the kubernetes-validate package is not installed", hint="pip install kubernetes-validate"
        )
    return Path(spec.origin).parent / _SCHEMA_ROOT


@functools.cache
def kubernetes_versions() -> tuple[tuple[int, int], ...]:
    """The (major, minor) versions whose schemas kubernetes-validate ships, oldest first."""
    found = set()
    for entry in _schema_root().iterdir():
        match = re.fullmatch(r"v(\d+)\.(\d+)\.\d+-local-strict", entry.name)
        if match:
            found.add((int(match[1]), int(match[2])))
    return tuple(sorted(found))


def resolve_version(requested: str) -> tuple[int, int]:
    """The schema version to check ``requested`` (``1.31``, ``v1.31.2``) against; ConfigError when unsupported."""
    versions = kubernetes_versions()
    valid = f"{versions[0][0]}.{versions[0][1]} to {versions[-1][0]}.{versions[-1][1]}"
    match = _VERSION.fullmatch(requested.strip())
    if not match:
        raise ConfigError("--kubernetes-version", f"{requested!r} is not a version; valid: {valid}, e.g. 1.31")
    wanted = (int(match[1]), int(match[2]))
    if wanted not in versions:
        raise ConfigError(
            "--kubernetes-version",
            f"{requested} is not supported by the installed kubernetes-validate; valid: {valid}",
            hint="upgrade kubernetes-validate for newer versions",
        )
    return wanted


def _schema_file(version: tuple[int, int], name: str) -> Any:
    path = _schema_root() / f"v{version[0]}.{version[1]}.0-local-strict" / name
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


@functools.cache
def _definitions(version: tuple[int, int]) -> Any:
    return _schema_file(version, "_definitions.json")


@functools.cache
def kubernetes_validator(version: tuple[int, int], api_version: str, kind: str) -> Validator | None:
    """A validator for ``kind`` in ``api_version`` at Kubernetes ``version``; None when no schema is shipped."""
    from jsonschema import Draft202012Validator  # type: ignore[import-untyped,unused-ignore]
    from referencing import Registry, Resource

    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = _schema_file(version, f"{kind.lower()}-{group_version}.json")
    if schema is None:
        return None
    registry: Registry[Any] = Registry().with_resources(
        [
            (schema.get("$id", ""), Resource.from_contents(schema)),
            (_definitions(version)["$id"], Resource.from_contents(_definitions(version))),
        ]
    )
    return Draft202012Validator(schema, registry=registry)


@functools.cache
def jobset_validator() -> Validator:
    from jsonschema import Draft202012Validator  # type: ignore[import-untyped,unused-ignore]

    text = (resources.files("pwdeploy.validation") / JOBSET_SCHEMA).read_text(encoding="utf-8")
    return Draft202012Validator(json.loads(text))


def schema_problems(validator: Validator, instance: Mapping[str, Any], prefix: str = "") -> list[Problem]:
    """Every error ``validator`` finds in ``instance``, with paths under ``prefix``, in document order."""
    errors = sorted(validator.iter_errors(instance), key=lambda e: [str(p) for p in e.absolute_path])
    return [problem for error in errors for problem in _describe(error, prefix)]


def _describe(error: SchemaError, prefix: str) -> Iterator[Problem]:
    path = join(prefix, error.absolute_path)
    kind = error.validator
    if kind == "additionalProperties" and isinstance(error.instance, Mapping):
        known = sorted(error.schema.get("properties", {}))
        for key in sorted(set(error.instance) - set(known)):
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            yield Problem(join(path, [str(key)]), f"unknown field{hint}")
    elif kind == "required" and isinstance(error.instance, Mapping):
        for key in error.validator_value:
            if key not in error.instance:
                yield Problem(join(path, [key]), "required field is missing")
    elif kind == "type":
        yield Problem(path, f"{short(error.instance)} is not {_type_words(error.validator_value)}")
    elif kind in ("oneOf", "anyOf"):
        expected = [sub.get("type") for sub in error.validator_value if isinstance(sub, Mapping)]
        yield Problem(path, f"{short(error.instance)} is not {' or '.join(_type_words(t) for t in expected)}")
    elif kind == "enum":
        yield Problem(path, f"{short(error.instance)} is not one of {', '.join(map(str, error.validator_value))}")
    elif kind == "const":
        yield Problem(path, f"{short(error.instance)} must be {error.validator_value!r}")
    else:
        yield Problem(path, error.message)


def _type_words(types: object) -> str:
    names = [t for t in (types if isinstance(types, list) else [types]) if t != "null"]
    words = {"object": "a mapping", "array": "a list", "integer": "an integer", "string": "a string"}
    return " or ".join(words.get(str(t), f"a {t}") for t in names)
