"""Job images without an engine: the Dockerfile (parsed into instructions), what the inputs hash covers, the
pwdeploy wheel (installed by the real pip), the config relaxation, render pinning from pwdeploy-image.lock, and
the JAX check against an engine stand-in."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from pwdeploy import __version__
from pwdeploy.cli import cli
from pwdeploy.config import JobConfig, load_job
from pwdeploy.errors import BuildError, ConfigError
from pwdeploy.images import build, engine, lock, pin, sidecar_image, wheel
from pwdeploy.images import job_image as spec
from tests import jobfiles
from tests.conftest import REPO
from tests.test_sidecar import instructions

PY = f"{sys.version_info.major}.{sys.version_info.minor}"
REPOSITORY = "r.example/team/job"


def write_job(tmp_path: Path, image: dict[str, Any], code: str = "from pwdeploy import runtime\n", **top: Any) -> Path:
    """A job with the given image section, its training script (``code``) and requirements beside it."""
    (tmp_path / "train.py").write_text(code)
    (tmp_path / "requirements.txt").write_text("grain==0.2.10\n")
    fields = {"main": {"command": "python3 train.py"}, "image": image, **top}  # top may replace main
    return jobfiles.write_job(tmp_path, "img-test", **fields)


def job_at(path: Path) -> JobConfig:
    return load_job(path, installed_jax=lambda: "0.10.2")


def this_machine(pathwaysutils: str | None = "0.1.13") -> lock.BuiltWith:
    """This machine's Python and pwdeploy, with the given pathwaysutils installed (None: none)."""
    return lock.BuiltWith(python=PY, pwdeploy=__version__, pathwaysutils=pathwaysutils)


def test_dockerfile_installs_the_pathways_jax_requirements_pwdeploy_and_copies_the_folder(tmp_path: Path) -> None:
    path = write_job(tmp_path, {"repository": REPOSITORY, "requirements": "requirements.txt", "pip_args": ["--pre"]})
    found = spec.collect(job_at(path), path, machine=this_machine("0.1.13"))
    steps = instructions(found.dockerfile)
    whl = spec.wheel_name()
    assert steps[0] == ("FROM", f"python:{PY}-slim-bookworm")
    assert steps[2][0] == "RUN" and steps[2][1].startswith('python -c "import sys, jax;'), "checked after install"
    assert steps[1:2] + steps[3:-1] == [
        ("RUN", 'python -m pip install --no-cache-dir --pre "jax==0.10.2" "pathwaysutils==0.1.13"'),
        ("COPY", "requirements.txt /opt/pwdeploy/requirements.txt"),
        (
            "RUN",
            "python -m pip install --no-cache-dir --pre -r /opt/pwdeploy/requirements.txt "
            '"jax==0.10.2" "pathwaysutils==0.1.13"',
        ),
        ("COPY", f"{whl} /opt/pwdeploy/{whl}"),
        ("RUN", f"python -m pip install --no-cache-dir --no-deps /opt/pwdeploy/{whl}"),
        ("COPY", "code/ /app/"),
        ("WORKDIR", "/app"),
    ]
    assert steps[-1][0] == "LABEL", "last: the hash in it must not invalidate the cached installs"
    labels = dict(item.split("=", 1) for item in steps[-1][1].split())
    assert labels == {
        "dev.pwdeploy.version": f'"{__version__}"',
        "dev.pwdeploy.jax-version": '"0.10.2"',
        "dev.pwdeploy.python-version": f'"{PY}"',
        "dev.pwdeploy.inputs-hash": f'"{found.inputs_hash}"',
    }
    assert [f.name for f in found.files] == ["requirements.txt", "code/requirements.txt", "code/train.py", whl]


def test_code_that_does_not_import_pwdeploy_gets_no_wheel(tmp_path: Path) -> None:
    path = write_job(tmp_path, {"repository": REPOSITORY, "base": "python:3.12-slim-bookworm"}, code="import jax\n")
    found = spec.collect(job_at(path), path)
    assert [word for word, _ in instructions(found.dockerfile)] == ["FROM", "RUN", "RUN", "COPY", "WORKDIR", "LABEL"]
    assert found.python_version == "3.12" and instructions(found.dockerfile)[0] == ("FROM", "python:3.12-slim-bookworm")


