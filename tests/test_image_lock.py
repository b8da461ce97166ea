"""The lock files are portable: a pin depends on the job's files and config, not on the Python, pwdeploy or
pathwaysutils of the machine that renders. Also: both unpushed images reported at once, local runs pin nothing,
an up-to-date push still names credential-like files, and the example folder's .dockerignore."""

from __future__ import annotations

import hashlib
import io
import json
import marshal
import os
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from pwdeploy import __version__
from pwdeploy.cli import cli
from pwdeploy.config import JobConfig
from pwdeploy.errors import ConfigError
from pwdeploy.images import build, inputs, lock, pin, sidecar_image, wheel
from pwdeploy.images import job_image as spec
from tests.conftest import REPO
from tests.test_image import REPOSITORY, job_at, this_machine, write_job

EXAMPLES = REPO / "examples" / "data_parallel"
DIGEST = "sha256:" + "d" * 64


def _record(path: Path, job: JobConfig, found: inputs.ImageInputs, repository: str) -> None:
    lock.record(path, job.name, found.lock_entry(repository, DIGEST))


OTHER_MACHINE = lock.BuiltWith(python="3.10", pwdeploy="0.0.9", pathwaysutils="0.1.12")


def test_a_lock_written_on_another_machine_still_pins_with_a_warning(tmp_path: Path) -> None:
    path = write_job(tmp_path, {"repository": REPOSITORY})  # default base: python:<client X.Y>-slim-bookworm
    job = job_at(path)
    there = spec.collect(job, path, machine=OTHER_MACHINE)
    _record(spec.lock_path(job), job, there, REPOSITORY)
    assert there.base_image == "python:3.10-slim-bookworm" and '"pathwaysutils==0.1.12"' in there.dockerfile
    here = spec.collect(job, path, machine=this_machine("0.1.14"))
    assert here.inputs_hash != there.inputs_hash, "this machine alone would build another image"
    recorded = json.loads(spec.lock_path(job).read_text())["jobs"][job.name]["built_with"]
    assert recorded["python"] == "3.10" and recorded["pwdeploy"] == "0.0.9" and recorded["pathwaysutils"] == "0.1.12"
    (there_wheel,) = [item for item in there.files if item.name == "pwdeploy-0.0.9-py3-none-any.whl"]
    assert recorded["pwdeploy_wheel"] == hashlib.sha256(there_wheel.read()).hexdigest()
    with zipfile.ZipFile(io.BytesIO(there_wheel.read())) as archive:
        assert "Version: 0.0.9\n" in archive.read("pwdeploy-0.0.9.dist-info/METADATA").decode()

    pinned, warnings = pin.pin_pushed(job, path, machine=this_machine("0.1.14"))
    assert pinned.main.image == f"{REPOSITORY}@{DIGEST}"
    (warning,) = warnings
    assert "was built with Python 3.10, pwdeploy 0.0.9, pathwaysutils 0.1.12, this machine has Python " in warning
    assert "pathwaysutils 0.1.14" in warning and "`pwdeploy image build --push` to rebuild" in warning

    (tmp_path / "train.py").write_text("from pwdeploy import runtime\nchanged = True\n")
    pinned, warnings = pin.pin_pushed(job, path, machine=this_machine("0.1.14"))
    assert pinned.main.image is None, "a code change still refuses the recorded image"
    assert len(warnings) == 1 and "inputs of img-test changed since" in warnings[0]


def test_the_same_machine_pins_without_a_warning_and_needs_no_wheel(tmp_path: Path) -> None:
    path = write_job(tmp_path, {"repository": REPOSITORY})
    job = job_at(path)
    built: list[str] = []

    def counted_wheel(version: str) -> bytes:
        built.append(version)
        return wheel.build_wheel(version)

    _record(
        spec.lock_path(job), job, spec.collect(job, path, machine=this_machine(), build_wheel=counted_wheel), REPOSITORY
    )
    assert built == [__version__], "the code imports pwdeploy: collecting it builds the wheel"

    def no_wheel(version: str) -> bytes:
        raise AssertionError("the recorded wheel digest stands for the wheel")

    pinned, warnings = pin.pin_pushed(job, path, machine=this_machine(), build_wheel=no_wheel)
    assert warnings == [] and pinned.main.image == f"{REPOSITORY}@{DIGEST}"


