"""The job's Python: the job image is built for what the job's own project allows (``requires-python``), a base or
sidecar Python the project refuses is a config error naming the field, and the specifiers are read as PEP 440
says for a Python X.Y."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pwdeploy.cli import cli
from pwdeploy.errors import ConfigError
from pwdeploy.images import job_image as spec
from pwdeploy.images.inputs import running_python
from pwdeploy.job_python import allows, choose
from tests.test_image import REPOSITORY, job_at, write_job


def project(folder: Path, requires: str) -> None:
    (folder / "pyproject.toml").write_text(f'[project]\nname = "trainer"\nrequires-python = "{requires}"\n')


@pytest.mark.parametrize(
    ("spec_", "version", "expected"),
    [
        (">=3.12", "3.11", False),
        (">=3.12", "3.12", True),
        (">=3.10,<3.13", "3.13", False),
        (">=3.10,<3.13", "3.12", True),
        ("~=3.11", "3.13", True),
        ("~=3.11", "3.10", False),
        ("==3.12.*", "3.12", True),
        ("==3.12.*", "3.11", False),
        ("!=3.12", "3.12", False),
        (">3.12", "3.13", True),
        ("<=3.12", "3.12", True),
        ("===3.12", "3.12", None),  # an arbitrary-equality clause is not read
    ],
)
def test_requires_python_is_read_as_pep_440_over_a_minor(spec_: str, version: str, expected: bool | None) -> None:
    assert allows(spec_, version) is expected


def test_the_python_chosen_is_pwdeploy_s_when_allowed_else_the_nearest_allowed() -> None:
    assert choose(">=3.10", "3.11") == "3.11"
    assert choose(">=3.12", "3.11") == "3.12"
    assert choose("<3.12", "3.13") == "3.11"
    assert choose("<3.10", "3.11") is None


def test_the_image_runs_the_python_the_project_asks_for(runner: CliRunner, tmp_path: Path) -> None:
    path = write_job(tmp_path, {"repository": REPOSITORY})
    project(tmp_path, ">=3.13")
    result = runner.invoke(cli, ["image", "dockerfile", "-f", str(path)])
    assert result.exit_code == 0, result.output
    assert "FROM python:3.13-slim-bookworm" in result.stdout
    if running_python() != "3.13":
        assert "the job image runs Python 3.13 (python:3.13-slim-bookworm): the job's project asks for >=3.13" in (
            result.stderr
        )


@pytest.mark.parametrize(
    ("image", "fields", "field"),
    [
        ({"repository": REPOSITORY, "base": "python:3.11-slim"}, {}, "image.base"),
        (
            {"repository": REPOSITORY},
            {"sidecar": {"repository": "r.example/team/sc", "python_version": "3.11"}},
            "sidecar.python_version",
        ),
    ],
)
def test_a_python_the_project_refuses_is_an_error_naming_the_field(
    tmp_path: Path, image: dict[str, Any], fields: dict[str, Any], field: str
) -> None:
    path = write_job(tmp_path, image, **fields)
    project(tmp_path, ">=3.12")
    with pytest.raises(ConfigError) as raised:
        spec.collect(job_at(path))
    assert raised.value.field == field and "the job's project asks for Python >=3.12" in str(raised.value)


def test_a_project_no_candidate_python_meets_is_an_error_with_the_fix(tmp_path: Path) -> None:
    path = write_job(tmp_path, {"repository": REPOSITORY})
    project(tmp_path, "<3.10")
    with pytest.raises(ConfigError) as raised:
        spec.collect(job_at(path))
    assert raised.value.field == "image.base" and "set image.base" in str(raised.value.hint)


def test_packages_only_an_extra_brings_and_the_code_never_imports_are_named(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "trainer"\n[project.optional-dependencies]\ntpu = ["libtpu>=0.0.42", "numpy"]\n'
    )
    image = {"repository": REPOSITORY, "requirements": "requirements.txt"}
    path = write_job(tmp_path, image, code="import numpy\nimport jax\n")
    (tmp_path / "requirements.txt").write_text("-e .[tpu]\njax[tpu]\n")  # after write_job's own
    found = spec.collect(job_at(path))
    notes = [w for w in found.warnings if "its extras" in w]
    assert len(notes) == 2, found.warnings
    assert notes[0].startswith("image.requirements line 1 (-e .[tpu]): its extras tpu bring 1 package(s)")
    assert notes[0].endswith(": libtpu; name what the job needs instead of the extra to leave the others out")
    assert notes[1].startswith("image.requirements line 2 (jax[tpu]): its extras tpu bring") and "libtpu" in notes[1]


def test_a_requirements_file_without_extras_says_nothing_of_them(tmp_path: Path) -> None:
    found = spec.collect(job_at(write_job(tmp_path, {"repository": REPOSITORY, "requirements": "requirements.txt"})))
    assert not [w for w in found.warnings if "its extras" in w]
