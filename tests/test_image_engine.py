"""Job image builds against a real Docker engine and the local registry on 127.0.0.1:5000.

No image can be pulled here, so the base is an imitation of an official Python image: a busybox-static rootfs
imported with `docker import` whose `python` is a busybox sh script. It records every `python -m pip install`
(arguments and requirement files) in /imitation/pip-calls.log, fails on a requirement named FAIL-INSTALL, and
answers `python -c "import jax; print(jax.__version__)"` with the version the last pip call pinned (jax==V), or
with $IMITATION_JAX when the base sets it (a base whose jax differs from the one the job needs); given an argument
after the script, it imitates the Dockerfile's check step (tests/test_image_inputs.py runs the real one): it prints
`jax V` and exits 1 with a message unless V equals the argument.
Engine and registry come from tests/test_sidecar_engine.py (skip with the reason, or fail with CI=true:
tests/services.py).
"""

from __future__ import annotations

import importlib.metadata
import io
import shutil
import tarfile
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from pwdeploy import __version__
from pwdeploy.cli import cli
from pwdeploy.config import load_job
from pwdeploy.images import job_image as spec
from pwdeploy.images import pin
from tests import jobfiles
from tests import test_sidecar_engine as engine_fixtures
from tests.services import unavailable
from tests.test_sidecar_engine import PY, REGISTRY, _docker

PATHWAYSUTILS = importlib.metadata.version("pathwaysutils")  # the job image pins the one installed here

pytestmark = pytest.mark.docker
docker_env = engine_fixtures.docker_env  # the running engine (session fixture)

IMITATION_PYTHON = """#!/bin/sh
# Imitation of python in a test base image (see tests/test_image_engine.py).
LOG=/imitation/pip-calls.log
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  shift 2
  echo "pip $*" >> $LOG
  while [ $# -gt 0 ]; do
    case "$1" in
      -r)
        cat "$2" >> $LOG
        if grep -q FAIL-INSTALL "$2"; then
          echo "ERROR: Could not find a version that satisfies the requirement FAIL-INSTALL"
          exit 1
        fi
        shift ;;
      jax==*) echo "${1#jax==}" > /imitation/jax-version ;;
    esac
    shift
  done
  exit 0
fi
if [ "$1" = "-c" ]; then
  case "$2" in
    *"import jax"* | *"import sys, jax"*)
      if [ -n "$IMITATION_JAX" ]; then found="$IMITATION_JAX"
      elif [ -f /imitation/jax-version ]; then found=$(cat /imitation/jax-version)
      else echo "ModuleNotFoundError: No module named 'jax'" >&2; exit 1; fi
      if [ $# -ge 3 ]; then
        # The Dockerfile's check step: prints the version, fails unless it equals sys.argv[1].
        echo "jax $found"
        if [ "$found" != "$3" ]; then echo "jax $found is installed, but pathways_version is $3" >&2; exit 1; fi
        exit 0
      fi
      echo "$found"; exit 0 ;;
  esac
fi
echo "imitation python: unsupported arguments: $*" >&2
exit 2
"""