def test_a_sidecar_lock_from_another_python_and_pwdeploy_still_pins(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "m.py").write_text("X = 1\n")
    sidecar_config = {"repository": "r.example/sc", "base_release": "20260423", "source_dir": "src"}
    path = write_job(tmp_path, {"repository": REPOSITORY}, sidecar=sidecar_config)
    job = job_at(path)
    there = sidecar_image.collect(job, machine=OTHER_MACHINE)
    _record(sidecar_image.lock_path(job), job, there, "r.example/sc")
    assert there.base_image.endswith(":20260423-python_3.10-jax_0.10.2")
    assert sidecar_image.collect(job).inputs_hash != there.inputs_hash
    pinned, warnings = pin.pin_pushed(job, path)
    assert pinned.sidecar.image == f"r.example/sc@{DIGEST}"
    (warning,) = warnings
    assert "the sidecar r.example/sc@" in warning and "built with Python 3.10, pwdeploy 0.0.9" in warning
    assert "pathwaysutils" not in warning and "`pwdeploy sidecar build --push`" in warning

    fixed = job_at(
        write_job(tmp_path, {"repository": REPOSITORY}, sidecar={**sidecar_config, "python_version": "3.10"})
    )
    _, warnings = pin.pin_pushed(fixed, path)
    assert len(warnings) == 1 and "Python" not in warnings[0], "sidecar.python_version fixes the Python: no difference"

    (tmp_path / "src" / "m.py").write_text("X = 2\n")
    pinned, warnings = pin.pin_pushed(job, path)
    assert pinned.sidecar.image is None and "sidecar inputs of img-test changed since" in warnings[0]


def test_a_lock_entry_without_built_with_is_checked_with_this_machine(tmp_path: Path) -> None:
    """Entries written by pwdeploy 0.1.0 have no built_with: today's parameters decide, as they did."""
    path = write_job(tmp_path, {"repository": REPOSITORY})
    job = job_at(path)
    found = spec.collect(job, path)
    _record(spec.lock_path(job), job, found, REPOSITORY)
    data = json.loads(spec.lock_path(job).read_text())
    del data["jobs"][job.name]["built_with"]
    spec.lock_path(job).write_text(json.dumps(data))
    assert lock.read_lock(spec.lock_path(job))[job.name].built_with is None
    pinned, warnings = pin.pin_pushed(job, path)
    assert warnings == [] and pinned.main.image == f"{REPOSITORY}@{DIGEST}"
    data["jobs"][job.name]["built_with"] = {"python": 3.1, "pwdeploy": "0.1.0"}
    spec.lock_path(job).write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="is not a pwdeploy lock file"):
        lock.read_lock(spec.lock_path(job))


def test_render_names_both_unpushed_images_at_once(runner: CliRunner, tmp_path: Path) -> None:
    project = tmp_path / "data_parallel"
    shutil.copytree(EXAMPLES, project, ignore=shutil.ignore_patterns(".pwdeploy", "__pycache__", "*.lock"))
    result = runner.invoke(cli, ["render", "-f", str(project / "sidecar" / "job.yaml"), "--no-validate"])
    assert result.exit_code == 2, result.output
    assert "image.repository: us-docker.pkg.dev/my-project/jobs/dp-sidecar-job is set but no pushed" in result.stderr
    assert "sidecar.repository: us-docker.pkg.dev/my-project/jobs/dp-sidecar is set but no pushed" in result.stderr


def test_local_runs_do_not_read_the_image_locks(runner: CliRunner, tmp_path: Path) -> None:
    path = write_job(tmp_path, {"repository": REPOSITORY})
    (tmp_path / "pwdeploy-image.lock").write_text("not json")
    result = runner.invoke(cli, ["render", "-f", str(path), "--no-validate"])
    assert result.exit_code == 2 and "cannot read the lock file" in result.stderr, "render reads it"
    result = runner.invoke(cli, ["local", "env", "-f", str(path), "--devices", "2"])
    assert result.exit_code == 0, result.output
    assert "lock" not in result.stderr


