"""A diagnose cause is one row: its id is written once in pwdeploy, in the ``Cause`` row beside the rule that finds
it, and the registry (causes.py) lists every row once, stage by stage."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

import pwdeploy.cluster.diagnose as diagnose
from pwdeploy.cluster.diagnose.causes import CAUSES, ROWS
from pwdeploy.cluster.diagnose.findings import Cause, Observation

PACKAGE = Path(__file__).resolve().parent.parent / "pwdeploy"
SOURCES = {path: path.read_text(encoding="utf-8") for path in sorted(PACKAGE.rglob("*.py"))}
# Quoted strings that spell a cause id but mean something else, by the code around them.
OTHER_MEANINGS = {
    '.get("unschedulable")': "a Node's spec.unschedulable field",
    'Check("tpu-capacity"': "the cluster readiness check of that name",
}


@cache
def row_sites() -> dict[str, list[tuple[Path, int]]]:
    """id -> where a ``Cause("<id>", ...)`` call writes it (file, line)."""
    sites: dict[str, list[tuple[Path, int]]] = {}
    for path, text in SOURCES.items():
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Cause":
                first = node.args[0] if node.args else None
                assert isinstance(first, ast.Constant) and isinstance(first.value, str), f"{path}:{node.lineno}"
                sites.setdefault(first.value, []).append((path, first.lineno))
    return sites


def quoted(cause: str) -> list[tuple[Path, int]]:
    """Where the package's source holds ``cause`` as a quoted string, but for OTHER_MEANINGS."""
    found = []
    for path, text in SOURCES.items():
        lines = text.splitlines()
        for match in re.finditer(rf"""(["']){re.escape(cause)}\1""", text):
            line = text.count("\n", 0, match.start()) + 1
            if not any(other in lines[line - 1] for other in OTHER_MEANINGS):
                found.append((path, line))
    return found


@pytest.mark.parametrize("cause", CAUSES)
def test_a_cause_id_is_written_once_in_pwdeploy_in_its_row(cause: str) -> None:
    (row,) = row_sites()[cause]
    assert quoted(cause) == [row], f"{cause} is written outside its row: use the row ({row[0].name}:{row[1]})"


def test_the_scan_finds_an_id_written_outside_its_row() -> None:
    planted = 'if finding.id == "tpu-capacity":\n'
    SOURCES[PACKAGE / "planted.py"] = planted
    try:
        assert (PACKAGE / "planted.py", 1) in quoted("tpu-capacity")
    finally:
        del SOURCES[PACKAGE / "planted.py"]


def rule_module_rows() -> list[Cause]:
    """Every Cause a module of pwdeploy.cluster.diagnose binds to a name (a row imported elsewhere counts once)."""
    rows: dict[int, Cause] = {}
    for info in pkgutil.iter_modules(diagnose.__path__, f"{diagnose.__name__}."):
        module = importlib.import_module(info.name)
        rows.update({id(v): v for v in vars(module).values() if isinstance(v, Cause)})
    return list(rows.values())


def test_every_row_is_in_the_registry_exactly_once() -> None:
    assert [row for row, times in Counter(ROWS).items() if times > 1] == []
    assert sorted(r.id for r in rule_module_rows()) == sorted(r.id for r in ROWS)
    assert all(any(row is listed for listed in ROWS) for row in rule_module_rows())
    assert sum(len(sites) for sites in row_sites().values()) == len(ROWS)  # no row made outside a module's name


def test_the_registry_lists_its_rows_stage_by_stage_in_ranking_order() -> None:
    assert [row.id for row in ROWS] == list(CAUSES)


def test_an_observation_takes_the_rows_severity_and_fix_unless_the_rule_says_otherwise() -> None:
    row = Cause("x-cause", "run", "meaning", severity="error", fix="the fix", source="src")
    assert row.observe("head pod", "p", "k", "seen") == Observation(
        "x-cause", "error", "head pod", "p", "k", "seen", "the fix", "src"
    )
    seen = row.observe("head pod", "p", "k", "seen", severity="warning", fix="another")
    assert (seen.severity, seen.fix) == ("warning", "another")
    with pytest.raises(ValueError, match="x-cause"):
        Cause("x-cause", "run", "meaning", source="src").observe("head pod", "p", "k", "seen", fix="f")
