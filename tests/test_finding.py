"""One finding: one class, one shape (id, severity, where, message, fix, source), one JSON object and one text
rendering, whichever command reached it; each source names what its verdict rests on."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pwdeploy.cluster.diagnose.causes import ROWS
from pwdeploy.finding import Finding
from pwdeploy.preflight.gcs_evaluate import SOURCES
from pwdeploy.readiness import MODULES
from pwdeploy.report import PreflightRow, Status
from pwdeploy.validation.problems import RULES

PACKAGE = Path(__file__).resolve().parent.parent / "pwdeploy"
SHAPE = {"id", "severity", "where", "message", "fix", "source", "count"}


def test_one_class_is_named_finding() -> None:
    named = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.name == "Finding"
    ]
    assert named == ["finding.py"], named


def test_the_json_shape_and_kept_keys() -> None:
    finding = Finding("tpu-capacity", "error", "head pod p", '"0/5 nodes"', "wait", "kube-scheduler", 2)
    assert finding.as_json() == {
        "id": "tpu-capacity",
        "severity": "error",
        "where": "head pod p",
        "message": '"0/5 nodes"',
        "fix": "wait",
        "source": "kube-scheduler",
        "count": 2,
    }
    kept = finding.as_json(cause="id", evidence="message")
    assert set(kept) == SHAPE | {"cause", "evidence"} and (kept["cause"], kept["evidence"]) == (
        finding.id,
        '"0/5 nodes"',
    )
    bare = Finding("api-server", "error", "Pod/p: spec", "wrong").as_json()
    assert (bare["fix"], bare["source"]) == (None, None)  # nothing to do, nothing cited: null, not ""


def test_the_text_rendering() -> None:
    finding = Finding("init-order", "error", "train.py:4", "jax used before initialize()", "call it first", "src")
    assert finding.lines() == ["train.py:4: error init-order: jax used before initialize()", "    fix: call it first"]
    assert finding.lines(fix=False) == ["train.py:4: error init-order: jax used before initialize()"]
    assert Finding("x", "info", "w", "m").lines() == ["w: info x: m"]  # no fix, no fix line
    assert finding.line(20) == "train.py:4: error..."


def test_findings_are_values() -> None:
    one = Finding("a", "error", "w", "m", "f", "s")
    assert one == Finding("a", "error", "w", "m", "f", "s") and hash(one) == hash(
        Finding("a", "error", "w", "m", "f", "s")
    )
    assert one != Finding("a", "error", "w", "m", "f", "other")
    assert len({one, Finding("a", "error", "w", "m", "f", "s")}) == 1
    assert repr(one).startswith("Finding(id='a', severity='error', where='w'")


@pytest.mark.parametrize(
    ("status", "severity"),
    [(Status.FAILED, "error"), (Status.WARN, "warning"), (Status.NOT_VERIFIED, "warning"), (Status.OK, "info")],
)
def test_a_preflight_rows_severity_follows_its_status(status: Status, severity: str) -> None:
    row = PreflightRow("bucket", status, "gs://b", "detail", None, "src", ("storage.scratch",))
    assert isinstance(row, Finding) and row.severity == severity
    assert row != Finding("bucket", row.severity, "gs://b", "detail", "", "src")  # a row is more than its finding
    shown = row.as_json()
    assert set(shown) == SHAPE | {"location", "check", "detail", "status", "fields"}
    assert (shown["check"], shown["location"], shown["detail"], shown["status"]) == (
        "bucket",
        "gs://b",
        "detail",
        status.value,
    )


def test_every_source_names_what_it_rests_on() -> None:
    """A diagnose cause without a source cannot be declared; every readiness check, GCS row kind and validation
    rule has one."""
    assert all(row.source for row in ROWS)
    assert all(module.SOURCE for module in MODULES)
    assert all(SOURCES.values()) and all(RULES.values())
    from pwdeploy.cluster.diagnose.findings import Cause

    with pytest.raises(ValueError, match="x-cause: give the source"):
        Cause("x-cause", "run", "meaning")
