"""The preflight report: one row per check, whatever its source (GCS, images, ...), a table for people and a JSON
document for scripts."""

from __future__ import annotations

import enum
import textwrap
from dataclasses import dataclass, field
from typing import Any


class Status(enum.StrEnum):
    OK = "ok"
    WARN = "warn"
    FAILED = "failed"
    NOT_VERIFIED = "not verified"  # the backend could not answer; never counted as ok


@dataclass(frozen=True)
class PreflightRow:
    location: str  # what was checked: gs://bucket, gs://bucket/prefix, an image reference
    fields: tuple[str, ...]  # the config fields this row is about
    check: str  # credentials, bucket, permissions, lifecycle, region, probe (GCS); image
    status: Status
    detail: str
    fix: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "location": self.location,
            "fields": list(self.fields),
            "check": self.check,
            "status": str(self.status),
            "detail": self.detail,
            "fix": self.fix,
        }


@dataclass(frozen=True)
class PreflightReport:
    results: tuple[PreflightRow, ...]
    principal: str | None = None  # who the checks ran as
    notes: tuple[str, ...] = field(default=())

    @property
    def failed(self) -> bool:
        return any(r.status is Status.FAILED for r in self.results)

    def counts(self) -> dict[str, int]:
        return {str(s): sum(r.status is s for r in self.results) for s in Status}

    def combine(self, *others: PreflightReport) -> PreflightReport:
        """One report: the rows in order, the first principal given, the notes without repeats."""
        parts = (self, *others)
        return PreflightReport(
            tuple(row for part in parts for row in part.results),
            next((part.principal for part in parts if part.principal), None),
            tuple(dict.fromkeys(note for part in parts for note in part.notes)),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "failed": self.failed,
            "principal": self.principal,
            "summary": self.counts(),
            "checks": [r.to_json() for r in self.results],
            "notes": list(self.notes),
        }

    def format_table(self, width: int = 120) -> str:
        if not self.results:
            return "\n".join(["No checks ran: nothing to check.", *self.notes])
        header = ("LOCATION", "CHECK", "STATUS", "DETAIL")
        rows = [(_label(r), r.check, str(r.status), r.detail) for r in self.results]
        # Long locations (image references) get a line of their own rather than squeezing the details.
        loc_w = min(max(len(row[0]) for row in (header, *rows)), max(len(header[0]), width // 3))
        chk_w = max(len(h) for h in (header[1], *(row[1] for row in rows)))
        sts_w = max(len(h) for h in (header[2], *(row[2] for row in rows)))
        indent = loc_w + chk_w + sts_w + 6
        detail_w = max(30, width - indent)
        lines = [_row(header, loc_w, chk_w, sts_w)]
        for result, row in zip(self.results, rows, strict=True):
            location = row[0]
            if len(location) > loc_w:
                lines.append(location)
                location = ""
            wrapped = textwrap.wrap(row[3], detail_w, break_on_hyphens=False, break_long_words=False) or [""]
            lines.append(_row((location, row[1], row[2], wrapped[0]), loc_w, chk_w, sts_w))
            lines.extend(" " * indent + more for more in wrapped[1:])
            if result.fix:
                fix_lines = textwrap.wrap(
                    f"fix: {result.fix}",
                    detail_w,
                    subsequent_indent="     ",
                    break_on_hyphens=False,
                    break_long_words=False,
                )
                lines.extend(" " * indent + text for text in fix_lines)
        counts = self.counts()
        summary = ", ".join(f"{n} {name}" for name, n in counts.items() if n)
        lines.append("")
        lines.append(f"{summary}" + (f"; checked as {self.principal}" if self.principal else ""))
        lines.extend(line for note in self.notes for line in textwrap.wrap(note, width))
        return "\n".join(lines)


def _row(cells: tuple[str, str, str, str], loc_w: int, chk_w: int, sts_w: int) -> str:
    return f"{cells[0]:<{loc_w}}  {cells[1]:<{chk_w}}  {cells[2]:<{sts_w}}  {cells[3]}".rstrip()


def _label(result: PreflightRow) -> str:
    names = ", ".join(f.removeprefix("storage.") for f in result.fields)
    return f"{result.location} ({names})" if names else result.location
