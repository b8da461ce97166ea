"""An exact checker for the part of JSON Schema (draft 2020-12) that the schemas pwdeploy checks against use: the
Kubernetes OpenAPI schemas of kubernetes-validate (strict flavour) and the shipped JobSet envelope schema.

It reports what the jsonschema package reports for the same schema (the same failed keywords at the same instance
paths, in the same order at each path; tests/test_schema_checker.py holds the two side by side), without its
~40 ms import. ``strip`` is the gate: it keeps the keywords checked here, drops those that only
annotate (``description``, ``format``, ``x-kubernetes-*``, ...) and raises UnsupportedSchema for any other keyword,
so a schema this checker would misread is refused instead of half-checked.

Why not a library (``python3 benchmarks/bench_validate.py --libraries`` and ``python3 benchmarks/bench_render.py``:
medians of fresh processes on the example's manifests, 2-core machine): ``pwdeploy render`` took 95 ms against
65 ms for ``import click, yaml`` (1.46x of a 1.5x budget, 2.6 ms to spare). This checker costs render 1.8 ms
(compiling what the objects reach, then checking them), 0.2 ms per later call.
- jsonschema 4.26: 49 ms to import, 3.4 ms for the first call, 3.0 ms per call: render at 2.2x.
- fastjsonschema 2.22: 1.7 ms to import, but compiling the Kubernetes 1.31 schemas takes 460 ms per process;
  with its generated code (1.75 MB of Python) kept in the cache folder, importing that code takes 4.3 ms, the
  first call 0.5 ms: 6.4 ms in all, 4.6 ms more than this checker: render at 1.53x. It also stops at the first
  error, where ``pwdeploy validate`` reports every one (in jsonschema's order, which the tests hold it to), so
  failures would still need jsonschema.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

DRAFT = "https://json-schema.org/draft/2020-12/schema"
# Keywords that assert nothing. ``format`` is an annotation in draft 2020-12 unless a format checker is asked for,
# and kubernetes-validate asks for none; x-kubernetes-* extensions are ignored by JSON Schema validators. $defs holds
# definitions, which whoever loads a document strips one by one.
ANNOTATIONS = frozenset(
    {"$schema", "$id", "$comment", "title", "description", "default", "examples", "format", "deprecated", "$defs"}
)
CHECKED = frozenset(
    {
        "type",
        "properties",
        "additionalProperties",
        "required",
        "items",
        "enum",
        "const",
        "$ref",
        "oneOf",
        "anyOf",
        "allOf",
        "minimum",
        "maximum",
        "maxItems",
    }
)
TYPES = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})
_LOCAL_REF = re.compile(r"#/\$defs/([^/~]+)")
# Python classes of the JSON types; integer and number are tested apart because bool subclasses int.
_CLASSES: dict[str, type] = {"array": list, "boolean": bool, "null": type(None), "object": dict, "string": str}
_NUMBERS = (int, float)  # a JSON or YAML number as Python parses it (not numbers.Number: 0.3 ms of render's start-up)

Path = tuple[str | int, ...]
Errors = list["SchemaError"]


class UnsupportedSchema(Exception):
    """A schema uses a keyword or form this checker does not implement."""


class SchemaError:
    """One failed keyword: ``value`` is the keyword's value in ``schema``, ``path`` where ``instance`` sits.

    A plain class rather than a dataclass: building a dataclass costs about a millisecond at import.
    """

    __slots__ = ("instance", "keyword", "path", "schema", "value")

    def __init__(self, keyword: str, value: Any, instance: Any, path: Path, schema: Mapping[str, Any]) -> None:
        self.keyword, self.value, self.instance, self.path, self.schema = keyword, value, instance, path, schema

    def __repr__(self) -> str:
        return f"SchemaError({self.keyword!r} at {list(self.path)}: {self.instance!r})"


def strip(schema: object, where: str, ref: Callable[[str], str] | None = None) -> dict[str, Any]:
    """``schema`` with only the keywords that assert something; ``ref`` maps each ``$ref`` to a definition name
    (default: ``#/$defs/NAME`` within the document). UnsupportedSchema names the place of anything else."""
    if not isinstance(schema, dict):
        raise UnsupportedSchema(f"{where}: a schema must be a mapping, got {schema!r}")
    if schema.get("$schema", DRAFT) != DRAFT:
        raise UnsupportedSchema(f"{where}: $schema {schema['$schema']!r} is not draft 2020-12")
    kept: dict[str, Any] = {}
    for key, value in schema.items():
        at = f"{where}/{key}"
        if key in ANNOTATIONS or key.startswith("x-kubernetes-"):
            continue
        if key not in CHECKED:
            raise UnsupportedSchema(f"{at}: JSON Schema keyword {key!r} is not supported")
        if key == "properties":
            kept[key] = {name: strip(sub, f"{at}/{name}", ref) for name, sub in _mapping(value, at).items()}
        elif key in ("items", "additionalProperties"):
            kept[key] = value if key == "additionalProperties" and isinstance(value, bool) else strip(value, at, ref)
        elif key in ("oneOf", "anyOf", "allOf"):
            kept[key] = [strip(sub, f"{at}/{i}", ref) for i, sub in enumerate(_list(value, at))]
        elif key == "$ref":
            kept[key] = f"#/$defs/{(ref or local_ref)(str(value))}"
        else:
            kept[key] = _checked_value(key, value, at)
    return kept


def local_ref(target: str) -> str:
    match = _LOCAL_REF.fullmatch(target)
    if not match:
        raise UnsupportedSchema(f"$ref {target!r} is not of the form #/$defs/NAME")
    return match[1]


def refs(schema: Mapping[str, Any]) -> set[str]:
    """The definition names a stripped ``schema`` refers to directly."""
    found: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if "$ref" in node:
            found.add(local_ref(node["$ref"]))
        stack += node.get("properties", {}).values()
        stack += [node[key] for key in ("items", "additionalProperties") if isinstance(node.get(key), dict)]
        for key in ("oneOf", "anyOf", "allOf"):
            stack += node.get(key, [])
    return found


def _checked_value(key: str, value: object, at: str) -> object:
    if key == "type":
        names = [value] if isinstance(value, str) else _list(value, at)
        if not names or not set(names) <= TYPES:
            raise UnsupportedSchema(f"{at}: {value!r} is not a JSON type or list of types")
    elif key in ("required", "enum"):
        _list(value, at)
    elif key in ("minimum", "maximum", "maxItems") and (
        isinstance(value, bool) or not isinstance(value, int if key == "maxItems" else int | float)
    ):
        raise UnsupportedSchema(f"{at}: {value!r} is not a number")
    return value


def _mapping(value: object, at: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise UnsupportedSchema(f"{at}: expected a mapping, got {value!r}")
    return value


def _list(value: object, at: str) -> list[Any]:
    if not isinstance(value, list):
        raise UnsupportedSchema(f"{at}: expected a list, got {value!r}")
    return value


# --- checking --------------------------------------------------------------------------------------------------

Validator = Callable[[Any, Path, Errors], None]


class Checker:
    """Checks instances against a stripped ``root`` schema whose ``$ref``s name entries of ``definitions``.

    Schemas are compiled into closures on first use, so only the definitions an instance reaches cost anything.
    """

    def __init__(self, root: Mapping[str, Any], definitions: Mapping[str, Mapping[str, Any]]) -> None:
        self._definitions = definitions
        self._compiled: dict[str, list[Validator]] = {}
        self._root = self._compile(root)

    def errors(self, instance: object) -> list[SchemaError]:
        """Every error in ``instance``, in the order jsonschema reports them."""
        found: Errors = []
        _run(self._root, instance, (), found)
        return found

    def is_valid(self, instance: object) -> bool:
        return not self.errors(instance)

    def _compile(self, schema: Mapping[str, Any]) -> list[Validator]:
        return [self._keyword(key, value, schema) for key, value in schema.items() if key in CHECKED]

    def _reference(self, name: str) -> list[Validator]:
        checks = self._compiled.get(name)
        if checks is None:
            # Registered before compiling, so recursive definitions end; filled in place below.
            checks = self._compiled[name] = []
            try:
                definition = self._definitions[name]
            except KeyError:
                raise UnsupportedSchema(f"$ref to {name!r}, which is not among the definitions") from None
            checks += self._compile(definition)
        return checks

    def _keyword(self, key: str, value: Any, schema: Mapping[str, Any]) -> Validator:
        def fail(instance: object, path: Path, errors: Errors) -> None:
            errors.append(SchemaError(key, value, instance, path, schema))

        if key == "type":
            return _type_check(value, fail)
        if key == "properties":
            return self._properties(value)
        if key == "additionalProperties":
            return self._additional(value, schema, fail)
        if key == "required":
            return _required(value, fail)
        if key == "items":
            return self._items(value)
        if key in ("enum", "const"):
            return _one_of_values(value if key == "enum" else [value], fail)
        if key == "$ref":
            return self._ref_check(local_ref(value))
        if key in ("oneOf", "anyOf", "allOf"):
            return _combination(key, [self._compile(sub) for sub in value], fail)
        return _bound_check(key, value, fail)

    def _properties(self, value: Mapping[str, Any]) -> Validator:
        # Compiled when a property first appears: a pod spec's schema names hundreds of fields, a rendered pod
        # uses a few dozen (render compiles only those).
        compiled: dict[str, list[Validator]] = {}

        def properties(instance: object, path: Path, errors: Errors) -> None:
            if isinstance(instance, dict):
                for name, sub in value.items():
                    if name in instance:
                        checks = compiled.get(name)
                        if checks is None:
                            checks = compiled[name] = self._compile(sub)
                        _run(checks, instance[name], (*path, name), errors)

        return properties

    def _items(self, value: Mapping[str, Any]) -> Validator:
        item_checks: list[list[Validator]] = []  # compiled at the first item

        def items(instance: object, path: Path, errors: Errors) -> None:
            if isinstance(instance, list) and instance:
                if not item_checks:
                    item_checks.append(self._compile(value))
                for index, item in enumerate(instance):
                    _run(item_checks[0], item, (*path, index), errors)

        return items

    def _ref_check(self, name: str) -> Validator:
        def reference(instance: object, path: Path, errors: Errors) -> None:
            _run(self._reference(name), instance, path, errors)

        return reference

    def _additional(self, value: Any, schema: Mapping[str, Any], fail: Validator) -> Validator:
        known = schema.get("properties", {})
        if isinstance(value, bool):

            def closed(instance: object, path: Path, errors: Errors) -> None:
                if not value and isinstance(instance, dict) and any(key not in known for key in instance):
                    fail(instance, path, errors)

            return closed
        extra_checks: list[list[Validator]] = []  # compiled at the first extra property

        def open_to(instance: object, path: Path, errors: Errors) -> None:
            if isinstance(instance, dict):
                for key, item in instance.items():
                    if key not in known:
                        if not extra_checks:
                            extra_checks.append(self._compile(value))
                        _run(extra_checks[0], item, (*path, key), errors)

        return open_to


def _run(checks: list[Validator], instance: object, path: Path, errors: Errors) -> None:
    for check in checks:
        check(instance, path, errors)


def _type_check(types: str | list[str], fail: Validator) -> Validator:
    names = [types] if isinstance(types, str) else types
    classes = tuple(_CLASSES[name] for name in names if name in _CLASSES)
    integer, number = "integer" in names, "number" in names

    def check(instance: object, path: Path, errors: Errors) -> None:
        if isinstance(instance, classes) or (
            not isinstance(instance, bool)
            and (
                (number and isinstance(instance, _NUMBERS))
                # Since draft 6 a float with an integral value (1.0) is an integer.
                or (integer and (isinstance(instance, int) or (isinstance(instance, float) and instance.is_integer())))
            )
        ):
            return
        fail(instance, path, errors)

    return check


def _combination(key: str, subs: list[list[Validator]], fail: Validator) -> Validator:
    def valid(checks: list[Validator], instance: object) -> bool:
        found: Errors = []
        _run(checks, instance, (), found)
        return not found

    def check(instance: object, path: Path, errors: Errors) -> None:
        if key == "allOf":
            for checks in subs:
                _run(checks, instance, path, errors)
            return
        first = next((i for i, checks in enumerate(subs) if valid(checks, instance)), None)
        if first is None:
            fail(instance, path, errors)
        elif key == "oneOf" and any(valid(checks, instance) for checks in subs[first + 1 :]):
            fail(instance, path, errors)  # valid under more than one

    return check


def _bound_check(key: str, bound: int | float, fail: Validator) -> Validator:
    def check(instance: object, path: Path, errors: Errors) -> None:
        if key == "maxItems":
            over = isinstance(instance, list) and len(instance) > bound
        else:
            number = isinstance(instance, _NUMBERS) and not isinstance(instance, bool)
            over = number and (instance < bound if key == "minimum" else instance > bound)  # type: ignore[operator]
        if over:
            fail(instance, path, errors)

    return check


def equal(one: object, two: object) -> bool:
    """JSON equality: ``True`` is not ``1``, ``1`` is ``1.0``, containers compare entry by entry."""
    if one is two:
        return True
    if isinstance(one, str) or isinstance(two, str):
        return one == two
    if isinstance(one, Sequence) and isinstance(two, Sequence):
        return len(one) == len(two) and all(equal(a, b) for a, b in zip(one, two, strict=True))
    if isinstance(one, Mapping) and isinstance(two, Mapping):
        return len(one) == len(two) and all(key in two and equal(value, two[key]) for key, value in one.items())
    if isinstance(one, bool) or isinstance(two, bool):
        return isinstance(one, bool) and isinstance(two, bool) and one == two
    return one == two


def _required(names: list[str], fail: Validator) -> Validator:
    def required(instance: object, path: Path, errors: Errors) -> None:
        if isinstance(instance, dict):
            for name in names:
                if name not in instance:
                    fail(instance, path, errors)

    return required


def _one_of_values(options: list[Any], fail: Validator) -> Validator:
    def one_of_values(instance: object, path: Path, errors: Errors) -> None:
        if not any(equal(option, instance) for option in options):
            fail(instance, path, errors)

    return one_of_values
