"""What `pwdeploy check` found: each rule's verdict on one line of one file is a ``pwdeploy.finding.Finding``
whose ``where`` is ``FILE:LINE`` (``at``; line 0: the whole file or the job config), as compilers and ruff write
it. The text view (each finding as every finding prints, ``file:line: severity rule: message``, grouped by file,
most severe first) and the JSON view are two readings of the same list.

The text view of a whole repository stays short: a rule that fires on several lines of one file is printed once,
with the other lines after it; a rule of severity info that fires more than ``INFO_SHOWN`` times is one line
counting them; files not read for the same reason (notebooks, links out of a folder) are one note. The JSON view
lists every finding and note.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pwdeploy.finding import Finding
from pwdeploy.severity import SEVERITIES


def at(file: str, line: int) -> str:
    """A check finding's ``where``: the file as shown (relative to the working directory when under it), its line."""
    return f"{file}:{line}"


def place(finding: Finding) -> tuple[str, int]:
    """(file, line) of a check finding's ``where`` (``at``'s inverse: the line is after the last colon)."""
    file, _, line = finding.where.rpartition(":")
    return file, int(line)


def as_json(finding: Finding) -> dict[str, Any]:
    """The one shape, with the keys `check -o json` printed before it (``rule``, ``file``, ``line``: a contract)."""
    file, line = place(finding)
    return finding.as_json(rule="id") | {"file": file, "line": line}


INFO_SHOWN = 3  # an info rule with more findings than this is one line in the text view
SKIPS_SHOWN = 3  # files named in a note that groups the files skipped for one reason


def _rank(finding: Finding) -> tuple[int, int, str]:
    return SEVERITIES.index(finding.severity), place(finding)[1], finding.id


@dataclass(frozen=True)
class Report:
    """What `pwdeploy check` found in ``files`` (the sources it read), in order: by file, most severe first."""

    findings: list[Finding] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    ignored: int = 0  # findings silenced by ``# pwdeploy: ignore[rule]`` comments
    notes: list[str] = field(default_factory=list)  # what was not checked, and why
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file, why) of the notes about files not read

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    def by_file(self) -> dict[str, list[Finding]]:
        """Files with their findings, the file with the most severe finding first; in a file, by severity, line."""
        groups: dict[str, list[Finding]] = {}
        for finding in self.findings:
            groups.setdefault(place(finding)[0], []).append(finding)
        for members in groups.values():
            members.sort(key=_rank)
        return dict(sorted(groups.items(), key=lambda item: (_rank(item[1][0])[0], item[0])))

    def counts(self) -> dict[str, int]:
        return {severity: sum(f.severity == severity for f in self.findings) for severity in SEVERITIES}

    def as_json(self) -> dict[str, Any]:
        ordered = [f for members in self.by_file().values() for f in members]
        return {
            "files": self.files,
            "findings": [as_json(f) for f in ordered],
            "counts": self.counts(),
            "ignored": self.ignored,
            "notes": self.notes,
        }

    def lines(self, *, fixes: bool = True) -> list[str]:
        many = self._many_infos()
        out = self._note_lines()
        for members in self.by_file().values():
            out += _finding_lines([f for f in members if f.id not in many], fixes)
        for rule, found in many.items():
            files = len({place(f)[0] for f in found})
            out.append(
                f"info {rule}: {len(found)} findings in {files} file{'' if files == 1 else 's'}, the first at "
                f"{found[0].where}: {found[0].message} (-o json lists each)"
            )
            out += [f"    fix: {found[0].fix}"] if fixes else []
        out.append(self.summary())
        return out

    def _note_lines(self) -> list[str]:
        """The notes, those about files skipped for one reason in one line."""
        grouped: dict[str, list[str]] = {}
        for file, why in self.skipped:
            grouped.setdefault(why, []).append(file)
        grouped_notes = {f"{file}: {why}" for why, files in grouped.items() if len(files) > 1 for file in files}
        out = [f"note: {note}" for note in self.notes if note not in grouped_notes]
        for why, files in grouped.items():
            if len(files) > 1:
                more = f" and {len(files) - SKIPS_SHOWN} more" if len(files) > SKIPS_SHOWN else ""
                out.append(f"note: {len(files)} files, {why}: {', '.join(files[:SKIPS_SHOWN])}{more}")
        return out

    def _many_infos(self) -> dict[str, list[Finding]]:
        """Info rules with more than INFO_SHOWN findings, each with its findings in the text view's order."""
        infos: dict[str, list[Finding]] = {}
        for members in self.by_file().values():
            for finding in members:
                if finding.severity == "info":
                    infos.setdefault(finding.id, []).append(finding)
        return {rule: found for rule, found in infos.items() if len(found) > INFO_SHOWN}

    def summary(self) -> str:
        counts = self.counts()
        files = f"{len(self.files)} file{'' if len(self.files) == 1 else 's'}"
        if not self.files and not self.findings:
            return "pwdeploy check: read no file, so checked nothing"
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


def _finding_lines(members: list[Finding], fixes: bool) -> list[str]:
    """A file's findings, a rule's repeats in the file after its first (``also at lines ...``), each fix once."""
    out = []
    for first, repeats in _repeats(members):
        lines = ", ".join(str(place(f)[1]) for f in repeats)
        also = f" (also at line{'s' if len(repeats) > 1 else ''} {lines})" if repeats else ""
        head, *fix = first.lines(fix=fixes)
        out += [head + also, *fix]
    return out


def _repeats(members: list[Finding]) -> Iterator[tuple[Finding, list[Finding]]]:
    """(the first finding of a rule in a file, its later findings there), in the order of the first findings."""
    by_rule: dict[str, list[Finding]] = {}
    for finding in members:
        by_rule.setdefault(finding.id, []).append(finding)
    for found in by_rule.values():
        yield found[0], found[1:]
