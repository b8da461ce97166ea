"""The field table, the cross-field checks and the typed model cannot disagree without an error naming the field."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from pwdeploy.config import constraints as config_constraints
from pwdeploy.config import load
from pwdeploy.config.agreement import ModelMismatch, disagreements
from pwdeploy.config.constraints import RESOLVED, ConstraintMistake, Inputs, apply_constraint, unknown_inputs
from pwdeploy.config.fields import BY_PATH, FIELDS, SECTIONS, Field, Kind
from pwdeploy.config.model import LOADER_FIELDS, SECTION_MODELS, JobConfig

VALUES: dict[str, Any] = {
    "name": "demo",
    "tpu.type": "v5p-8",
    "main.image": "img/train:1",
    "main.command": "python3 train.py",
    "storage.scratch": "gs://bucket/scratch",
}
EXTRA_ROW = Field("tpu.spare_chips", Kind.INT, 0, "a field added to the table only")


def _paths(*extra: str) -> list[str]:
    return [*(f.path for f in FIELDS), *extra]


def test_the_shipped_table_and_model_agree() -> None:
    assert disagreements(_paths(), SECTION_MODELS, JobConfig, RESOLVED, LOADER_FIELDS) == []
    assert unknown_inputs(config_constraints.constraints(None, Path())) == []


def test_a_row_without_its_tuple_field_is_named() -> None:
    problems = disagreements(_paths(EXTRA_ROW.path), SECTION_MODELS, JobConfig, RESOLVED, LOADER_FIELDS)
    assert len(problems) == 1
    assert "tpu.spare_chips" in problems[0] and "TpuConfig" in problems[0]


def test_a_tuple_field_without_its_row_is_named() -> None:
    class LocalWithMore(NamedTuple):
        devices: int | None
        compile_cache: str
        hlo_dir: Path
        cores: int

    models = {**SECTION_MODELS, "local": LocalWithMore}
    problems = disagreements(_paths(), models, JobConfig, RESOLVED, LOADER_FIELDS)
    assert problems == [
        "LocalWithMore.cores (pwdeploy/config/model.py) has no row local.cores in pwdeploy/config/fields.py: "
        "add the row, or it is never set"
    ]


def test_a_row_in_a_section_the_model_lacks_is_named() -> None:
    problems = disagreements(_paths("capacity.mode"), SECTION_MODELS, JobConfig, RESOLVED, LOADER_FIELDS)
    assert problems == ["config field capacity.mode: no section 'capacity' in pwdeploy/config/model.py SECTION_MODELS"]


def test_the_import_time_check_fails_for_a_row_without_its_tuple_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(load, "FIELDS", (*FIELDS, EXTRA_ROW))
    with pytest.raises(ModelMismatch, match=r"tpu\.spare_chips has no field 'spare_chips' in TpuConfig"):
        load._check_model()


def test_a_loaded_row_is_never_dropped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Past the import check, building still refuses a value the model has no place for (it used to vanish)."""
    monkeypatch.setattr(load, "FIELDS", (*FIELDS, EXTRA_ROW))
    monkeypatch.setitem(SECTIONS, "tpu", (*SECTIONS["tpu"], EXTRA_ROW))  # the one dict load reads too
    with pytest.raises(TypeError, match="spare_chips"):
        load.build({**VALUES, "tpu.spare_chips": 2}, installed_jax="0.10.2", base_dir=tmp_path)


def test_a_constraint_naming_a_misspelt_path_fails_the_import_time_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """A misspelt input would make the loader skip the check for good (it runs only when its inputs parsed)."""
    table = config_constraints.constraints(None, Path())
    monkeypatch.setattr(load, "constraints", lambda *_: [*table, (("main.cpus",), lambda p: None)])
    with pytest.raises(ModelMismatch, match=r"main\.cpus"):
        load._check_model()


def test_a_constraint_reading_a_path_it_did_not_name_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def reads_more(parsed: Inputs) -> None:
        if parsed["main.memory"] == "100Gi":
            raise AssertionError("read a value it did not name")

    table = config_constraints.constraints("0.10.2", tmp_path)
    monkeypatch.setattr(load, "constraints", lambda *_: [*table, (("main.cpu",), reads_more)])
    with pytest.raises(ConstraintMistake, match=r"reads 'main\.memory' but names only main\.cpu"):
        load.build(VALUES, installed_jax="0.10.2", base_dir=tmp_path)


def test_a_constraint_may_set_only_what_it_names_or_resolves() -> None:
    parsed = {"main.cpu": "8", "main.memory": "16Gi"}
    assert apply_constraint(("main.cpu",), lambda p: {"main.cpu": "9"}, parsed) == {"main.cpu": "9"}
    with pytest.raises(ConstraintMistake, match=r"main\.memory"):
        apply_constraint(("main.cpu",), lambda p: {"main.memory": "1Gi"}, parsed)


def test_every_path_spelt_in_the_constraints_is_a_field_or_resolved() -> None:
    """Paths written in the checks' source (error fields, reads, loops) exist, even on branches no test takes."""
    source = Path(config_constraints.__file__).read_text(encoding="utf-8")
    dotted = re.compile(r"([a-z_]+)\.[a-z_]+")
    spelt: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            if isinstance(node.value, ast.Name) and node.value.id == "parsed":
                spelt.add(str(node.slice.value))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = dotted.fullmatch(node.value)
            if match and match.group(1) in SECTIONS:
                spelt.add(node.value)
    assert len(spelt) > 30  # the scan finds what the checks read
    assert sorted(path for path in spelt if path not in BY_PATH and path not in RESOLVED) == []
