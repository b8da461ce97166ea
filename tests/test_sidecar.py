"""Sidecar images without an engine: the Dockerfile for several configs (parsed into instructions), the
version coupling check, the inputs hash and tag, the build context, the lock file and pinning, build-log
step tracking, and the errors for a missing docker CLI or engine."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import stat
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from pwdeploy import __version__
from pwdeploy import identifiers as ids
from pwdeploy.cli import cli
from pwdeploy.config import JobConfig, load_job
from pwdeploy.errors import BuildError, ConfigError
from pwdeploy.images import build, engine, inputs, lock, pin, template
from pwdeploy.images import sidecar_image as spec
from tests import jobfiles
from tests.conftest import REPO
from tests.services import unavailable

PY = f"{sys.version_info.major}.{sys.version_info.minor}"
BASE = f"registry.example/team/sidecar-base:20260101-python_{PY}-jax_0.10.2"


def write_job(tmp_path: Path, sidecar: dict[str, Any], **top: Any) -> Path:
    """A headless job with the given sidecar section, plus a code dir and requirements beside it."""
    (tmp_path / "src" / "mypkg").mkdir(parents=True, exist_ok=True)
    (tmp_path / "src" / "mypkg" / "__init__.py").write_text("def answer():\n    return 42\n")
    (tmp_path / "requirements.txt").write_text("grain==0.2.10\n")
    return jobfiles.write_job(tmp_path, "sc-test", headless=True, sidecar=sidecar, **top)


def job_at(path: Path) -> JobConfig:
    return load_job(path, installed_jax=lambda: "0.10.2")


def apply_lock(job: JobConfig) -> JobConfig:
    """The job with its pushed sidecar pinned; no warning expected."""
    pinned, warnings = pin.pin_pushed(job)
    assert warnings == []
    return pinned


def instructions(text: str) -> list[tuple[str, str]]:
    """The Dockerfile as (INSTRUCTION, arguments), comments dropped and continuation lines joined."""
    logical, pending = [], ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    result = []
    for line in logical:
        word, _, rest = line.strip().partition(" ")
        result.append((word.upper(), " ".join(rest.split())))
    return result


# ------------------------------------------------------------------------------------------ Dockerfile

# The import test's steps, last: a job with sidecar.source_dir src holding the package mypkg.
IMPORT_TEST = [
    ("COPY", "pwdeploy_sidecar_imports.py /opt/pwdeploy/sidecar_imports.py"),
    ("RUN", "/opt/venv/bin/python /opt/pwdeploy/sidecar_imports.py mypkg"),
]


@pytest.mark.parametrize("name", ["Dockerfile.sidecar", "Dockerfile.job"])
def test_packaged_templates_are_the_reviewed_docker_dockerfiles(name: str) -> None:
    assert template.template_text(name) == (REPO / "docker" / name).read_text(encoding="utf-8")


def test_dockerfile_with_code_requirements_and_pip_args(tmp_path: Path) -> None:
    sidecar = {
        "repository": "registry.example/team/sidecar",
        "base_image": BASE,
        "source_dir": "src",
        "requirements": "requirements.txt",
        "pip_args": ["--no-index", "--find-links", "/wheels dir"],
    }
    found = spec.collect(job_at(write_job(tmp_path, sidecar)))
    steps = instructions(found.dockerfile)
    assert steps[0] == ("FROM", BASE)
    assert steps[1][0] == "LABEL"
    labels = dict(item.split("=", 1) for item in steps[1][1].split())
    assert labels == {
        "dev.pwdeploy.version": f'"{__version__}"',
        "dev.pwdeploy.jax-version": '"0.10.2"',
        "dev.pwdeploy.python-version": f'"{PY}"',
        "dev.pwdeploy.inputs-hash": f'"{found.inputs_hash}"',
    }
    assert steps[2:] == [
        ("COPY", "requirements.txt /opt/pwdeploy/requirements.txt"),
        (
            "RUN",
            "/opt/venv/bin/pip install --no-cache-dir -c /opt/venv/server_constraints.txt --no-index "
            "--find-links '/wheels dir' -r /opt/pwdeploy/requirements.txt",
        ),
        ("COPY", "code/ /app/"),
        ("ENV", "PYTHONPATH=/app${PYTHONPATH:+:$PYTHONPATH}"),
        *IMPORT_TEST,
    ]
    assert not any(word in ("ENTRYPOINT", "CMD") for word, _ in steps), "the base entrypoint must be kept"


@pytest.mark.parametrize(
    ("sidecar", "expected"),
    [
        ({"source_dir": "src"}, ["FROM", "LABEL", "COPY", "ENV", "COPY", "RUN"]),
        ({"requirements": "requirements.txt"}, ["FROM", "LABEL", "COPY", "RUN", "COPY", "RUN"]),
        ({}, ["FROM", "LABEL", "COPY", "RUN"]),
    ],
)
def test_dockerfile_keeps_only_configured_steps(tmp_path: Path, sidecar: dict[str, Any], expected: list[str]) -> None:
    job = job_at(write_job(tmp_path, {"repository": "r.example/x", "base_image": BASE, **sidecar}))
    assert [word for word, _ in instructions(spec.collect(job).dockerfile)] == expected


def test_default_base_comes_from_release_python_and_jax(tmp_path: Path) -> None:
    job = job_at(write_job(tmp_path, {"repository": "r.example/x", "base_release": 20260423, "python_version": "3.12"}))
    steps = instructions(spec.collect(job).dockerfile)
    default_repository = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways-colocated-python/sidecar"
    assert steps[0] == ("FROM", f"{default_repository}:20260423-python_3.12-jax_0.10.2")
    spec.prepare(job)  # the default base matches by construction


def test_template_language_errors() -> None:
    assert template.render("A {{x}}\n#if b\nB\n#endif\nC\n", {"x": "1"}, {"b": False}) == "A 1\nC\n"
    assert template.render("## note {{x}}\n# kept {{x}}\n", {"x": "1"}, {}) == "# kept 1\n"
    with pytest.raises(KeyError):
        template.render("{{missing}}\n", {}, {})
    with pytest.raises(ValueError, match="not closed"):
        template.render("#if b\n", {}, {"b": True})
    with pytest.raises(ValueError, match="without #if"):
        template.render("#endif\n", {}, {})


# ------------------------------------------------------------------------------------------ version coupling


@pytest.mark.parametrize(
    ("base_image", "message"),
    [
        (f"r.example/b:20260101-python_{PY}-jax_0.9.0", "jax 0.9.0 differs from pathways_version 0.10.2"),
        ("r.example/b:20260101-python_3.9-jax_0.10.2", f"python 3.9 differs from the client's Python {PY}"),
        ("r.example/b:custom", "cannot tell its Python and JAX versions"),
        ("r.example/b@sha256:" + "0" * 64, "cannot tell its Python and JAX versions"),
    ],
)
def test_base_version_mismatch_is_a_config_error(tmp_path: Path, base_image: str, message: str) -> None:
    job = job_at(write_job(tmp_path, {"repository": "r.example/x", "base_image": base_image}))
    with pytest.raises(ConfigError, match=r"sidecar\.base_image") as info:
        spec.prepare(job)
    assert message in str(info.value) and "--allow-base-mismatch" in str(info.value)
    spec.prepare(job, allow_base_mismatch=True)  # the expert override


def test_base_mismatch_through_the_cli(runner: CliRunner, tmp_path: Path) -> None:
    path = write_job(tmp_path, {"repository": "r.example/x", "base_image": f"r.example/b:1-python_{PY}-jax_0.9.0"})
    result = runner.invoke(cli, ["sidecar", "dockerfile", "-f", str(path)])
    assert result.exit_code == 2 and "jax 0.9.0 differs" in result.stderr and result.stdout == ""
    result = runner.invoke(cli, ["sidecar", "dockerfile", "-f", str(path), "--allow-base-mismatch"])
    assert result.exit_code == 0 and result.stdout.startswith("# Colocated-Python sidecar")


@pytest.mark.parametrize(
    ("sidecar", "field", "message"),
    [
        ({"repository": "r.example/x"}, "sidecar.base_release", "is required unless sidecar.base_image is set"),
        ({"base_release": "2026-04-23"}, "sidecar.base_release", "is not a release date"),
        ({"base_release": "20260423", "python_version": 3.10}, "sidecar.python_version", "quote it in YAML"),
        ({"base_release": "20260423", "python_version": "three"}, "sidecar.python_version", "not a Python 3"),
        ({"base_image": "r.example/b"}, "sidecar.base_image", "is not pinned"),
        ({"base_image": BASE, "source_dir": "nope"}, "sidecar.source_dir", "is not a directory"),
        ({"base_image": BASE, "requirements": "src"}, "sidecar.requirements", "is not a file"),
    ],
)
def test_bad_sidecar_inputs(tmp_path: Path, sidecar: dict[str, Any], field: str, message: str) -> None:
    job = job_at(write_job(tmp_path, sidecar))
    with pytest.raises(ConfigError) as info:
        spec.collect(job)
    assert info.value.field == field and message in str(info.value)


@pytest.mark.parametrize(
    ("repository", "message"),
    [
        (None, "is required to build"),
        ("r.example/team/sidecar:v1", "has a tag or digest"),
        ("r.example/team/sidecar@sha256:" + "0" * 64, "has a tag or digest"),
        ("r.example/Team/Sidecar", "is not a Docker repository"),
    ],
)
def test_bad_repository(repository: str | None, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        inputs.check_repository(repository, "sidecar.repository", "sidecar")


def test_good_repositories() -> None:
    for repository in ("127.0.0.1:5000/pwdeploy/sidecar", "us-docker.pkg.dev/p/r/side_car", "sidecar"):
        assert inputs.check_repository(repository, "sidecar.repository", "sidecar") == repository


# ------------------------------------------------------------------------------------------ hash and context


def test_inputs_hash_is_stable_and_covers_every_input(tmp_path: Path) -> None:
    sidecar = {"repository": "r.example/x", "base_image": BASE, "source_dir": "src", "requirements": "requirements.txt"}
    path = write_job(tmp_path, sidecar)
    first = spec.collect(job_at(path))
    assert spec.collect(job_at(path)) == first
    assert first.tag("r.example/x") == f"r.example/x:{first.inputs_hash[:16]}"
    # Caches, version control and the lock file are not inputs.
    for junk in (
        "src/mypkg/__pycache__/m.cpython-311.pyc",
        "src/.git/HEAD",
        "src/mypkg/x.pyc",
        "src/pwdeploy-sidecar.lock",
    ):
        (tmp_path / junk).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / junk).write_text("noise")
    assert spec.collect(job_at(path)).inputs_hash == first.inputs_hash
    hashes = {first.inputs_hash}
    changes: list[Callable[[], object]] = [
        lambda: (tmp_path / "src/mypkg/__init__.py").write_text("def answer():\n    return 43\n"),
        lambda: (tmp_path / "src/mypkg/new.py").write_text(""),
        lambda: (tmp_path / "src/mypkg/new.py").chmod(0o755),
        lambda: (tmp_path / "requirements.txt").write_text("grain==0.2.11\n"),
        lambda: write_job(tmp_path, {**sidecar, "pip_args": ["--pre"]}),
        lambda: write_job(tmp_path, {**sidecar, "base_image": BASE.replace("20260101", "20260102")}),
    ]
    for change in changes:
        change()
        found = spec.collect(job_at(path)).inputs_hash
        hashes.add(found)
        # What render checks a pin by: the folder taken whole, then (unchanged) the hash kept for its walk.
        assert spec.inputs_hash(job_at(path)) == found and spec.inputs_hash(job_at(path)) == found
    assert len(hashes) == len(changes) + 1


def test_build_context_tar_holds_exactly_the_inputs(tmp_path: Path) -> None:
    sidecar = {"repository": "r.example/x", "base_image": BASE, "source_dir": "src", "requirements": "requirements.txt"}
    (tmp_path / "src" / "run.sh").parent.mkdir(parents=True)
    (tmp_path / "src" / "run.sh").write_text("#!/bin/sh\n")
    (tmp_path / "src" / "run.sh").chmod(0o755)
    found = spec.collect(job_at(write_job(tmp_path, sidecar)))
    blobs = []
    for _ in range(2):
        out = io.BytesIO()
        build.write_context(found, out)
        blobs.append(out.getvalue())
    assert blobs[0] == blobs[1], "same inputs, same context bytes"
    with tarfile.open(fileobj=io.BytesIO(blobs[0])) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == [
            "Dockerfile",
            "code/mypkg/__init__.py",
            "code/run.sh",
            "pwdeploy_sidecar_imports.py",
            "requirements.txt",
        ]
        assert members["code/run.sh"].mode == 0o755 and members["requirements.txt"].mode == 0o644
        assert {m.mtime for m in members.values()} == {0}
        assert tar.extractfile("Dockerfile").read().decode() == found.dockerfile  # type: ignore[union-attr]


# ------------------------------------------------------------------------------------------ lock file


def _entry(found: inputs.ImageInputs, repository: str = "r.example/x") -> lock.LockEntry:
    return lock.LockEntry(
        repository=repository,
        tag=found.tag(repository),
        digest="sha256:" + "a" * 64,
        inputs_hash=found.inputs_hash,
        base_image=found.base_image,
        jax_version="0.10.2",
        python_version=PY,
    )


def test_apply_lock_pins_the_digest_for_unchanged_inputs(tmp_path: Path) -> None:
    job = job_at(write_job(tmp_path, {"repository": "r.example/x", "base_image": BASE, "source_dir": "src"}))
    assert apply_lock(job) is job, "no lock file: nothing to pin"
    lock.record(spec.lock_path(job), job.name, _entry(spec.collect(job)))
    lock.record(spec.lock_path(job), "other-job", _entry(spec.collect(job)))
    assert set(json.loads((tmp_path / "pwdeploy-sidecar.lock").read_text())["jobs"]) == {"sc-test", "other-job"}
    pinned = apply_lock(job)
    assert pinned.sidecar.image == "r.example/x@sha256:" + "a" * 64
    assert pinned.sidecar.repository == job.sidecar.repository and pinned.tpu == job.tpu


def test_lock_file_is_readable_like_the_config_it_sits_beside(tmp_path: Path) -> None:
    job = job_at(write_job(tmp_path, {"repository": "r.example/x", "base_image": BASE}))
    path = spec.lock_path(job)
    previous = os.umask(0o022)
    try:
        lock.record(path, job.name, _entry(spec.collect(job)))
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        path.chmod(0o664)
        lock.record(path, "other-job", _entry(spec.collect(job)))
        assert stat.S_IMODE(path.stat().st_mode) == 0o664, "a rewrite keeps the mode the file had"
    finally:
        os.umask(previous)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".pwdeploy-sidecar")] == []


def test_apply_lock_warns_and_pins_nothing_when_inputs_changed(tmp_path: Path) -> None:
    job = job_at(write_job(tmp_path, {"repository": "r.example/x", "base_image": BASE, "source_dir": "src"}))
    lock.record(spec.lock_path(job), job.name, _entry(spec.collect(job)))
    (tmp_path / "src" / "mypkg" / "__init__.py").write_text("changed = True\n")
    pinned, warnings = pin.pin_pushed(job)
    assert pinned is job
    assert len(warnings) == 1 and "changed since r.example/x@sha256:" in warnings[0]


def test_apply_lock_leaves_explicit_images_and_refuses_other_repositories(tmp_path: Path) -> None:
    job = job_at(write_job(tmp_path, {"repository": "r.example/x", "base_image": BASE}))
    lock.record(spec.lock_path(job), job.name, _entry(spec.collect(job), repository="r.example/elsewhere"))
    with pytest.raises(ConfigError, match=r"records the image of sc-test in 'r.example/elsewhere', not in 'r.exa"):
        apply_lock(job)
    explicit = job_at(write_job(tmp_path, {"image": "r.example/pre:1", "repository": "r.example/elsewhere"}))
    assert apply_lock(explicit).sidecar.image == "r.example/pre:1"


def test_render_pins_locked_digest_and_stale_lock_is_explained(runner: CliRunner, tmp_path: Path) -> None:
    job = job_at(write_job(tmp_path, {"repository": "r.example/x", "base_image": BASE, "source_dir": "src"}))
    lock.record(spec.lock_path(job), job.name, _entry(spec.collect(job)))
    result = runner.invoke(cli, ["render", "-f", str(tmp_path / "job.yaml"), "--no-validate"])
    assert result.exit_code == 0, result.output
    (jobset,) = yaml.safe_load_all(result.stdout)
    worker = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == ids.WORKER_JOB)
    (sidecar,) = worker["template"]["spec"]["template"]["spec"]["initContainers"]
    assert sidecar["name"] == ids.SIDECAR_CONTAINER and sidecar["image"] == "r.example/x@sha256:" + "a" * 64
    (tmp_path / "src" / "mypkg" / "__init__.py").write_text("changed = True\n")
    result = runner.invoke(cli, ["render", "-f", str(tmp_path / "job.yaml"), "--no-validate"])
    assert result.exit_code == 2 and "inputs of sc-test changed since" in result.stderr


@pytest.mark.parametrize(
    "text", ["{not json", '{"version": 99, "jobs": {}}', '{"version": 1, "jobs": {"a": {"x": 1}}}']
)
def test_unreadable_lock_file_is_a_clear_error(tmp_path: Path, text: str) -> None:
    (tmp_path / "pwdeploy-sidecar.lock").write_text(text)
    with pytest.raises(ConfigError, match=r"pwdeploy-sidecar\.lock"):
        lock.read_lock(tmp_path / "pwdeploy-sidecar.lock")


# ------------------------------------------------------------------------------------------ build log, engine seam


class Recorder:
    def __init__(self) -> None:
        self.events: list[str] = []

    def step(self, step: engine.BuildStep) -> None:
        self.events.append(f"STEP {step}")

    def line(self, text: str) -> None:
        self.events.append(text)


def test_build_log_follows_classic_builder_steps() -> None:
    progress = Recorder()
    log = engine.BuildLog(progress)
    output = [
        "DEPRECATED: The legacy builder is deprecated and will be removed in a future release.",
        "            BuildKit is currently disabled; enable it by removing the DOCKER_BUILDKIT=0",
        "",
        "Sending build context to Docker daemon  10.24kB",
        "Step 1/2 : FROM base:1",
        " ---> f8118ee213db",
        "Step 2/2 : RUN pip install -r r.txt",
        " ---> Running in 383bc8cbe777",
        "ERROR: no matching distribution",
        "The command '/bin/sh -c pip install -r r.txt' returned a non-zero code: 1",
    ]
    for line in output:
        log.feed(line + "\n")
    assert progress.events[0] == "Sending build context to Docker daemon  10.24kB"
    assert "STEP step 2/2: RUN pip install -r r.txt" in progress.events
    message = log.failure("docker build of x:1")
    assert message.startswith("docker build of x:1 failed at step 2/2: RUN pip install -r r.txt; last output:")
    assert "ERROR: no matching distribution" in message and "f8118ee213db" not in message


def test_build_log_follows_buildkit_plain_steps() -> None:
    """BuildKit's --progress=plain step lines, written here by hand in its documented shape."""
    progress = Recorder()
    log = engine.BuildLog(progress)
    for line in ["#5 [2/3] COPY code/ /app/", "#5 DONE 0.1s", "#6 [stage-0 3/3] RUN pip install x", "#6 0.3 boom"]:
        log.feed(line)
    assert [e for e in progress.events if e.startswith("STEP")] == [
        "STEP step 2/3: COPY code/ /app/",
        "STEP step 3/3: RUN pip install x",
    ]
    assert log.failure("b").endswith("    #6 0.3 boom")