def test_hash_ignores_the_config_file_locks_and_caches_but_not_code(tmp_path: Path) -> None:
    path = write_job(tmp_path, {"repository": REPOSITORY})
    first = spec.collect(job_at(path), path).inputs_hash
    jobfiles.edit_job(path, lambda data: data["main"].update(memory="64Gi"))
    for junk in ("pwdeploy-image.lock", "pwdeploy-sidecar.lock", ".pwdeploy/jax-cache/x", "__pycache__/t.pyc"):
        (tmp_path / junk).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / junk).write_text("noise")
    assert spec.collect(job_at(path), path).inputs_hash == first
    (tmp_path / "train.py").write_text("from pwdeploy import runtime\nSTEPS = 1\n")
    assert spec.collect(job_at(path), path).inputs_hash != first


def test_wheel_is_reproducible_and_the_real_pip_installs_it(tmp_path: Path) -> None:
    data = wheel.build_wheel()
    assert wheel.build_wheel() == data, "same files, same bytes: the inputs hash is the same on every machine"
    (tmp_path / spec.wheel_name()).write_bytes(data)
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(tmp_path / "t")]
    subprocess.run([*install, str(tmp_path / spec.wheel_name())], check=True, capture_output=True)
    probe = "import sys; sys.path.insert(0, sys.argv[1]); import pwdeploy.runtime as r; print(r.__file__)"
    found = subprocess.run([sys.executable, "-I", "-c", probe, str(tmp_path / "t")], capture_output=True, text=True)
    assert found.stdout.strip() == str(tmp_path / "t" / "pwdeploy" / "runtime.py"), found.stderr
    assert (tmp_path / "t" / "pwdeploy" / "templates" / "Dockerfile.job").is_file()


@pytest.mark.parametrize(
    ("image", "field", "message"),
    [
        ({"repository": REPOSITORY, "base": "python"}, "image.base", "is not pinned"),
        ({"repository": REPOSITORY, "source_dir": "nope"}, "image.source_dir", "is not a directory"),
        ({"repository": REPOSITORY, "requirements": "nope.txt"}, "image.requirements", "is not a file"),
    ],
)
def test_bad_image_inputs(tmp_path: Path, image: dict[str, Any], field: str, message: str) -> None:
    path = write_job(tmp_path, image)
    with pytest.raises(ConfigError) as info:
        spec.collect(job_at(path), path)
    assert info.value.field == field and message in str(info.value)


def test_official_base_of_another_python_than_the_sidecar_is_refused(tmp_path: Path) -> None:
    sidecar = {"repository": "r.example/sc", "python_version": "3.11"}
    path = write_job(tmp_path, {"repository": REPOSITORY, "base": "python:3.12-slim"}, sidecar=sidecar)
    with pytest.raises(ConfigError, match=r"image\.base: names Python 3\.12, but sidecar\.python_version names"):
        job_at(path)  # the config says so: both fields name a Python
    other = "3.9" if PY != "3.9" else "3.10"
    path = write_job(
        tmp_path, {"repository": REPOSITORY, "base": f"python:{other}-slim"}, sidecar={"repository": "r.example/sc"}
    )
    with pytest.raises(ConfigError, match=rf"image\.base: python:{other}-slim runs Python {other}"):
        spec.collect(job_at(path), path)  # the client's Python is this machine's: the build says so


def test_build_without_repository_names_the_field(runner: CliRunner, tmp_path: Path) -> None:
    path = write_job(tmp_path, {}, main={"command": "python3 train.py", "image": "r.example/pre:1"})
    result = runner.invoke(cli, ["image", "build", "-f", str(path)])
    assert result.exit_code == 2 and result.stdout == ""
    assert "image.repository: is required to build" in result.stderr and "--image-repository" in result.stderr


def test_main_image_is_still_required_without_a_repository(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"main\.image: is required"):
        job_at(write_job(tmp_path, {}))


def _entry(found: Any, repository: str = REPOSITORY) -> lock.LockEntry:
    return lock.LockEntry(
        repository=repository,
        tag=found.tag(repository),
        digest="sha256:" + "d" * 64,
        inputs_hash=found.inputs_hash,
        base_image=found.base_image,
        jax_version="0.10.2",
        python_version=PY,
    )


def _main_image(result: Any) -> str:
    (jobset,) = yaml.safe_load_all(result.stdout)
    head = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "pathways-head")
    (main,) = [c for c in head["template"]["spec"]["template"]["spec"]["containers"] if c["name"] == "main"]
    return str(main["image"])