def test_an_up_to_date_push_still_names_credential_files(tmp_path: Path) -> None:
    path = write_job(tmp_path, {"repository": REPOSITORY})
    (tmp_path / ".env").write_text("TOKEN=x\n")
    job = job_at(path)
    found = spec.collect(job, path)
    assert found.warnings and ".env" in found.warnings[0]
    _record(spec.lock_path(job), job, found, REPOSITORY)
    # The lock holds these inputs, so the build returns before it touches the engine.
    result = build.build_image(spec.destination(job), found, None, lambda line: None, push=True)  # type: ignore[arg-type]
    assert not result.built and result.image == f"{REPOSITORY}@{DIGEST}"
    assert result.warnings == found.warnings


def test_the_example_folder_leaves_out_what_the_readme_writes_beside_it(tmp_path: Path) -> None:
    project = tmp_path / "data_parallel"
    shutil.copytree(EXAMPLES, project, ignore=shutil.ignore_patterns(".pwdeploy", "__pycache__", "*.lock"))
    for written in ("dp-example.yaml", "out/jobset.yaml", "Dockerfile", "Dockerfile.job", "sidecar/manifests.yaml"):
        (project / written).parent.mkdir(parents=True, exist_ok=True)
        (project / written).write_text("written while following the README\n")
    for config, workdir in ((project / "job.yaml", "/app"), (project / "sidecar" / "job.yaml", "/app/sidecar")):
        found = spec.collect(job_at(config), config)
        names = {item.name for item in found.files}
        assert {"code/train.py", "code/requirements.txt", "code/sidecar/src/dp_data/__init__.py"} <= names
        assert not {n for n in names if n.endswith(".yaml") or "Dockerfile" in n or n.startswith("code/out")}, names
        assert f"WORKDIR {workdir}" in found.dockerfile
    example = yaml.safe_load((EXAMPLES / "sidecar" / "job.yaml").read_text())
    assert example["image"]["source_dir"] == "..", "the sidecar example copies the folder that holds .dockerignore"


# ------------------------------------------------------------------------------------------ hand-edited locks


def _pushed_lock(tmp_path: Path) -> tuple[Path, Path, dict[str, Any]]:
    """A job whose current inputs were recorded as pushed: (config, lock file, the lock's JSON)."""
    path = write_job(tmp_path, {"repository": REPOSITORY})
    job = job_at(path)
    _record(spec.lock_path(job), job, spec.collect(job, path), REPOSITORY)
    return path, spec.lock_path(job), json.loads(spec.lock_path(job).read_text())


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("digest", DIGEST + "@evil.example/x", "is not sha256: and 64 lower-case hex digits"),
        ("digest", "sha256:" + "D" * 64, "is not sha256: and 64 lower-case hex digits"),
        ("digest", "sha256:" + "d" * 63, "is not sha256: and 64 lower-case hex digits"),
        ("digest", "md5:xyz" + "d" * 64, "is not sha256: and 64 lower-case hex digits"),
        ("digest", "d" * 71, "is not sha256: and 64 lower-case hex digits"),
        ("digest", "sha512:" + "d" * 128, "is not sha256: and 64 lower-case hex digits"),
        ("digest", 5, "holds a value that is not a string"),
        ("repository", "r.example/team/job:v1", "has a tag or digest"),
        ("repository", "r.example/Team Job", "is not a Docker repository"),
    ],
)
def test_render_refuses_a_hand_edited_lock_entry_naming_the_file(
    runner: CliRunner, tmp_path: Path, key: str, value: object, said: str
) -> None:
    path, lock_file, data = _pushed_lock(tmp_path)
    assert runner.invoke(cli, ["render", "-f", str(path), "--no-validate"]).exit_code == 0, "as recorded: pinned"
    data["jobs"]["img-test"][key] = value
    lock_file.write_text(json.dumps(data))
    result = runner.invoke(cli, ["render", "-f", str(path), "--no-validate"])
    assert result.exit_code == 2, result.output
    assert f"{lock_file} is not a pwdeploy lock file (" in result.stderr and said in result.stderr
    assert "hint: delete it and push again" in result.stderr
    assert result.stdout == "" and "Traceback" not in result.output and "evil.example" not in result.stdout


