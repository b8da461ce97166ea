"""Sidecar builds against a real Docker engine and the local registry on 127.0.0.1:5000.

The engine is the one DOCKER_HOST names, or one this module starts with scripts/docker-services.sh. Without
docker installed (or without root) the tests skip with the reason; with CI=true they fail (tests/services.py).

No image can be pulled here, so the base is a busybox-static rootfs imported with `docker import` that imitates
the colocated-Python base: /opt/venv/server_constraints.txt, an entrypoint, and a stand-in /opt/venv/bin/pip (a
busybox sh script that records its arguments and requirements, and fails on a requirement named FAIL-INSTALL).
"""

from __future__ import annotations

import io
import os
import shutil
import struct
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from pwdeploy import __version__
from pwdeploy.cli import cli
from pwdeploy.config import installed_jax_version, load_job
from pwdeploy.images import pin
from pwdeploy.images import sidecar_image as spec
from tests import jobfiles
from tests.conftest import REPO
from tests.services import unavailable

pytestmark = pytest.mark.docker

PY = f"{sys.version_info.major}.{sys.version_info.minor}"
REGISTRY = "127.0.0.1:5000"
SCRIPT = REPO / "scripts" / "docker-services.sh"

FAKE_PIP = """#!/bin/sh
# Stand-in for pip in the test base image: records its arguments and the requirements it is given.
echo "pip $*" >> /opt/venv/pip-calls.log
while [ $# -gt 0 ]; do
  if [ "$1" = "-r" ]; then
    cat "$2" >> /opt/venv/pip-calls.log
    if grep -q FAIL-INSTALL "$2"; then
      echo "ERROR: Could not find a version that satisfies the requirement FAIL-INSTALL"
      exit 1
    fi
  fi
  shift
done
"""
ENTRYPOINT = '#!/bin/sh\necho "stand-in colocated-python server: $*"\n'
FAKE_PYTHON = """#!/bin/sh
# Stand-in for the base's Python, for the import test only: records its arguments, and fails on a module named
# fail_import as the real script fails on a module that does not import.
echo "python $*" >> /opt/venv/python-calls.log
for arg in "$@"; do
  if [ "$arg" = "fail_import" ]; then
    echo "pwdeploy sidecar import test failed: fail_import does not import (ImportError: stand-in)" >&2
    exit 1
  fi
done
"""


def _docker(env: dict[str, str], *args: str, stdin: bytes | None = None) -> str:
    result = subprocess.run(["docker", *args], env=env, input=stdin, capture_output=True, check=False)
    assert result.returncode == 0, f"docker {' '.join(args)}: {result.stderr.decode()}"
    return result.stdout.decode()


def _registry_up() -> bool:
    import urllib.request

    try:
        urllib.request.urlopen(f"http://{REGISTRY}/v2/", timeout=2).close()
    except OSError:
        return False
    return True


