"""The README's first set-up command, run verbatim on a copy of the checkout: it creates its own virtual
environment, installs pwdeploy into it and runs the example job (about 40 s with a warm pip cache)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


def setup_command() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    first_block: str = re.findall(r"```bash\n(.*?)```", readme, flags=re.S)[0]
    return first_block.strip()


def copy_checkout(destination: Path) -> None:
    """The files a clone would have (tracked, plus new files git does not ignore): no .venv, no build outputs."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():  # a tracked file deleted in the working tree is not in a clone either
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)


def user_pip_cache() -> str:
    """pip's own cache, not the test cache folder conftest points XDG_CACHE_HOME at, so wheels are reused."""
    return os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_readme_setup_command_works_in_a_fresh_virtual_environment(tmp_path: Path) -> None:
    command = setup_command()
    assert "python3 -m venv .venv" in command and "pwdeploy local run" in command
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    copy_checkout(checkout)
    # As a user's shell would be: no virtual environment active and nothing of this checkout on the import path.
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PIP_CACHE_DIR"] = user_pip_cache()
    if sys.prefix != sys.base_prefix:  # the tests run in a virtual environment (scripts/test.sh's): leave it
        own_bin = str(Path(sys.prefix) / "bin")
        env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != own_bin)
    done = subprocess.run(["bash", "-c", command], cwd=checkout, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    venv_python = checkout / ".venv" / "bin" / "python"
    assert venv_python.exists(), "the command did not create .venv"
    located = subprocess.run(
        [str(venv_python), "-c", "import pwdeploy; print(pwdeploy.__file__)"],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert Path(located).is_relative_to(checkout), located
    assert '"final_loss"' in done.stdout, done.stdout[-3000:]