def test_render_refuses_a_lock_entry_for_another_repository(runner: CliRunner, tmp_path: Path) -> None:
    path, lock_file, data = _pushed_lock(tmp_path)
    data["jobs"]["img-test"]["repository"] = "evil.example/x"
    lock_file.write_text(json.dumps(data))
    result = runner.invoke(cli, ["render", "-f", str(path), "--no-validate"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(
        f"error: image.repository: {lock_file} records the image of img-test in 'evil.example/x', not in '{REPOSITORY}'"
    )
    assert "`pwdeploy image build --push`" in result.stderr and result.stdout == ""


def test_a_build_replaces_an_entry_for_another_repository(tmp_path: Path) -> None:
    """The fix the error names must work: a build for the config's repository does not trip over the old entry."""
    path, lock_file, data = _pushed_lock(tmp_path)
    data["jobs"]["img-test"]["repository"] = "r.example/old/place"
    lock_file.write_text(json.dumps(data))
    assert lock.entry_for(lock_file, "img-test", REPOSITORY) is None
    job = job_at(path)
    _record(lock_file, job, spec.collect(job, path), REPOSITORY)
    assert lock.read_lock(lock_file)["img-test"].repository == REPOSITORY


def _entry_digest(lock_file: Path) -> str:
    return lock.read_lock(lock_file)["img-test"].digest


def test_the_parsed_copy_of_a_lock_answers_only_for_the_same_bytes(tmp_path: Path) -> None:
    """Render reads a lock through a parsed copy beside it (.pwdeploy/), kept by the lock's bytes: an edit of the same
    size with the same mtime (two writes in one clock tick) is still seen."""
    _, lock_file, _ = _pushed_lock(tmp_path)
    copy = lock_file.parent / ".pwdeploy" / f"{lock_file.name}.parsed"
    assert _entry_digest(lock_file) == DIGEST and copy.is_file()
    before = lock_file.stat()
    lock_file.write_bytes(lock_file.read_bytes().replace(DIGEST.encode(), b"sha256:" + b"e" * 64))
    os.utime(lock_file, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert lock_file.stat().st_size == before.st_size and lock_file.stat().st_mtime_ns == before.st_mtime_ns
    assert _entry_digest(lock_file) == "sha256:" + "e" * 64


@pytest.mark.parametrize("content", [b"", b"not marshal", b"\xe3\x00", "the copy of another text"])
def test_a_damaged_copy_of_a_lock_is_parsed_again_and_replaced(tmp_path: Path, content: bytes | str) -> None:
    _, lock_file, data = _pushed_lock(tmp_path)
    copy = lock_file.parent / ".pwdeploy" / f"{lock_file.name}.parsed"
    _entry_digest(lock_file)
    good = copy.read_bytes()
    if isinstance(content, str):
        other = {**data, "jobs": {"img-test": {**data["jobs"]["img-test"], "digest": "sha256:" + "f" * 64}}}
        content = marshal.dumps((1, lock_file.read_bytes()[:-1], other))
    copy.write_bytes(content)
    assert _entry_digest(lock_file) == DIGEST
    assert copy.read_bytes() == good


def test_a_lock_is_read_where_its_copy_cannot_be_kept(tmp_path: Path) -> None:
    _, lock_file, _ = _pushed_lock(tmp_path)
    shutil.rmtree(lock_file.parent / ".pwdeploy")
    (lock_file.parent / ".pwdeploy").write_text("a file where the folder would be")
    assert _entry_digest(lock_file) == DIGEST
    assert _entry_digest(lock_file) == DIGEST


def test_a_lock_that_is_not_json_is_refused_though_an_older_copy_exists(tmp_path: Path) -> None:
    _, lock_file, _ = _pushed_lock(tmp_path)
    _entry_digest(lock_file)
    lock_file.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read the lock file"):
        lock.read_lock(lock_file)
