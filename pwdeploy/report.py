"""The preflight report: one row per check, whatever its source (GCS, images, the cluster), a table for people and a
JSON document for scripts. A row is a finding (``pwdeploy.finding.Finding``) with the row's status and the config
fields it is about."""

from __future__ import annotations

import enum
import textwrap
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pwdeploy.finding import Finding
from pwdeploy.severity import Severity


class Status(enum.StrEnum):
    OK = "ok"
    WARN = "warn"
    FAILED = "failed"
    NOT_VERIFIED = "not verified"  # the backend could not answer; never counted as ok


# A row's severity, from its status: "not verified" is never counted as ok, and never fails preflight.
SEVERITY: dict[Status, Severity] = {
    Status.FAILED: "error",
    Status.WARN: "warning",
    Status.NOT_VERIFIED: "warning",
    Status.OK: "info",
}


class PreflightRow(Finding):
    """One row: a finding whose ``id`` is the row's kind (credentials, bucket, permissions, lifecycle, retention,
    region, probe, placement (GCS); image; a readiness check's name), ``where`` what was looked at (gs://bucket,
    gs://bucket/prefix, an image reference, the cluster's context), ``message`` the detail; with the row's
    ``status`` (its severity follows from it) and the config ``fields`` it is about."""

    __slots__ = ("fields", "status")
    _FIELDS: ClassVar[tuple[str, ...]] = (*Finding._FIELDS, "status", "fields")

    def __init__(
        self,
        id: str,
        status: Status,
        where: str,
        message: str,
        fix: str | None = None,
        source: str = "",
        fields: tuple[str, ...] = (),
    ) -> None:
        super().__init__(id, SEVERITY[status], where, message, fix or "", source)
        self.status = status
        self.fields = fields

    def as_json(self, **kept: str) -> dict[str, Any]:
        """The one shape, with the keys `preflight -o json` printed before it (``location``, ``check``,
        ``detail``, ``status``, ``fields``: a contract)."""
        found = super().as_json(location="where", check="id", detail="message", **kept)
        return found | {"status": str(self.status), "fields": list(self.fields)}


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

    def as_json(self) -> dict[str, Any]:
        return {
            "failed": self.failed,
            "principal": self.principal,
            "summary": self.counts(),
            "checks": [r.as_json() for r in self.results],
            "notes": list(self.notes),
        }

    def format_table(self, width: int = 120) -> str:
        if not self.results:
            return "\n".join(["No checks ran: nothing to check.", *self.notes])
        header = ("LOCATION", "CHECK", "STATUS", "DETAIL")
        rows = [(_label(r), r.id, str(r.status), r.message) for r in self.results]
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
    return f"{result.where} ({names})" if names else result.where
