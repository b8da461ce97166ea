"""A bucket's lifecycle rules, read for one question: which of them can delete the live objects under a prefix.

Pure (no I/O). The rule format is the GCS JSON API's (``lifecycle.rule[]``: ``action.type``, ``condition``;
https://cloud.google.com/storage/docs/lifecycle): an object is acted on when it meets every condition of a rule.
Rules are answers from a server: anything of the wrong shape is reported as unreadable, never trusted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# Conditions met only by noncurrent versions (buckets with Object Versioning): such a rule never deletes the
# live objects a restarted job reads.
NONCURRENT_ONLY = ("numNewerVersions", "daysSinceNoncurrentTime", "noncurrentTimeBefore")
NAME_CONDITIONS = ("matchesPrefix", "matchesSuffix", "matchesPattern")
MAX_RULES = 100  # GCS allows 50; more than this is not a real answer


@dataclass(frozen=True)
class DeleteRule:
    """A Delete rule that can reach live objects: which objects (by name), and when (the other conditions)."""

    number: int  # 1-based, among the rules the client library returns (it leaves out action types it does not know)
    prefixes: tuple[str, ...] | None  # matchesPrefix; None: any name
    suffixes: tuple[str, ...] | None  # matchesSuffix
    pattern: str | None  # matchesPattern (RE2)
    when: str  # the other conditions, e.g. "age >= 30 days"; "" when there are none


@dataclass(frozen=True)
class Rules:
    deletes: tuple[DeleteRule, ...] = ()
    unreadable: tuple[int, ...] = ()  # numbers of rules whose shape was not understood


def read_rules(raw: Iterable[Any]) -> Rules:
    """The Delete rules among ``raw`` (the bucket's ``lifecycle_rules``) that can delete live objects."""
    deletes: list[DeleteRule] = []
    unreadable: list[int] = []
    for number, rule in enumerate(raw, start=1):
        if number > MAX_RULES:
            break
        try:
            found = _delete_rule(number, rule)
        except (TypeError, ValueError):
            unreadable.append(number)
            continue
        if found is not None:
            deletes.append(found)
    return Rules(tuple(deletes), tuple(unreadable))


def _delete_rule(number: int, rule: Any) -> DeleteRule | None:
    if not isinstance(rule, Mapping):
        raise TypeError("a rule is an object")
    action, condition = rule.get("action"), rule.get("condition", {})
    if not isinstance(action, Mapping) or not isinstance(condition, Mapping):
        raise TypeError("action and condition are objects")
    if action.get("type") != "Delete":
        return None  # SetStorageClass, AbortIncompleteMultipartUpload: nothing deleted
    if condition.get("isLive") is False or any(name in condition for name in NONCURRENT_ONLY):
        return None
    pattern = condition.get("matchesPattern")
    if pattern is not None and not isinstance(pattern, str):
        raise TypeError("matchesPattern is a string")
    others = {k: v for k, v in condition.items() if k not in NAME_CONDITIONS and k != "isLive"}
    return DeleteRule(
        number, _strings(condition.get("matchesPrefix")), _strings(condition.get("matchesSuffix")), pattern,
        ", ".join(_condition_text(k, v) for k, v in sorted(others.items())),
    )  # fmt: skip


def _strings(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError("a list of strings")
    return tuple(value)


def _condition_text(name: str, value: Any) -> str:
    if name == "age":
        return f"age >= {int(value)} days"
    if name == "createdBefore":
        return f"created before {str(value)[:10]}"
    return f"{name} {str(value)[:40]}"


def reaches(rule: DeleteRule, prefix: str) -> bool:
    """Whether ``rule`` can delete objects whose names start with ``prefix`` (a folder: "" is the whole bucket).

    Only a prefix condition can rule that out: no listed prefix overlaps the folder. Suffix and pattern
    conditions are taken as reaching it (checkpoint files have many names: ``commit_success.txt``, ``.zarray``,
    chunk files), which is the safe answer for a warning.
    """
    if rule.prefixes is None:
        return True
    folder = f"{prefix.rstrip('/')}/" if prefix else ""
    return any(p.startswith(folder) or folder.startswith(p) for p in rule.prefixes)


def describe(rule: DeleteRule) -> str:
    """``Delete; age >= 7 days; prefixes tmp/``: the rule by its content, as the bucket's listing shows it."""
    parts = ["Delete"]
    if rule.when:
        parts.append(rule.when)
    if rule.prefixes is not None:
        parts.append("prefixes " + " ".join(rule.prefixes))
    if rule.suffixes is not None:
        parts.append("suffixes " + " ".join(rule.suffixes))
    if rule.pattern is not None:
        parts.append(f"pattern {rule.pattern}")
    if len(parts) == 1:
        parts.append("every object")
    return "; ".join(parts)
