"""Structural checks against JSON Schemas: the JobSet envelope schema shipped here and the Kubernetes OpenAPI
schemas that kubernetes-validate ships (strict flavour: unknown fields are errors).

kubernetes_validate.validate() stops at the first error, re-reads its 1.3 MB definitions file on every call and
imports jsonschema (~40 ms); here the schemas are checked by pwdeploy.validation.checker, which reports every
error, and read through the cache in pwdeploy.validation.kubernetes_schemas.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pwdeploy.errors import ArgumentError
from pwdeploy.names import short
from pwdeploy.validation.checker import Checker, SchemaError, strip
from pwdeploy.validation.kubernetes_schemas import cached_json, kind_schema, kubernetes_versions, version_folder
from pwdeploy.validation.problems import Problem, join

JOBSET_SCHEMA = "jobset-v1alpha2.schema.json"
_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.\d+)?")


def resolve_version(requested: str) -> tuple[int, int]:
    """The schema version to check ``requested`` (``1.31``, ``v1.31.2``) against; an ArgumentError naming
    ``kubernetes_version`` when unsupported."""
    match = _VERSION.fullmatch(requested.strip())
    wanted = (int(match[1]), int(match[2])) if match else None
    if wanted is not None and version_folder(wanted).is_dir():
        return wanted  # one stat: listing every version (the message's range) costs every render 0.5 ms
    versions = kubernetes_versions()
    valid = f"{versions[0][0]}.{versions[0][1]} to {versions[-1][0]}.{versions[-1][1]}"
    if wanted is None:
        raise ArgumentError("kubernetes_version", f"{requested!r} is not a version; valid: {valid}, e.g. 1.31")
    if wanted not in versions:
        raise ArgumentError(
            "kubernetes_version",
            f"{requested} is not supported by the installed kubernetes-validate; valid: {valid}",
            hint="upgrade kubernetes-validate for newer versions",
        )
    return wanted


@functools.cache
def kubernetes_validator(version: tuple[int, int], api_version: str, kind: str) -> Checker | None:
    """A checker for ``kind`` in ``api_version`` at Kubernetes ``version``; None when no schema is shipped."""
    found = kind_schema(version, api_version, kind)
    return None if found is None else Checker(*found)


def jobset_document() -> dict[str, Any]:
    """The shipped JobSet envelope schema, as written (parsed once, then read from the cache's copy)."""
    document: dict[str, Any] = cached_json(Path(__file__).parent / JOBSET_SCHEMA)
    return document


@functools.cache
def jobset_validator() -> Checker:
    document = jobset_document()
    definitions = {name: strip(sub, f"{JOBSET_SCHEMA}#/$defs/{name}") for name, sub in document["$defs"].items()}
    return Checker(strip(document, JOBSET_SCHEMA), definitions)


def schema_problems(validator: Checker, instance: Mapping[str, Any], prefix: str = "") -> list[Problem]:
    """Every error ``validator`` finds in ``instance``, with paths under ``prefix``, in document order."""
    return describe(validator.errors(instance), prefix)


def describe(errors: list[SchemaError], prefix: str = "") -> list[Problem]:
    """``errors`` as problem lines, sorted by path (stable: errors at one path keep their order)."""
    ordered = sorted(errors, key=lambda e: [str(p) for p in e.path])
    return [problem for error in ordered for problem in _describe(error, prefix)]


def _describe(error: SchemaError, prefix: str) -> Iterator[Problem]:
    path = join(prefix, error.path)
    kind, value, instance = error.keyword, error.value, error.instance
    if kind == "additionalProperties" and isinstance(instance, Mapping):
        import difflib  # only for a problem: render never pays for it

        known = sorted(error.schema.get("properties", {}))
        for key in sorted({str(key) for key in instance} - set(known)):
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            yield Problem(join(path, [key]), f"unknown field{hint}")
    elif kind == "required" and isinstance(instance, Mapping):
        for key in value:
            if key not in instance:
                yield Problem(join(path, [key]), "required field is missing")
    elif kind == "type":
        yield Problem(path, f"{short(instance)} is not {_type_words(value)}")
    elif kind in ("oneOf", "anyOf"):
        expected = [sub.get("type") for sub in value if isinstance(sub, Mapping)]
        if all(expected):
            yield Problem(path, f"{short(instance)} is not {' or '.join(_type_words(t) for t in expected)}")
        else:
            yield Problem(path, f"{short(instance)} does not match {'exactly ' if kind == 'oneOf' else ''}one form")
    elif kind == "enum":
        yield Problem(path, f"{short(instance)} is not one of {', '.join(map(str, value))}")
    elif kind == "const":
        yield Problem(path, f"{short(instance)} must be {value!r}")
    elif kind == "minimum":
        yield Problem(path, f"{short(instance)} is below the minimum {value}")
    elif kind == "maximum":
        yield Problem(path, f"{short(instance)} is above the maximum {value}")
    elif kind == "maxItems":
        yield Problem(path, f"has {len(instance)} entries; at most {value} allowed")
    else:
        yield Problem(path, f"{short(instance)} fails the schema keyword {kind!r}")


def _type_words(types: object) -> str:
    names = [t for t in (types if isinstance(types, list) else [types]) if t != "null"]
    words = {"object": "a mapping", "array": "a list", "integer": "an integer", "string": "a string"}
    return " or ".join(words.get(str(t), f"a {t}") for t in names)
