"""Findings are data: what one rule saw on one object (an ``Observation`` of a ``Cause``), grouped into findings
(``pwdeploy.finding.Finding``: the cause's id, severity, where, the evidence as its message, fix and the cause's
source); causes.py orders them by severity and by what blocks first. Text and JSON are two views of the same list
(``Diagnosis``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from pwdeploy.finding import Finding
from pwdeploy.severity import Severity
from pwdeploy.text import evidence

# The stages of a job, in the order they block it: a job is queued, then created, then scheduled, then pulls
# images, then starts containers, then runs, then ends. Findings of one severity are ranked by their cause's stage.
Stage = Literal["queue", "create", "schedule", "image", "start", "run", "end"]

MAX_NAMES = 3  # object names listed in a grouped finding's `where`


class Observation(NamedTuple):
    """One rule's verdict on one object, before grouping. Observations with the same ``key`` (the cause and the
    stable part of the evidence, never counts or node names) on the same ``role`` become one finding."""

    cause: str
    severity: Severity
    role: str  # "head pod", "worker pod", "jobset", "workload", ...
    obj: str  # the object's name
    key: str
    evidence: str
    fix: str
    source: str


@dataclass(frozen=True)
class Cause:
    """One cause diagnose names, declared once, beside the rule that finds it (causes.py lists every row). ``id``
    is a contract: tests, scripts and `-o json` readers match on it; ``meaning`` is its line in docs/diagnose.md.
    ``severity`` and ``fix`` are the row's when they are fixed text (a fix may hold placeholders its rule fills
    in); None says that what the rule saw decides them, and the rule passes them to ``observe`` (a rule that sees
    more may pass them in place of the row's too). ``source``: the component's code or the public page that writes
    the texts the rule matches, or says what they mean (every finding names it)."""

    id: str
    stage: Stage
    meaning: str
    severity: Severity | None = None
    fix: str | None = None
    source: str = field(default="", kw_only=True)

    def __post_init__(self) -> None:
        if not self.source:
            raise ValueError(f"diagnose cause {self.id}: give the source its rule rests on (source=...)")

    def observe(
        self, role: str, obj: str, key: str, evidence: str, *, severity: Severity | None = None, fix: str | None = None
    ) -> Observation:
        severity = severity or self.severity
        fix = self.fix if fix is None else fix
        if severity is None or fix is None:
            raise ValueError(f"diagnose cause {self.id}: its rule gave no severity or fix, and its row has none")
        return Observation(self.id, severity, role, obj, key, evidence, fix, self.source)


def as_json(finding: Finding) -> dict[str, Any]:
    """The one shape, with the keys `diagnose -o json` printed before it (``cause``, ``evidence``: a contract)."""
    return finding.as_json(cause="id", evidence="message")


def group(observations: Iterable[Observation], totals: dict[str, int]) -> list[Finding]:
    """One finding per (cause, severity, role, key), ``12 of 16 worker pods: a, b, c (+9 more)``, in the order
    first seen (``causes.order`` ranks them); ``totals``: role -> how many objects of it the job has (its pods of a
    role, or its Jobs: ``worker job`` counts the Jobs, one per slice, never the pods)."""
    groups: dict[tuple[str, str, str, str], list[Observation]] = {}
    for obs in observations:
        groups.setdefault((obs.cause, obs.severity, obs.role, obs.key), []).append(obs)
    return [_finding(members, totals) for members in groups.values()]


def _finding(members: list[Observation], totals: dict[str, int]) -> Finding:
    first = members[0]
    names = sorted(dict.fromkeys(m.obj for m in members))
    listed = ", ".join(names[:MAX_NAMES]) + (f" (+{len(names) - MAX_NAMES:,} more)" if len(names) > MAX_NAMES else "")
    total = totals.get(first.role, 0)
    if len(names) == 1 and total <= 1:
        where = f"{first.role} {listed}"
    else:
        plural = first.role if first.role.endswith("s") else first.role + "s"
        where = f"{len(names):,} of {max(total, len(names)):,} {plural}: {listed}"
    return Finding(first.cause, first.severity, where, first.evidence, first.fix, first.source, len(names))


@dataclass(frozen=True)
class Diagnosis:
    job: str
    namespace: str
    summary: str  # one line: where the job is (waiting for admission, pulling, running N of M pods, succeeded)
    findings: list[Finding] = field(default_factory=list)
    requests: int = 0  # API requests the diagnosis sent
    notes: tuple[str, ...] = ()  # what could not be read (a Workload, a log): the findings may miss its causes

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    def as_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "namespace": self.namespace,
            "summary": self.summary,
            "findings": [as_json(f) for f in self.findings],
            "notes": list(self.notes),
        }

    def lines(self) -> list[str]:
        out = [f"job {self.job}  namespace {self.namespace}: {self.summary}"]
        if not self.findings:
            out.append("no findings" + (" in what could be read" if self.notes else ""))
        out += [""] if self.findings else []
        out += [line for f in self.findings for line in f.lines()]
        out += [""] if self.notes else []
        out += [f"note: {note}" for note in self.notes]
        return out


def quote(text: str, limit: int = 400) -> str:
    """Evidence as quoted: the text on one line, credential-looking values masked, made printable and shortened
    only when long (pwdeploy.text's rule)."""
    return '"' + evidence(str(text), limit) + '"'
