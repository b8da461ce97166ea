"""Findings are data: one rule's verdict on one line of one file (rule, severity, file, line, message, fix, source).
The text view (``file:line: severity rule: message``, grouped by file, most severe first, as compilers and ruff
print them) and the JSON view are two readings of the same list."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pwdeploy.severity import SEVERITIES, Severity


@dataclass(frozen=True)
class Finding:
    rule: str  # the rule's stable id (a contract: `-o json` readers and ignore comments match on it)
    severity: Severity
    file: str  # as shown: relative to the working directory when under it
    line: int  # 1-based; 0 for a finding about the whole file or the job config
    message: str  # what and why, quoting the code
    fix: str
    source: str  # the public page or code the rule rests on

    def as_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "file": self.file,
            "line": self.line,
            "message": self.message,
            "fix": self.fix,
            "source": self.source,
        }

    def line_text(self) -> str:
        return f"{self.file}:{self.line}: {self.severity} {self.rule}: {self.message}"


def _rank(finding: Finding) -> tuple[int, int, str]:
    return SEVERITIES.index(finding.severity), finding.line, finding.rule


@dataclass(frozen=True)
class Report:
    """What `pwdeploy check` found in ``files`` (the sources it read), in order: by file, most severe first."""

    findings: list[Finding] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    ignored: int = 0  # findings silenced by ``# pwdeploy: ignore[rule]`` comments
    notes: list[str] = field(default_factory=list)  # what was not checked, and why

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    def by_file(self) -> dict[str, list[Finding]]:
        """Files with their findings, the file with the most severe finding first; in a file, by severity, line."""
        groups: dict[str, list[Finding]] = {}
        for finding in self.findings:
            groups.setdefault(finding.file, []).append(finding)
        for members in groups.values():
            members.sort(key=_rank)
        return dict(sorted(groups.items(), key=lambda item: (_rank(item[1][0])[0], item[0])))

    def counts(self) -> dict[str, int]:
        return {severity: sum(f.severity == severity for f in self.findings) for severity in SEVERITIES}

    def as_json(self) -> dict[str, Any]:
        ordered = [f for members in self.by_file().values() for f in members]
        return {
            "files": self.files,
            "findings": [f.as_json() for f in ordered],
            "counts": self.counts(),
            "ignored": self.ignored,
            "notes": self.notes,
        }

    def lines(self, *, fixes: bool = True) -> list[str]:
        out = [f"note: {note}" for note in self.notes]
        for members in self.by_file().values():
            for finding in members:
                out.append(finding.line_text())
                if fixes:
                    out.append(f"    fix: {finding.fix}")
        out.append(self.summary())
        return out

    def summary(self) -> str:
        counts = self.counts()
        files = f"{len(self.files)} file{'' if len(self.files) == 1 else 's'}"
        if not self.findings:
            return f"pwdeploy check: {files}, no findings" + (f" ({self.ignored} ignored)" if self.ignored else "")
        parts = ", ".join(
            f"{n} {severity}{'' if n == 1 or severity == 'info' else 's'}" for severity, n in counts.items() if n
        )
        ignored = f", {self.ignored} ignored" if self.ignored else ""
        return f"pwdeploy check: {files}: {parts}{ignored}"


def quote(text: str, limit: int = 120) -> str:
    """Code as quoted in a message: one line, shortened only when long."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
