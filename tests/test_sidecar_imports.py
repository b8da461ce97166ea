"""The sidecar's import test (pwdeploy.sidecar_imports): the script itself, run with this interpreter as the image
build and `local run` run it; the arguments a job gives it; the orbax pins compared; and local run's warning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pwdeploy import sidecar_imports
from pwdeploy.config import JobConfig
from pwdeploy.local.sidecar_probe import interpreter, sidecar_import_warnings
from tests.conftest import REPO
from tests.kube_objects import small_job

ORBAX_HERE = __import__("importlib.metadata").metadata.version("orbax-checkpoint")


def run_script(app: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(app), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-c", sidecar_imports.SCRIPT, *args], env=env, capture_output=True, text=True, check=False
    )


@pytest.fixture
def app(tmp_path: Path) -> Path:
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("VALUE = 1\n")
    (tmp_path / "helpers.py").write_text("import mypkg\n")
    (tmp_path / "broken.py").write_text("import not_installed_anywhere\n")
    (tmp_path / "data").mkdir()  # no __init__.py: not a package
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "my-script.py").write_text("")  # not a module name
    return tmp_path


def test_the_modules_are_the_top_level_packages_and_modules(app: Path) -> None:
    assert sidecar_imports.modules(app) == ["broken", "helpers", "mypkg"]
    assert sidecar_imports.modules(None) == []


def test_what_imports_passes_and_says_what_it_imported(app: Path) -> None:
    done = run_script(app, "mypkg", "helpers", "--orbax=")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "pwdeploy sidecar import test: cloudpickle, mypkg, helpers, orbax-checkpoint"


def test_a_module_that_does_not_import_fails_naming_it_and_why(app: Path) -> None:
    done = run_script(app, "mypkg", "broken", "absent")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "pwdeploy sidecar import test failed: broken does not import (ModuleNotFoundError: No module named "
        "'not_installed_anywhere'); absent does not import (ModuleNotFoundError: No module named 'absent')"
    )


def test_orbax_at_another_version_than_the_jobs_fails(app: Path) -> None:
    assert run_script(app, f"--orbax={ORBAX_HERE}").returncode == 0
    done = run_script(app, "--orbax=0.0.1")
    assert done.returncode == 1
    assert f"orbax-checkpoint is {ORBAX_HERE}, the job's is 0.0.1" in done.stderr


def _job(tmp_path: Path, image_pins: str | None, sidecar_pins: str | None, **more: object) -> JobConfig:
    values: dict[str, object] = {"sidecar.repository": "r.example/team/sidecar", **more}
    if image_pins is not None:
        (tmp_path / "job-requirements.txt").write_text(image_pins)
        values["image.requirements"] = str(tmp_path / "job-requirements.txt")
    if sidecar_pins is not None:
        (tmp_path / "sidecar-requirements.txt").write_text(sidecar_pins)
        values["sidecar.requirements"] = str(tmp_path / "sidecar-requirements.txt")
    return small_job(values)


def test_the_arguments_ask_for_the_jobs_orbax_or_any_with_mtc(tmp_path: Path, app: Path) -> None:
    pinned = _job(tmp_path, "grain==0.2.18\nOrbax_Checkpoint == 0.12.8  # the job's\n", None)
    assert sidecar_imports.arguments(pinned) == ["--orbax=0.12.8"]
    with_code = _job(tmp_path, None, None, **{"sidecar.source_dir": str(app)})
    assert sidecar_imports.arguments(with_code) == ["broken", "helpers", "mypkg"]
    mtc = _job(tmp_path, None, None, **{"mtc.enabled": True})
    assert sidecar_imports.arguments(mtc) == ["--orbax="]


def test_different_orbax_pins_in_the_job_and_the_sidecar_are_a_warning(tmp_path: Path) -> None:
    job = _job(tmp_path, "orbax-checkpoint==0.12.8\n", "orbax-checkpoint==0.12.7\ncloudpickle==2.1.0\n")
    warning = sidecar_imports.orbax_mismatch(job)
    assert warning is not None and warning.startswith(
        "sidecar.requirements pins orbax-checkpoint==0.12.7, image.requirements 0.12.8"
    )
    same = _job(tmp_path, "orbax-checkpoint==0.12.8\n", "orbax-checkpoint==0.12.8\n")
    assert sidecar_imports.orbax_mismatch(same) is None


def test_local_run_warns_when_the_sidecars_modules_do_not_import(tmp_path: Path, app: Path) -> None:
    said: list[str] = []
    job = _job(tmp_path, None, None, **{"sidecar.source_dir": str(app)})
    sidecar_import_warnings(job, [sys.executable, "train.py"], {"PATH": "/usr/bin:/bin"}, tmp_path, said.append)
    (warning,) = said
    assert warning.startswith("warning: pwdeploy sidecar import test failed: broken does not import")
    assert "with sidecar.source_dir alone on the path as in the sidecar's /app" in warning
    (app / "broken.py").unlink()
    said.clear()
    sidecar_import_warnings(job, [sys.executable, "train.py"], {"PATH": "/usr/bin:/bin"}, tmp_path, said.append)
    assert said == []


def test_the_interpreter_is_the_programs_python_else_this_one() -> None:
    assert interpreter(["/opt/venv/bin/python3.12", "train.py"]) == "/opt/venv/bin/python3.12"
    assert interpreter(["bash", "-c", "python3 train.py"]) == sys.executable


def test_the_example_sidecar_passes_here() -> None:
    example = REPO / "examples" / "data_parallel" / "sidecar" / "src"
    assert run_script(example, *sidecar_imports.modules(example)).returncode == 0
