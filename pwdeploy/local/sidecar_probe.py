"""`local run`'s part of the sidecar's import test (pwdeploy.sidecar_imports): with a sidecar, the script runs
once before the program, with the job's interpreter and ``sidecar.source_dir`` alone on PYTHONPATH (the sidecar's
/app), so a job module that imports only from the job's own folder, or a missing cloudpickle or orbax-checkpoint,
is found before an image is built. A failure is a warning: locally the program runs without the sidecar."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from pwdeploy import sidecar_imports
from pwdeploy.config import JobConfig

TIMEOUT_S = 120.0


def interpreter(command: Sequence[str]) -> str:
    """The program's Python when its command starts with one (``python3 train.py``), else the one running here."""
    first = Path(command[0]).name if command else ""
    return command[0] if first.startswith("python") else sys.executable


def sidecar_import_warnings(
    job: JobConfig, command: Sequence[str], env: Mapping[str, str], cwd: Path, say: Callable[[str], None]
) -> None:
    """Run the import test as the sidecar would; say a warning naming what fails (nothing when it passes)."""
    if not job.sidecar.enabled:
        return
    source = job.sidecar.source_dir
    child = {**env, "PYTHONPATH": str(source.resolve()) if source is not None else ""}
    args = [interpreter(command), "-c", sidecar_imports.SCRIPT, *sidecar_imports.arguments(job)]
    try:
        done = subprocess.run(
            args, env=child, cwd=os.fspath(cwd), capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        say(f"warning: the sidecar's import test did not run here ({exc})")
        return
    if done.returncode != 0:
        lines = (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}").splitlines()
        say(
            f"warning: {lines[-1]}, with sidecar.source_dir alone on the path as in the sidecar's /app: the workers' "
            "colocated Python would fail the same way (sidecar.requirements, sidecar.source_dir)"
        )