@pytest.fixture(scope="session")
def docker_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment for docker commands: DOCKER_HOST of a running engine; the registry is up."""
    env = dict(os.environ)
    started: Path | None = None
    if shutil.which("docker") is None:
        unavailable("the docker CLI is not installed (apt-get install docker.io)")
    if not env.get("DOCKER_HOST"):
        missing = [tool for tool in ("dockerd", "docker-registry") if shutil.which(tool) is None]
        if missing:
            unavailable(f"{', '.join(missing)} not installed (apt-get install docker.io docker-registry)")
        if os.geteuid() != 0:
            unavailable("starting dockerd needs root; or set DOCKER_HOST to a running engine")
        started = tmp_path_factory.mktemp("docker")
        result = subprocess.run(["bash", str(SCRIPT), "start", str(started)], capture_output=True, text=True)
        assert result.returncode == 0, f"{SCRIPT} start failed:\n{result.stderr}"
        env["DOCKER_HOST"] = result.stdout.strip().rsplit("=", 1)[1]
    check = subprocess.run(["docker", "version"], env=env, capture_output=True, text=True)
    if check.returncode != 0:
        unavailable(f"no Docker engine answers at DOCKER_HOST={env['DOCKER_HOST']}: {check.stderr.strip()[-300:]}")
    if not _registry_up():
        unavailable(f"no registry on {REGISTRY} (scripts/docker-services.sh start runs one)")
    yield env
    if started is not None:
        subprocess.run(["bash", str(SCRIPT), "stop", str(started)], capture_output=True, check=False)


def _is_static_elf(path: Path) -> bool:
    """True for a 64-bit ELF without an interpreter (PT_INTERP), i.e. one that runs in an empty rootfs."""
    data = path.read_bytes()
    if data[:5] != b"\x7fELF\x02":
        return False
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    return all(struct.unpack_from("<I", data, phoff + i * phentsize)[0] != 3 for i in range(phnum))


@pytest.fixture(scope="session")
def base_image(docker_env: dict[str, str]) -> str:
    """A tiny stand-in for the colocated-Python base, tagged like the real one for this Python and JAX."""
    busybox = Path(shutil.which("busybox") or "/bin/busybox")
    if not busybox.exists() or not _is_static_elf(busybox):
        unavailable("a static busybox is needed for the test base image (apt-get install busybox-static)")
    tag = f"pwdeploy-test/sidecar-base:20260101-python_{PY}-jax_{installed_jax_version() or '0.10.2'}"
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:

        def add(name: str, data: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))

        for directory in ("bin", "tmp", "opt", "opt/venv", "opt/venv/bin"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)
        add("bin/busybox", busybox.read_bytes(), 0o755)
        for applet in ("sh", "cat", "echo", "grep", "ls"):
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        add("opt/venv/bin/pip", FAKE_PIP.encode(), 0o755)
        add("opt/venv/bin/python", FAKE_PYTHON.encode(), 0o755)
        add("opt/venv/server_constraints.txt", b"jax==0.10.2\njaxlib==0.10.2\n")
        add("opt/entrypoint.sh", ENTRYPOINT.encode(), 0o755)
    _docker(
        docker_env, "import", "--change", 'ENTRYPOINT ["/opt/entrypoint.sh"]', "--change", "CMD [\"--serve\"]",
        "--change", "ENV PATH=/opt/venv/bin:/bin", "-", tag, stdin=out.getvalue(),
    )  # fmt: skip
    return tag


@pytest.fixture
def project(tmp_path: Path, base_image: str) -> Path:
    """A job whose sidecar has code (with a unique marker, so no earlier image matches) and requirements."""
    marker = uuid.uuid4().hex
    (tmp_path / "src" / "mypkg").mkdir(parents=True)
    (tmp_path / "src" / "mypkg" / "__init__.py").write_text(f"MARKER = {marker!r}\n")
    (tmp_path / "requirements.txt").write_text("grain==0.2.10\n")
    sidecar = {
        "repository": f"{REGISTRY}/pwdeploy-test/sidecar-{marker[:8]}",
        "base_image": base_image,
        "source_dir": "src",
        "requirements": "requirements.txt",
        "pip_args": ["--no-index"],
    }
    jobfiles.write_job(tmp_path, "sc-engine", headless=True, sidecar=sidecar)
    return tmp_path


def _sidecar(runner: CliRunner, env: dict[str, str], project: Path, *args: str) -> Any:
    return runner.invoke(cli, ["sidecar", "build", "-f", str(project / "job.yaml"), *args], env=env)


def test_build_push_pull_by_digest_and_run(runner: CliRunner, docker_env: dict[str, str], project: Path) -> None:
    result = _sidecar(runner, docker_env, project, "--push")
    assert result.exit_code == 0, result.output
    image = result.stdout.strip()
    repository = image.split("@")[0]
    assert image.startswith(f"{REGISTRY}/pwdeploy-test/sidecar-") and "@sha256:" in image
    assert "[4/8] RUN /opt/venv/bin/pip install" in result.stderr and f"as {image}" in result.stderr
    assert "for linux/amd64; jax checked by the base image's tag (jax_V), before the build" in result.stderr
    # The lock names this digest, and the job now resolves its sidecar to it.
    job = load_job(project / "job.yaml")
    assert pin.pin_pushed(job)[0].sidecar.image == image
    found = spec.collect(job)
    # Pull by digest from the registry (after dropping the local copies), then inspect and run it.
    _docker(docker_env, "image", "rm", found.tag(repository))
    _docker(docker_env, "pull", image)
    assert _docker(docker_env, "image", "inspect", "--format", "{{.Os}}/{{.Architecture}}", image).strip() == (
        "linux/amd64"
    )
    labels = yaml.safe_load(_docker(docker_env, "image", "inspect", "--format", "{{json .Config.Labels}}", image))
    assert labels == {
        "dev.pwdeploy.version": __version__,
        "dev.pwdeploy.jax-version": job.pathways_version,
        "dev.pwdeploy.python-version": PY,
        "dev.pwdeploy.inputs-hash": found.inputs_hash,
    }
    served = _docker(docker_env, "run", "--rm", "--network", "none", image)
    assert served.strip() == "stand-in colocated-python server: --serve", "the base entrypoint and cmd are kept"
    script = (
        "cat /app/mypkg/__init__.py; cat /opt/venv/pip-calls.log; echo PYTHONPATH=$PYTHONPATH; "
        "cat /opt/venv/python-calls.log"
    )
    inside = _docker(docker_env, "run", "--rm", "--network", "none", "--entrypoint", "/bin/sh", image, "-c", script)
    marker = (project / "src" / "mypkg" / "__init__.py").read_text()
    assert inside.splitlines() == [
        marker.strip(),
        "pip install --no-cache-dir -c /opt/venv/server_constraints.txt --no-index -r /opt/pwdeploy/requirements.txt",
        "grain==0.2.10",
        "PYTHONPATH=/app",
        "python /opt/pwdeploy/sidecar_imports.py mypkg",  # the import test ran in the build
    ]


def test_a_module_that_does_not_import_fails_the_build_naming_it(
    runner: CliRunner, docker_env: dict[str, str], project: Path
) -> None:
    (project / "src" / "fail_import.py").write_text("raise ImportError\n")
    result = _sidecar(runner, docker_env, project)
    assert result.exit_code != 0
    assert "failed at step 8/8: RUN /opt/venv/bin/python /opt/pwdeploy/sidecar_imports.py fail_import" in result.stderr
    assert "pwdeploy sidecar import test failed: fail_import does not import" in result.stderr
    assert not (project / "pwdeploy-sidecar.lock").exists()


def test_unchanged_inputs_are_up_to_date_and_changes_rebuild(
    runner: CliRunner, docker_env: dict[str, str], project: Path
) -> None:
    first = _sidecar(runner, docker_env, project)
    assert first.exit_code == 0 and "built " in first.stderr, first.output
    again = _sidecar(runner, docker_env, project)
    assert again.exit_code == 0 and again.stdout == first.stdout
    assert "up to date" in again.stderr and "[1/" not in again.stderr
    (project / "src" / "mypkg" / "extra.py").write_text("X = 1\n")
    changed = _sidecar(runner, docker_env, project)
    assert changed.exit_code == 0 and "built " in changed.stderr and changed.stdout != first.stdout
    pushed = _sidecar(runner, docker_env, project, "--push")
    assert pushed.exit_code == 0 and "pushed " in pushed.stderr and "[1/" not in pushed.stderr, pushed.output
    repeat = _sidecar(runner, docker_env, project, "--push")
    assert repeat.exit_code == 0 and repeat.stdout == pushed.stdout and "up to date" in repeat.stderr


def test_failed_build_names_the_step_and_writes_no_lock(
    runner: CliRunner, docker_env: dict[str, str], project: Path
) -> None:
    (project / "requirements.txt").write_text("FAIL-INSTALL==1\n")
    result = _sidecar(runner, docker_env, project, "--push")
    assert result.exit_code == 5, result.output
    message = result.stderr.split("error: ", 1)[1]
    assert (
        message.startswith("docker build of 127.0.0.1:5000/pwdeploy-test/sidecar-")
        and "failed at step 4/8: RUN /opt/venv/bin/pip install" in message
    )
    assert "ERROR: Could not find a version that satisfies the requirement FAIL-INSTALL" in message
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert not (project / "pwdeploy-sidecar.lock").exists()
    assert [p.name for p in project.iterdir() if p.name.startswith(".pwdeploy-sidecar.lock")] == []


def test_example_sidecar_variant_builds_on_the_stand_in_base(
    runner: CliRunner, docker_env: dict[str, str], base_image: str, tmp_path: Path
) -> None:
    example = tmp_path / "sidecar"
    shutil.copytree(REPO / "examples" / "data_parallel" / "sidecar", example)  # the lock file lands in the copy
    repository = f"{REGISTRY}/pwdeploy-test/example-{uuid.uuid4().hex[:8]}"
    (example / "src" / "dp_data" / "run_marker.txt").write_text(repository)  # a fresh hash for this run
    # The stand-in base runs this machine's Python; the example pins the cluster's (3.12): follow the base.
    args = ["--sidecar-base-image", base_image, "--sidecar-python", PY, "--sidecar-repository", repository, "--push"]
    result = _sidecar(runner, docker_env, example, *args)
    assert result.exit_code == 0, result.output
    image = result.stdout.strip()
    assert image.startswith(f"{repository}@sha256:") and (example / "pwdeploy-sidecar.lock").is_file()
    listing = _docker(docker_env, "run", "--rm", "--network", "none", "--entrypoint", "/bin/sh", image, "-c",
                      "ls /app/dp_data; cat /opt/venv/pip-calls.log")  # fmt: skip
    assert listing.splitlines()[:2] == ["__init__.py", "run_marker.txt"]
    assert "numpy" in listing.splitlines()


def test_failed_push_exits_5_and_keeps_the_lock(runner: CliRunner, docker_env: dict[str, str], project: Path) -> None:
    assert _sidecar(runner, docker_env, project, "--push").exit_code == 0
    before = (project / "pwdeploy-sidecar.lock").read_text()
    (project / "requirements.txt").write_text("grain==0.2.11\n")
    unreachable = "127.0.0.1:9/pwdeploy-test/sidecar"  # the discard port: nothing listens there
    result = _sidecar(runner, docker_env, project, "--push", "--sidecar-repository", unreachable)
    assert result.exit_code == 5, result.output
    assert f"docker push of {unreachable}:" in result.stderr and "connection refused" in result.stderr
    assert (project / "pwdeploy-sidecar.lock").read_text() == before