def _imitation_python_base(env: dict[str, str], tag: str, *changes: str) -> str:
    busybox = Path(shutil.which("busybox") or "/bin/busybox")
    if not busybox.exists() or not engine_fixtures._is_static_elf(busybox):
        unavailable("a static busybox is needed for the test base image (apt-get install busybox-static)")
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for directory in ("bin", "tmp", "usr", "usr/local", "usr/local/bin", "imitation"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory in ("tmp", "imitation") else 0o755
            tar.addfile(info)
        for name, data in (("bin/busybox", busybox.read_bytes()), ("usr/local/bin/python", IMITATION_PYTHON.encode())):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        for applet in ("sh", "cat", "echo", "grep", "ls", "pwd"):
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        link = tarfile.TarInfo("usr/local/bin/python3")
        link.type, link.linkname = tarfile.SYMTYPE, "python"
        tar.addfile(link)
    args = ["--change", "ENV PATH=/usr/local/bin:/bin", "--change", 'CMD ["python3"]']
    for change in changes:
        args += ["--change", change]
    _docker(env, "import", *args, "-", tag, stdin=out.getvalue())
    return tag


@pytest.fixture(scope="session")
def python_base(docker_env: dict[str, str]) -> str:
    return _imitation_python_base(docker_env, f"pwdeploy-test/imitation-python:{PY}-slim")


@pytest.fixture(scope="session")
def python_base_with_other_jax(docker_env: dict[str, str]) -> str:
    return _imitation_python_base(
        docker_env, f"pwdeploy-test/imitation-python:{PY}-jax-0.9.0", "ENV IMITATION_JAX=0.9.0"
    )


@pytest.fixture
def project(tmp_path: Path, python_base: str) -> Path:
    """A job folder: a training script that imports pwdeploy (with a unique marker), requirements, the config."""
    marker = uuid.uuid4().hex
    (tmp_path / "train.py").write_text(f"from pwdeploy import runtime\nMARKER = {marker!r}\n")
    (tmp_path / "requirements.txt").write_text("grain==0.2.10\n")
    (tmp_path / ".env").write_text("TOKEN=1\n")  # copied (with a warning) until .dockerignore names it
    image = {
        "repository": f"{REGISTRY}/pwdeploy-test/job-{marker[:8]}",
        "base": python_base,
        "requirements": "requirements.txt",
        "pip_args": ["--no-index"],
    }
    jobfiles.write_job(tmp_path, "img-engine", main={"command": "python3 train.py --steps 3"}, image=image)
    return tmp_path


def _image(runner: CliRunner, env: dict[str, str], project: Path, *args: str) -> Any:
    return runner.invoke(cli, ["image", "build", "-f", str(project / "job.yaml"), *args], env=env)


def test_build_push_on_imitation_python_base_installs_jax_and_render_pins_it(
    runner: CliRunner, docker_env: dict[str, str], project: Path
) -> None:
    result = _image(runner, docker_env, project, "--push")
    assert result.exit_code == 0, result.output
    image = result.stdout.strip()
    assert image.startswith(f"{REGISTRY}/pwdeploy-test/job-") and "@sha256:" in image
    assert "for linux/amd64; jax checked by a step of the build and `python -c" in result.stderr
    assert "warning: image.source_dir" in result.stderr and ".env look like credentials" in result.stderr
    assert (project / "pwdeploy-image.lock").is_file() and not (project / "pwdeploy-sidecar.lock").exists()
    job = load_job(project / "job.yaml", installed_jax=lambda: "0.10.2")
    found = spec.collect(job, project / "job.yaml")
    _docker(docker_env, "image", "rm", found.tag(image.split("@")[0]))
    _docker(docker_env, "pull", image)
    assert _docker(docker_env, "image", "inspect", "--format", "{{.Os}}/{{.Architecture}}", image).strip() == (
        "linux/amd64"
    )
    labels = yaml.safe_load(_docker(docker_env, "image", "inspect", "--format", "{{json .Config.Labels}}", image))
    assert labels == {
        "dev.pwdeploy.version": __version__,
        "dev.pwdeploy.jax-version": "0.10.2",
        "dev.pwdeploy.python-version": PY,
        "dev.pwdeploy.inputs-hash": found.inputs_hash,
    }
    script = "pwd; ls; ls /opt/pwdeploy; cat /imitation/pip-calls.log"
    inside = _docker(docker_env, "run", "--rm", "--network", "none", image, "sh", "-c", script).splitlines()
    wheel = f"pwdeploy-{__version__}-py3-none-any.whl"
    assert inside == [
        "/app",  # the working directory holds the copied config folder ...
        "requirements.txt",
        "train.py",  # ... without the config file or the lock
        wheel,
        "requirements.txt",
        f"pip install --no-cache-dir --no-index jax==0.10.2 pathwaysutils=={PATHWAYSUTILS}",
        "pip install --no-cache-dir --no-index -r /opt/pwdeploy/requirements.txt jax==0.10.2 "
        f"pathwaysutils=={PATHWAYSUTILS}",
        "grain==0.2.10",
        f"pip install --no-cache-dir --no-deps /opt/pwdeploy/{wheel}",
    ]
    # render pins the main container to the pushed digest; a code change makes it stale.
    rendered = runner.invoke(cli, ["render", "-f", str(project / "job.yaml"), "--no-validate"])
    assert rendered.exit_code == 0, rendered.output
    (jobset,) = yaml.safe_load_all(rendered.stdout)
    head = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "pathways-head")
    containers = head["template"]["spec"]["template"]["spec"]["containers"]
    assert [c["image"] for c in containers if c["command"] == ["python3", "train.py", "--steps", "3"]] == [image]
    (project / "train.py").write_text("from pwdeploy import runtime\nMARKER = 'changed'\n")
    assert (
        pin.pin_pushed(load_job(project / "job.yaml", installed_jax=lambda: "0.10.2"), project / "job.yaml")[
            0
        ].main.image
        is None
    )


