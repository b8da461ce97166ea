"""The job image runs main.command where `local run` runs it: in the config's folder, also when image.source_dir
is a folder above the config (the sidecar example runs ../train.py)."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from pwdeploy.cli import cli
from pwdeploy.config import load_job
from pwdeploy.images import job_image as spec
from tests import jobfiles
from tests.conftest import REPO
from tests.test_image_engine import python_base
from tests.test_sidecar_engine import REGISTRY, _docker, docker_env

EXAMPLES = REPO / "examples" / "data_parallel"
__all__ = ["docker_env", "python_base"]  # fixtures used below


def write_job(config_dir: Path, image: dict[str, Any], command: str = "python3 train.py") -> Path:
    image = {"repository": "r.example/team/job", **image}
    return jobfiles.write_job(config_dir, "workdir-test", main={"command": command}, image=image)


def workdir_line(dockerfile: str) -> str:
    (line,) = [line for line in dockerfile.splitlines() if line.startswith("WORKDIR ")]
    return line.removeprefix("WORKDIR ")


@pytest.mark.parametrize("config", [EXAMPLES / "job.yaml", EXAMPLES / "sidecar" / "job.yaml"])
def test_the_examples_scripts_are_in_the_image_where_their_command_looks(config: Path) -> None:
    job = load_job(config, installed_jax=lambda: "0.10.2")
    found = spec.collect(job, config)
    workdir = PurePosixPath(workdir_line(found.dockerfile))
    copied = {PurePosixPath("/app") / name.removeprefix("code/") for name in (f.name for f in found.files)}
    scripts = [word for word in job.main.command or () if word.endswith(".py")]
    assert scripts, job.main.command
    for script in scripts:
        in_image = PurePosixPath(*(workdir / script).parts)  # ../ kept: resolve it by hand
        parts: list[str] = []
        for part in in_image.parts:
            parts = parts[:-1] if part == ".." else [*parts, part]
        assert PurePosixPath(*parts) in copied, (script, workdir)


def test_sidecar_example_runs_in_its_folders_copy_and_installs_the_examples_requirements() -> None:
    config = EXAMPLES / "sidecar" / "job.yaml"
    found = spec.collect(load_job(config, installed_jax=lambda: "0.10.2"), config)
    assert workdir_line(found.dockerfile) == "/app/sidecar"
    names = {f.name for f in found.files}
    assert {"code/train.py", "code/sidecar/src/dp_data/__init__.py", "requirements.txt"} <= names
    assert "code/sidecar/job.yaml" not in names  # the config is never copied


def test_workdir_follows_the_config_folder_under_source_dir(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    default = write_job(tmp_path / "plain", {})
    (tmp_path / "plain" / "train.py").write_text("print(1)\n")
    nested = write_job(tmp_path / "a" / "b", {"source_dir": "../.."}, command="python3 ../../train.py")
    beside = write_job(tmp_path / "deploy", {"source_dir": "../plain"})
    got = {
        path.parent.name: workdir_line(spec.collect(load_job(path, installed_jax=lambda: "0.10.2"), path).dockerfile)
        for path in (default, nested, beside)
    }
    # A source_dir that does not hold the config's folder is /app itself.
    assert got == {"plain": "/app", "b": "/app/a/b", "deploy": "/app"}


@pytest.mark.docker
def test_built_sidecar_example_image_finds_its_script(
    runner: CliRunner, docker_env: dict[str, str], python_base: str, tmp_path: Path
) -> None:
    project = tmp_path / "data_parallel"
    shutil.copytree(EXAMPLES, project, ignore=shutil.ignore_patterns(".pwdeploy", "__pycache__", "*.lock"))
    config = project / "sidecar" / "job.yaml"
    repository = f"{REGISTRY}/pwdeploy-test/workdir-{uuid.uuid4().hex[:8]}"
    section = {"repository": repository, "base": python_base, "pip_args": ["--no-index"]}
    jobfiles.edit_job(config, lambda data: data["image"].update(section))
    built = runner.invoke(cli, ["image", "build", "-f", str(config)], env=docker_env)
    assert built.exit_code == 0, built.output
    image = built.stdout.strip()
    script = "pwd; ls ../train.py; ls src"
    inside = _docker(docker_env, "run", "--rm", "--network", "none", image, "sh", "-c", script).splitlines()
    assert inside == ["/app/sidecar", "../train.py", "dp_data"]


def test_sidecar_example_runs_its_own_image_once_both_are_pushed(
    runner: CliRunner, jax_version: str, tmp_path: Path
) -> None:
    """Its main container must not reuse the plain example's image: there /app is the working directory and
    ../train.py is not found."""
    from pwdeploy.images import lock
    from pwdeploy.images import sidecar_image as sidecar_spec

    project = tmp_path / "data_parallel"
    shutil.copytree(EXAMPLES, project, ignore=shutil.ignore_patterns(".pwdeploy", "__pycache__", "*.lock"))
    config = project / "sidecar" / "job.yaml"
    job = load_job(config)
    assert job.main.image is None and job.image.repository is not None
    for lock_file, found, repository in (
        (spec.lock_path(job), spec.collect(job, config), job.image.repository),
        (sidecar_spec.lock_path(job), sidecar_spec.collect(job), job.sidecar.repository or ""),
    ):
        entry = found.lock_entry(repository, "sha256:" + "d" * 64)
        lock.record(lock_file, job.name, entry)
    result = runner.invoke(cli, ["render", "-f", str(config), "--no-validate"])
    assert result.exit_code == 0, result.output
    (jobset,) = yaml.safe_load_all(result.stdout)
    head = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "pathways-head")
    (main,) = [c for c in head["template"]["spec"]["template"]["spec"]["containers"] if c["name"] == "main"]
    assert main["image"] == f"{job.image.repository}@sha256:{'d' * 64}"
    assert main["command"][:2] == ["python3", "../train.py"]
