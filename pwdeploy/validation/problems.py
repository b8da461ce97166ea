"""One problem found in a manifest, and the field-path notation problems are written in."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Problem:
    """``path`` is where in the object (``spec.replicatedJobs[0].name``); empty for the object itself.

    A plain class rather than a frozen dataclass, which costs most of a millisecond to build at import time, on
    the path of every `pwdeploy render`.
    """

    __slots__ = ("message", "path")

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Problem) and (self.path, self.message) == (other.path, other.message)

    def __hash__(self) -> int:
        return hash((self.path, self.message))

    def __repr__(self) -> str:
        return f"Problem(path={self.path!r}, message={self.message!r})"

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def child(path: str, key: str | int) -> str:
    """``path`` extended by a mapping key or a list index: ``a.b``, ``a[0]``, ``labels[app.kubernetes.io/name]``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if not _PLAIN_KEY.fullmatch(key):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def join(path: str, parts: Iterable[str | int]) -> str:
    for part in parts:
        path = child(path, part)
    return path


def mapping(value: object) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else empty: rules read malformed input that the schemas already reported."""
    return value if isinstance(value, Mapping) else {}


def items(value: object) -> list[tuple[int, Mapping[str, Any]]]:
    """The (index, mapping) entries of ``value`` when it is a list; entries that are not mappings are skipped."""
    if not isinstance(value, list):
        return []
    return [(i, entry) for i, entry in enumerate(value) if isinstance(entry, Mapping)]


def integer(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def duplicates(entries: list[tuple[str, object]], rule: str) -> list[Problem]:
    """A problem at each ``(path, value)`` entry whose value an earlier entry already has; ``rule`` says why."""
    first: dict[object, str] = {}
    problems: list[Problem] = []
    for path, value in entries:
        if value is None or not isinstance(value, str | int):
            continue
        if value in first:
            problems.append(Problem(path, f"{value!r} is already used by {first[value]}; {rule}"))
        else:
            first[value] = path
    return problems