def test_missing_docker_cli_is_a_build_error() -> None:
    with pytest.raises(BuildError, match=r"docker CLI .* is not installed"):
        engine.DockerCli(binary="pwdeploy-no-such-docker").check()


def test_no_engine_reachable_exits_5_and_writes_nothing(runner: CliRunner, tmp_path: Path) -> None:
    if shutil.which("docker") is None:
        unavailable("the docker CLI is not installed (apt-get install docker.io)")
    path = write_job(tmp_path, {"repository": "r.example/x", "base_image": BASE, "source_dir": "src"})
    env = {"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    result = runner.invoke(cli, ["sidecar", "build", "--push", "-f", str(path)], env=env)
    assert result.exit_code == 5, result.output
    assert f"no Docker engine reachable at DOCKER_HOST=unix://{tmp_path}/no-engine.sock" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert not (tmp_path / "pwdeploy-sidecar.lock").exists()


class StandInEngine:
    """Stands in for the engine seam (no image exists until built; builds and pushes succeed at once; a built image
    has the labels its Dockerfile names), for failures after a push."""

    def __init__(self) -> None:
        self.labels: dict[str, dict[str, str]] = {}

    def check(self) -> str:
        return "stand-in"

    def image_labels(self, ref: str) -> dict[str, str] | None:
        return self.labels.get(ref)

    def build(self, context_tar: Path, tag: str, progress: engine.Progress, platform: str) -> str:
        with tarfile.open(context_tar) as tar:
            text = tar.extractfile("Dockerfile").read().decode()  # type: ignore[union-attr]
        self.labels[tag] = dict(re.findall(r'(dev\.pwdeploy\.[a-z-]+)="([^"]*)"', text))
        return "sha256:" + "b" * 64

    def push(self, tag: str, progress: engine.Progress) -> str:
        return "sha256:" + "c" * 64

    def run(self, ref: str, command: list[str]) -> engine.RunResult:
        raise AssertionError("the sidecar's JAX is checked by its base tag, before the build")

    def remove(self, ref: str) -> None:
        raise AssertionError("nothing to remove")


class FolderRemovedWhilePushing(StandInEngine):
    """The job's folder disappears while the image is pushed, so the lock file cannot be written afterwards (a
    read-only folder would not stop root, which these tests may run as)."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder

    def push(self, tag: str, progress: engine.Progress) -> str:
        shutil.rmtree(self.folder)
        return super().push(tag, progress)


def base_found(ref: Any) -> Any:
    from pwdeploy.registry.client import Lookup

    return Lookup("found", "sha256:" + "e" * 64)


def test_unwritable_lock_after_a_push_still_names_the_digest(tmp_path: Path) -> None:
    project = tmp_path / "project"
    job = job_at(write_job(project, {"repository": "r.example/x", "base_image": BASE}))
    with pytest.raises(BuildError) as caught:
        spec.build(job, FolderRemovedWhilePushing(project), Recorder(), push=True, base_lookup=base_found)
    assert str(caught.value).startswith("pushed r.example/x:")
    assert (
        f"as r.example/x@sha256:{'c' * 64}, but cannot record it in {project / 'pwdeploy-sidecar.lock'}: "
        "No such file or directory" in str(caught.value)
    )
    assert caught.value.hint is not None and f"sidecar.image: r.example/x@sha256:{'c' * 64}" in caught.value.hint


def test_build_requires_a_repository(runner: CliRunner, tmp_path: Path) -> None:
    path = write_job(tmp_path, {"image": "r.example/pre:1", "base_image": BASE})
    result = runner.invoke(cli, ["sidecar", "build", "-f", str(path)])
    assert result.exit_code == 2 and "sidecar.repository: is required to build" in result.stderr


# ------------------------------------------------------------------------------------------ the example variant

EXAMPLE = REPO / "examples" / "data_parallel" / "sidecar"


def test_example_sidecar_dockerfile(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["sidecar", "dockerfile", "-f", str(EXAMPLE / "job.yaml"), "--sidecar-python", "3.11"])
    assert result.exit_code == 0, result.output
    steps = instructions(result.stdout)
    default_repository = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways-colocated-python/sidecar"
    assert steps[0] == ("FROM", f"{default_repository}:20260423-python_3.11-jax_0.10.2")
    assert ("COPY", "code/ /app/") in steps
    assert result.stdout.startswith("# Colocated-Python sidecar image of a pwdeploy job"), "template notes left out"
    found = spec.collect(
        load_job(EXAMPLE / "job.yaml", {"sidecar.python_version": "3.11"}, installed_jax=lambda: "0.10.2")
    )
    assert [f.name for f in found.files] == [
        "pwdeploy_sidecar_imports.py",
        "requirements.txt",
        "code/dp_data/__init__.py",
    ]
    assert steps[-1] == ("RUN", "/opt/venv/bin/python /opt/pwdeploy/sidecar_imports.py dp_data")


def test_example_sidecar_code_is_deterministic_host_data() -> None:
    sys.path.insert(0, str(EXAMPLE / "src"))
    try:
        import dp_data
    finally:
        sys.path.remove(str(EXAMPLE / "src"))
    x, y = dp_data.synthetic_batch(seed=0, step=3, batch=8)
    x2, y2 = dp_data.synthetic_batch(seed=0, step=3, batch=8)
    assert x.shape == (8, dp_data.FEATURES) and y.shape == (8, 1)
    assert (x == x2).all() and (y == y2).all()
    assert not (dp_data.synthetic_batch(seed=0, step=4, batch=8)[0] == x).all()


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_keeps_steps_and_overwrites_output() -> None:
    from pwdeploy.cli.building import StreamProgress

    screen = FakeTerminal()
    progress = StreamProgress(screen)
    progress.step(engine.BuildStep(1, 2, "FROM base:1"))
    progress.line(" ---> f8118ee213db")
    progress.line("Successfully built")
    progress.step(engine.BuildStep(2, 2, "RUN pip install"))
    progress.done()
    assert screen.getvalue() == (
        "[1/2] FROM base:1\n\r\x1b[K    ---> f8118ee213db\r\x1b[K    Successfully built\r\x1b[K[2/2] RUN pip install\n"
    )
    piped = io.StringIO()
    plain = StreamProgress(piped)
    plain.step(engine.BuildStep(1, 1, "FROM base:1"))
    plain.line("output")
    assert piped.getvalue() == "[1/1] FROM base:1\noutput\n"
