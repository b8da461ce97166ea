"""One problem a validation rule found in a manifest (its path in the object, its message and the rule that found
it), the rules and what each rests on, and the field-path notation problems are written in. ``validate`` makes each
problem a finding (``pwdeploy.finding.Finding``) once its object and file are known."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# The rules a validation finding names (its id: a contract), each with the code or schema it rests on.
RULES: dict[str, str] = {
    "kubernetes-schema": "the Kubernetes OpenAPI schemas of kubernetes-validate (strict: unknown fields are errors)",
    "jobset-schema": "kubernetes-sigs/jobset: the JobSet v1alpha2 CRD's schema (shipped: jobset-v1alpha2.schema.json)",
    "jobset-webhook": "kubernetes-sigs/jobset: pkg/webhooks/jobset_webhook.go (ValidateCreate)",
    "api-server": "kubernetes/kubernetes: pkg/apis/core/validation, pkg/apis/batch/validation, "
    "staging/src/k8s.io/apimachinery/pkg/api/validation (names, labels, pod and Job specs)",
    "tpu-chips": "https://cloud.google.com/kubernetes-engine/docs/concepts/tpus (one TPU pod per VM: all its chips)",
}


class Problem:
    """``path`` is where in the object (``spec.replicatedJobs[0].name``); empty for the object itself. ``rule``:
    the key of ``RULES`` that found it ("" until ``tagged`` names it).

    A plain class rather than a frozen dataclass, which costs most of a millisecond to build at import time, on
    the path of every `pwdeploy render`.
    """

    __slots__ = ("message", "path", "rule")

    def __init__(self, path: str, message: str, rule: str = "") -> None:
        self.path = path
        self.message = message
        self.rule = rule

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Problem) and (self.path, self.message) == (other.path, other.message)

    def __hash__(self) -> int:
        return hash((self.path, self.message))

    def __repr__(self) -> str:
        return f"Problem(path={self.path!r}, message={self.message!r})"

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def tagged(problems: list[Problem], rule: str) -> list[Problem]:
    """``problems``, each naming ``rule`` unless an inner rule already named its own."""
    for problem in problems:
        problem.rule = problem.rule or rule
    return problems


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
