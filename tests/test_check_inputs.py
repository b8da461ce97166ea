"""`pwdeploy check` given what a hurried user types, as the installed CLI runs it: a YAML named as a source, a
notebook, a requirements file, an empty folder, a valid if/elif chain of 1,000 branches (a deep syntax tree), valid
Python Python reads differently from plain UTF-8 (a BOM, a PEP 263 coding line), a module over the size read, a
module linked from outside the folder, and a symlink loop.
Each row: what is on disk, the command, the exit code, what the output must say and must never show."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

from pwdeploy.check.sources import MAX_BYTES

SECRET = "root:$6$planted-hash-never-shown"  # what a linked file outside the folder holds: never printed
CPU = "import os\nworkers = os.cpu_count()\n"  # one finding (cpu-count, a warning) on line 2


def installed_cli() -> list[str]:
    script = Path(sys.executable).with_name("pwdeploy")
    return [str(script)] if script.exists() else [sys.executable, "-m", "pwdeploy"]


class Case(NamedTuple):
    name: str
    setup: Callable[[Path], list[str]]  # writes the files under the folder; the arguments after `check`
    code: int
    says: tuple[str, ...]  # in the output (stdout and stderr)
    rules: tuple[str, ...] | None = None  # with -o json: the findings' rules, in order (None: not asked)


def _yaml(folder: Path) -> list[str]:
    (folder / "job.yaml").write_text("name: demo\nmain:\n  command: [python3, train.py]\n", encoding="utf-8")
    return ["job.yaml"]


def _notebook_alone(folder: Path) -> list[str]:
    (folder / "explore.ipynb").write_text(json.dumps({"cells": [], "nbformat": 4}), encoding="utf-8")
    return ["explore.ipynb"]


def _notebook_in_folder(folder: Path) -> list[str]:
    (folder / "src").mkdir()
    (folder / "src" / "explore.ipynb").write_text(json.dumps({"cells": [], "nbformat": 4}), encoding="utf-8")
    (folder / "src" / "train.py").write_text(CPU, encoding="utf-8")
    return ["src", "-o", "json"]


def _requirements(folder: Path) -> list[str]:
    (folder / "requirements.txt").write_text("jax==0.10.2\n", encoding="utf-8")
    return ["requirements.txt"]


def _empty(folder: Path) -> list[str]:
    (folder / "empty").mkdir()
    return ["empty"]


def _bom(folder: Path) -> list[str]:
    (folder / "train.py").write_bytes(b"\xef\xbb\xbf" + CPU.encode())
    return ["train.py", "-o", "json"]


def _coding(encoding: str, text: str) -> Callable[[Path], list[str]]:
    def setup(folder: Path) -> list[str]:
        source = f"# -*- coding: {encoding} -*-\nimport os\nworkers = os.cpu_count()\nNAME = '{text}'\n"
        (folder / "train.py").write_bytes(source.encode(encoding))
        return ["train.py", "-o", "json"]

    return setup


def _large(folder: Path) -> list[str]:
    (folder / "src").mkdir()
    rows = "".join(f"    {n},\n" for n in range(MAX_BYTES // 10))
    (folder / "src" / "table.py").write_text(f"TABLE = [\n{rows}]\n", encoding="utf-8")
    (folder / "src" / "train.py").write_text(CPU, encoding="utf-8")
    return ["src", "-o", "json"]


def _outside(folder: Path) -> Path:
    outside = folder / "outside"
    outside.mkdir()
    (outside / "shadow.py").write_text(f"{SECRET}\n", encoding="utf-8")  # not Python: a read would quote it
    return outside / "shadow.py"


def _link_in_folder(folder: Path) -> list[str]:
    target = _outside(folder)
    (folder / "job").mkdir()
    (folder / "job" / "train.py").write_text(CPU, encoding="utf-8")
    (folder / "job" / "helpers.py").symlink_to(target)
    return ["job", "-o", "json"]


def _folder_link(folder: Path) -> list[str]:
    target = _outside(folder)
    (folder / "job").mkdir()
    (folder / "job" / "train.py").write_text(CPU, encoding="utf-8")
    (folder / "job" / "vendor").symlink_to(target.parent)
    return ["job", "-o", "json"]


def _link_imported(folder: Path) -> list[str]:
    target = _outside(folder)
    (folder / "job").mkdir()
    (folder / "job" / "train.py").write_text("import helpers\n" + CPU, encoding="utf-8")
    (folder / "job" / "helpers.py").symlink_to(target)
    return ["job/train.py", "-o", "json"]


def _loop_in_folder(folder: Path) -> list[str]:
    (folder / "job").mkdir()
    (folder / "job" / "train.py").write_text(CPU, encoding="utf-8")
    (folder / "job" / "a.py").symlink_to(folder / "job" / "b.py")
    (folder / "job" / "b.py").symlink_to(folder / "job" / "a.py")
    return ["job"]


def _loop_named(folder: Path) -> list[str]:
    (folder / "self.py").symlink_to(folder / "self.py")
    return ["self.py"]


def _chain(branches: int, at_end: str) -> str:
    """A valid if/elif chain of ``branches`` branches (each elif is nested in the one before: a deep tree), with
    ``at_end`` in its last branch."""
    lines = ["x = 0", "if x == 0:", "    pass"]
    for i in range(1, branches):
        lines += [f"elif x == {i}:", "    pass" if i < branches - 1 else f"    {at_end}"]
    return "\n".join(lines) + "\n"


def _elif_1000(folder: Path) -> list[str]:
    (folder / "train.py").write_text("import os\n" + _chain(1000, "workers = os.cpu_count()"), encoding="utf-8")
    return ["train.py", "-o", "json"]


def _elif_2900(folder: Path) -> list[str]:
    (folder / "train.py").write_text("import os\n" + _chain(2900, "workers = os.cpu_count()"), encoding="utf-8")
    return ["train.py", "-o", "json"]


CASES = [
    Case("if-elif-1000-branches", _elif_1000, 0, (), ("cpu-count",)),
    Case("if-elif-2900-branches", _elif_2900, 0, (), ("cpu-count",)),  # about as deep as Python compiles
    Case("yaml-as-source", _yaml, 2, ("job.yaml is YAML, not a Python source", "pwdeploy check -f job.yaml")),
    Case("notebook-alone", _notebook_alone, 2, ("nothing to check", "explore.ipynb: a notebook: not read")),
    Case("notebook-in-folder", _notebook_in_folder, 0, ("explore.ipynb: a notebook: not read",), ("cpu-count",)),
    Case("requirements", _requirements, 2, ("nothing to check", "requirements.txt: a requirements file: not read")),
    Case("empty-folder", _empty, 2, ("nothing to check: no .py file in empty",)),
    Case("utf8-bom", _bom, 0, (), ("cpu-count",)),
    Case("latin-1-coding", _coding("latin-1", "caf\xe9"), 0, (), ("cpu-count",)),
    Case("cp1252-coding", _coding("cp1252", "\u201cquoted\u201d"), 0, (), ("cpu-count",)),
    Case(
        "over-2-MiB", _large, 0, ("table.py: 2.", "MiB, over the 2 MiB one module may have: not read"), ("cpu-count",)
    ),
    Case("link-out-of-folder", _link_in_folder, 0, ("helpers.py: a link out of",), ("cpu-count",)),
    Case("folder-link-out", _folder_link, 0, ("vendor: a link out of",), ("cpu-count",)),
    Case("link-out-imported", _link_imported, 0, ("helpers.py: a link out of",), ("cpu-count",)),
    Case("symlink-loop-in-folder", _loop_in_folder, 2, ("a symlink loop", "fix or remove the link")),
    Case("symlink-loop-named", _loop_named, 2, ("self.py: a symlink loop",)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_check_reads_what_a_user_names_as_it_is(tmp_path: Path, case: Case) -> None:
    args = case.setup(tmp_path)
    done = subprocess.run(
        [*installed_cli(), "check", *args], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == case.code, output
    for text in case.says:
        assert text in output, output
    assert "Traceback" not in output
    assert SECRET not in output and "planted-hash" not in output
    if case.rules is not None:
        report = json.loads(done.stdout)
        assert [f["rule"] for f in report["findings"]] == list(case.rules), output
        assert "syntax-error" not in output


def test_a_rule_that_runs_out_of_frames_is_a_note_and_the_other_rules_still_run(tmp_path: Path) -> None:
    """Past the room the check gives a tree (deeper than Python itself compiles), a rule's RecursionError is a note
    naming the file and the rule, not an internal error; here a planted rule that never stops recursing."""
    from pwdeploy.check.rule import Hit, Rule
    from pwdeploy.check.run import Reader

    def endless(module: object, depth: int = 0) -> list[Hit]:
        return endless(module, depth + 1)

    (tmp_path / "train.py").write_text(CPU, encoding="utf-8")
    reader = Reader(tmp_path, entry=True)
    planted = Rule("planted", 0, "warning", "", "", "", visit=endless)
    reader.rules = [planted, *reader.rules]
    reader.add(tmp_path / "train.py", "train", entry=True)
    assert reader.notes == ["train.py: nested too deeply for rule planted, which was not run on it"]
    assert [f.id for f in reader.findings] == ["cpu-count"]