def test_render_asks_for_a_push_pins_the_lock_and_explains_a_stale_one(runner: CliRunner, tmp_path: Path) -> None:
    path = write_job(tmp_path, {"repository": REPOSITORY})
    render = ["render", "-f", str(path), "--no-validate"]
    result = runner.invoke(cli, render)
    assert (
        result.exit_code == 2 and "image.repository: r.example/team/job is set but no pushed job image" in result.stderr
    )
    assert "run `pwdeploy image build --push`" in result.stderr
    job = job_at(path)
    lock.record(spec.lock_path(job), job.name, _entry(spec.collect(job, path)))
    result = runner.invoke(cli, render)
    assert result.exit_code == 0, result.output
    assert _main_image(result) == f"{REPOSITORY}@sha256:{'d' * 64}" and "warning" not in result.stderr
    result = runner.invoke(cli, [*render, "--image", "r.example/explicit:2"])
    assert result.exit_code == 0 and _main_image(result) == "r.example/explicit:2", "an explicit main.image wins"
    (tmp_path / "train.py").write_text("from pwdeploy import runtime\nchanged = True\n")
    result = runner.invoke(cli, render)
    assert result.exit_code == 2 and "warning: the job image inputs of img-test changed since" in result.stderr
    assert pin.pin_pushed(job_at(path), path)[0].main.image is None


def test_a_sidecar_lock_written_before_the_job_image_existed_still_pins(tmp_path: Path) -> None:
    """pwdeploy-sidecar.lock keeps its name and format; the job image writes its own file of that format."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "m.py").write_text("X = 1\n")
    base = f"r.example/b:1-python_{PY}-jax_0.10.2"
    path = write_job(
        tmp_path,
        {"repository": REPOSITORY},
        sidecar={"repository": "r.example/sc", "base_image": base, "source_dir": "src"},
    )
    job = job_at(path)
    hashes = sidecar_image.collect(job).inputs_hash
    old = {
        "version": 1,
        "jobs": {
            "img-test": {
                "repository": "r.example/sc",
                "tag": f"r.example/sc:{hashes[:16]}",
                "digest": "sha256:" + "e" * 64,
                "inputs_hash": hashes,
                "base_image": base,
                "jax_version": "0.10.2",
                "python_version": PY,
            }
        },
    }
    (tmp_path / "pwdeploy-sidecar.lock").write_text(json.dumps(old, indent=2))  # as pwdeploy 0.1.0 wrote it
    lock.record(spec.lock_path(job), job.name, _entry(spec.collect(job, path)))
    pinned, warnings = pin.pin_pushed(job, path)
    assert warnings == [] and pinned.sidecar.image == "r.example/sc@sha256:" + "e" * 64
    assert pinned.main.image == f"{REPOSITORY}@sha256:{'d' * 64}"


class StandInEngine:
    """Stands in for the engine after a build: running the image's `python -c` answers ``answer``."""

    def __init__(self, answer: engine.RunResult) -> None:
        self.answer = answer
        self.removed: list[str] = []

    def run(self, ref: str, command: list[str]) -> engine.RunResult:
        return self.answer

    def remove(self, ref: str) -> None:
        self.removed.append(ref)


def _verify(stand_in: StandInEngine, folder: Path) -> str:
    where = spec.destination(job_at(write_job(folder, {"repository": REPOSITORY})))
    return build.verify_jax(stand_in, "r/x:1", "0.10.2", where)  # type: ignore[arg-type]


def test_verify_jax_with_a_stand_in_engine(tmp_path: Path) -> None:
    done = _verify(StandInEngine(engine.RunResult(0, "0.10.2")), tmp_path)
    assert done == "a step of the build and `python -c 'import jax; print(jax.__version__)'` in the image"
    assert "label" not in done, "the label repeats pathways_version: it is no check"
    foreign = engine.RunResult(1, "", "exec /usr/local/bin/python: exec format error")
    assert (
        _verify(StandInEngine(foreign), tmp_path)
        == "a step of the build only (this engine cannot run the image's platform)"
    )
    for stand_in, message in [
        (StandInEngine(engine.RunResult(0, "0.10.1\n", "a warning\n")), "finds jax 0.10.1 in it while pathways"),
        (StandInEngine(engine.RunResult(1, "", "No module named 'jax'")), "failed in it (exit 1)"),
    ]:
        with pytest.raises(BuildError) as caught:
            _verify(stand_in, tmp_path)
        assert message in str(caught.value)
        assert stand_in.removed == ["r/x:1"], "a rejected image is untagged"


def test_example_job_image_dockerfile(runner: CliRunner) -> None:
    example = REPO / "examples" / "data_parallel" / "job.yaml"
    result = runner.invoke(cli, ["image", "dockerfile", "-f", str(example)])
    assert result.exit_code == 0, result.output
    steps = instructions(result.stdout)
    assert steps[0] == ("FROM", "python:3.12-slim-bookworm") and ("WORKDIR", "/app") in steps  # the example pins it
    assert ("RUN", f"python -m pip install --no-cache-dir --no-deps /opt/pwdeploy/{spec.wheel_name()}") in steps
