"""A finding: one verdict with a severity, whichever command reached it. A check rule's on a line of the program,
a diagnose cause's on the cluster's objects, a preflight row's on a bucket, an image or the cluster, a validation
rule's on a field of a manifest: each is one ``Finding`` of one shape (id, severity, where, message, fix,
source), one JSON object (``as_json``) and one text rendering (``lines``, ``line``), as compilers and linters print
theirs: ``where: severity id: message``, then the fix indented. A room adds only what it alone knows (a preflight
row's status and the config fields it is about: ``report.PreflightRow``), and the JSON keys each command printed
before this shape, which scripts read (docs/output.md lists them).

A plain class rather than a dataclass: a validation finding is made on `render`'s path, and a dataclass costs most
of a millisecond to build at import."""

from __future__ import annotations

from typing import Any, ClassVar

from pwdeploy.severity import SEVERITIES, Severity
from pwdeploy.text import printable

FIX_INDENT = "    "


class Finding:
    """``id`` is a contract (scripts, tests and ignore comments match on it): a check rule's, a diagnose cause's, a
    preflight row's kind, a validation rule's. ``where`` is as shown: ``train.py:12``, ``16 of 16 worker pods: a,
    b, c (+13 more)``, ``gs://bucket/scratch``, ``job.yaml: JobSet/demo: spec.replicatedJobs[0].name``.
    ``message`` says what was seen and why; ``fix`` what to do ("" when there is nothing to do, or the message
    says it); ``source`` the public page or code the verdict rests on. ``count``: the objects or lines it was seen
    on, when one finding stands for several."""

    __slots__ = ("count", "fix", "id", "message", "severity", "source", "where")
    _FIELDS: ClassVar[tuple[str, ...]] = (
        "id",
        "severity",
        "where",
        "message",
        "fix",
        "source",
        "count",
    )  # eq, hash, repr

    def __init__(
        self,
        id: str,
        severity: Severity,
        where: str,
        message: str,
        fix: str = "",
        source: str = "",
        count: int = 1,
    ) -> None:
        self.id = id
        self.severity: Severity = severity
        self.where = where
        self.message = message
        self.fix = fix
        self.source = source
        self.count = count

    def _key(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._FIELDS)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._FIELDS)
        return f"{type(self).__name__}({fields})"

    def as_json(self, **kept: str) -> dict[str, Any]:
        """The one JSON shape (``fix`` and ``source`` null when there is none); ``kept``: keys a command printed
        before this shape, which scripts read, each naming the field it holds (``cause="id"``)."""
        found = {
            "id": self.id,
            "severity": self.severity,
            "where": self.where,
            "message": self.message,
            "fix": self.fix or None,
            "source": self.source or None,
            "count": self.count,
        }
        return found | {key: found[name] for key, name in kept.items()}

    def head(self) -> str:
        """The finding's first line: ``train.py:12: error init-order: ...``; a message over several lines (code
        quoted as written) reads as one, where the JSON keeps it as it is."""
        message = " ".join(part.strip() for part in self.message.splitlines())
        return f"{self.where}: {self.severity} {self.id}: {message}"

    def lines(self, *, fix: bool = True) -> list[str]:
        """The text rendering: the head line, then ``    fix: ...`` (with ``fix`` and when there is one)."""
        return [self.head(), f"{FIX_INDENT}fix: {self.fix}"] if fix and self.fix else [self.head()]

    def line(self, width: int = 200) -> str:
        """The head line made printable, on one line and at most ``width`` characters (status's short list)."""
        return printable(self.head(), width, one_line=True)


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one finding as every command's ``-o json`` prints it (``pwdeploy schema
    --finding``): the one shape's keys, each required; the keys a command kept from before (docs/output.md) are
    allowed beside them."""
    text, or_null = {"type": "string"}, {"type": ["string", "null"]}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "pwdeploy finding",
        "description": "One finding of check, diagnose (and status), preflight or validate.",
        "type": "object",
        "required": list(Finding._FIELDS),
        "properties": {
            "id": text | {"minLength": 1, "description": "the rule, cause or row kind that found it (a contract)"},
            "severity": {"enum": list(SEVERITIES), "description": "most severe first: error, warning, info"},
            "where": text | {"description": "where it was seen, as shown"},
            "message": text | {"description": "what was seen and why it matters"},
            "fix": or_null | {"description": "what to do; null when there is nothing to do"},
            "source": or_null | {"description": "the public page or code the verdict rests on"},
            "count": {"type": "integer", "minimum": 1, "description": "the objects or lines it stands for"},
        },
        "additionalProperties": True,
    }
