"""Files and answers nested deeper than Python's parsers recurse (RecursionError) are clear errors, or ignored
where a cache is read, never an internal error."""

from __future__ import annotations

from pathlib import Path

import pytest

from pwdeploy.errors import ConfigError
from pwdeploy.images.lock import read_lock
from pwdeploy.kube.answers import Answer, BadAnswer, json_object
from pwdeploy.validation.files import load_documents

DEEP = "[" * 100_000 + "]" * 100_000


def test_a_deep_lock_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "pwdeploy-lock.json"
    path.write_text(DEEP)
    with pytest.raises(ConfigError, match=f"cannot read the lock file {path}: nested too deep"):
        read_lock(path)


@pytest.mark.parametrize("name", ["deep.json", "deep.yaml"])
def test_deep_objects_to_validate_are_a_config_error(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_text(DEEP)
    with pytest.raises(ConfigError, match="nested too deep to be Kubernetes objects"):
        load_documents(tmp_path / name)


def test_a_deep_api_answer_is_a_bad_answer() -> None:
    with pytest.raises(BadAnswer, match="not JSON"):
        json_object(Answer(200, "application/json", DEEP.encode()))
