"""`pwdeploy validate` and validate_files: an empty result means valid, and nothing unchecked passes."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from pwdeploy.cli import cli
from pwdeploy.errors import ConfigError
from pwdeploy.validation.validate import validate_files

CONFIG_MAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"


def test_validate_files_returns_problem_lines(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(CONFIG_MAP)
    bad.write_text(CONFIG_MAP.replace("name: x", "name: X_1"))
    assert validate_files([good]) == []
    problems = validate_files([good, bad])
    assert len(problems) == 1 and problems[0].where == f"{bad}: ConfigMap/X_1: metadata.name"
    assert (problems[0].id, problems[0].severity) == ("api-server", "error")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"---\n---\n", "holds no Kubernetes objects"),
        (b"", "holds no Kubernetes objects"),
        ("kind: d\xe9mo\n".encode("latin-1"), "is not UTF-8 text (byte at offset 7)"),
    ],
)
def test_files_that_hold_nothing_checkable_raise(tmp_path: Path, text: bytes, message: str) -> None:
    path = tmp_path / "m.yaml"
    path.write_bytes(text)
    with pytest.raises(ConfigError) as info:
        validate_files([path])
    assert str(info.value) == f"{path}: {message}" and info.value.source == str(path) and info.value.field is None


def test_no_files_or_a_directory_raise(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no manifest files given"):
        validate_files([])
    with pytest.raises(ConfigError, match="is a directory"):
        validate_files([tmp_path])


def test_validate_command_counts_objects(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(CONFIG_MAP + "---\n" + CONFIG_MAP.replace("name: x", "name: y"))
    result = runner.invoke(cli, ["validate", str(path)])
    assert result.exit_code == 0 and result.stdout == "ok: 2 objects valid\n", result.output
    empty = tmp_path / "empty.yaml"
    empty.write_text("---\n")
    result = runner.invoke(cli, ["validate", str(empty)])
    assert result.exit_code == 2 and f"error: {empty}: holds no Kubernetes objects" in result.stderr