def test_unchanged_inputs_are_up_to_date_and_a_one_line_change_rebuilds(
    runner: CliRunner, docker_env: dict[str, str], project: Path
) -> None:
    first = _image(runner, docker_env, project)
    assert first.exit_code == 0 and "built " in first.stderr, first.output
    again = _image(runner, docker_env, project)
    assert again.exit_code == 0 and again.stdout == first.stdout
    assert "up to date" in again.stderr and "[1/" not in again.stderr
    jobfiles.edit_job(project / "job.yaml", lambda data: data["main"].update(memory="64Gi"))  # not copied: kept
    assert "up to date" in _image(runner, docker_env, project).stderr
    with (project / "train.py").open("a") as handle:
        handle.write("STEPS = 3\n")
    changed = _image(runner, docker_env, project)
    assert changed.exit_code == 0 and "built " in changed.stderr and changed.stdout != first.stdout
    jax_step = changed.stderr.split(f'"pathwaysutils=={PATHWAYSUTILS}"\n', 1)[1].split("\n[", 1)[0]
    assert "Using cache" in jax_step, "a code change must not reinstall jax"
    pushed = _image(runner, docker_env, project, "--push")
    assert pushed.exit_code == 0 and "pushed " in pushed.stderr and "[1/" not in pushed.stderr, pushed.output
    repeat = _image(runner, docker_env, project, "--push")
    assert repeat.exit_code == 0 and repeat.stdout == pushed.stdout and "up to date" in repeat.stderr


def test_imitation_base_with_another_jax_is_a_build_error_naming_both_versions(
    runner: CliRunner, docker_env: dict[str, str], project: Path, python_base_with_other_jax: str
) -> None:
    for attempt in range(2):  # the mismatching image is untagged, so a second build does not call it up to date
        result = _image(runner, docker_env, project, "--push", "--image-base", python_base_with_other_jax)
        assert result.exit_code == 5, (attempt, result.output)
        message = result.stderr.split("error: ", 1)[1]
        assert "failed at step 3/" in message and 'RUN python -c "import sys, jax;' in message
        assert "jax 0.9.0 is installed, but pathways_version is 0.10.2" in message and "[1/" in result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""
    assert not (project / "pwdeploy-image.lock").exists()


def test_failed_requirement_install_names_the_step(
    runner: CliRunner, docker_env: dict[str, str], project: Path
) -> None:
    (project / "requirements.txt").write_text("FAIL-INSTALL==1\n")
    result = _image(runner, docker_env, project, "--push")
    assert result.exit_code == 5, result.output
    assert "RUN python -m pip install --no-cache-dir --no-index -r /opt/pwdeploy/requirements.txt" in result.stderr
    assert "satisfies the requirement FAIL-INSTALL" in result.stderr
    assert not (project / "pwdeploy-image.lock").exists()
