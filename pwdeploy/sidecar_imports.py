"""The colocated-Python sidecar's import test: what the workers' sidecar must import, tried where it can be.

Colocated Python ships a function to the sidecar pickled by reference (cloudpickle), so the sidecar imports the
module that defines it: the job's own modules (``sidecar.source_dir``, in ``/app``) and, for checkpoints written
through the sidecar (Orbax's Pathways handler by default, and multi-tier checkpointing), orbax-checkpoint at the
job's version (docs/checkpoints.md). A module missing there fails only once the job runs on the cluster. The test
runs twice: as a step of the sidecar image's build (``pwdeploy sidecar build``: the build fails, naming what does
not import), and in ``pwdeploy local run`` with the job's interpreter and ``sidecar.source_dir`` alone on the path
(a warning), so a module that imports only from the job's own folder is found before any image is built.

The script is a file of its own in the image (``SCRIPT``, run with the arguments ``arguments`` gives): it imports
cloudpickle and each module named, then orbax-checkpoint when asked (``--orbax=VERSION`` for that version,
``--orbax=`` for any), and exits 1 with one line naming each failure.
"""

from __future__ import annotations

import re
from pathlib import Path

from pwdeploy.config import JobConfig

SCRIPT_NAME = "pwdeploy_sidecar_imports.py"  # in the build context, and /opt/pwdeploy/sidecar_imports.py in the image
ORBAX = "orbax-checkpoint"

SCRIPT = '''\
"""pwdeploy's import test of a colocated-Python sidecar: cloudpickle, the job's modules and, when asked,
orbax-checkpoint (at a version) must import here, as colocated Python imports them on the workers."""
import importlib
import importlib.metadata
import sys


def main(argv):
    orbax = None
    names = ["cloudpickle"]
    for arg in argv:
        if arg.startswith("--orbax="):
            orbax = arg.split("=", 1)[1]
        else:
            names.append(arg)
    problems = []
    for name in names + (["orbax.checkpoint"] if orbax is not None else []):
        try:
            importlib.import_module(name)
        except Exception as exc:  # any failure at import is the sidecar's failure too
            problems.append(f"{name} does not import ({type(exc).__name__}: {exc})")
    if orbax:
        found = importlib.metadata.version("orbax-checkpoint") if "orbax.checkpoint" in sys.modules else None
        if found is not None and found != orbax:
            problems.append(f"orbax-checkpoint is {found}, the job's is {orbax}")
    if problems:
        print("pwdeploy sidecar import test failed: " + "; ".join(problems), file=sys.stderr)
        return 1
    print("pwdeploy sidecar import test: " + ", ".join(names + (["orbax-checkpoint"] if orbax is not None else [])))
    return 0


sys.exit(main(sys.argv[1:]))
'''

_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#,]+)")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def modules(source_dir: Path | None) -> list[str]:
    """The top-level modules and packages of ``sidecar.source_dir`` (what ``/app`` holds), sorted."""
    if source_dir is None or not source_dir.is_dir():
        return []
    found = set()
    for entry in source_dir.iterdir():
        name = entry.stem if entry.suffix == ".py" and entry.is_file() else entry.name
        package = entry.is_dir() and (entry / "__init__.py").is_file()
        if _MODULE.fullmatch(name) and (package or (entry.is_file() and entry.suffix == ".py")):
            found.add(name)
    return sorted(found)


def pins(requirements: Path | None) -> dict[str, str]:
    """``name==version`` lines of a requirements file, by normalised name (PEP 503); nothing when unreadable."""
    if requirements is None:
        return {}
    try:
        lines = requirements.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return {}
    found = {}
    for line in lines:
        matched = _PIN.match(line)
        if matched:
            found[re.sub(r"[-_.]+", "-", matched.group(1)).lower()] = matched.group(2)
    return found


def job_orbax(job: JobConfig) -> str | None:
    """The orbax-checkpoint version the job image pins (``image.requirements``), if it pins one."""
    return pins(job.image.requirements).get(ORBAX)


def arguments(job: JobConfig) -> list[str]:
    """The script's arguments for this job: its modules, and orbax-checkpoint at the job's pinned version when
    the job image pins one, at any version with ``mtc.enabled`` (Orbax's MTC runs in the sidecar)."""
    orbax = job_orbax(job)
    wanted = [f"--orbax={orbax}"] if orbax is not None else (["--orbax="] if job.mtc.enabled else [])
    return [*modules(job.sidecar.source_dir), *wanted]


def orbax_mismatch(job: JobConfig) -> str | None:
    """A warning when the sidecar's requirements pin another orbax-checkpoint than the job image's."""
    ours, theirs = job_orbax(job), pins(job.sidecar.requirements).get(ORBAX)
    if ours is None or theirs is None or ours == theirs:
        return None
    return (
        f"sidecar.requirements pins {ORBAX}=={theirs}, image.requirements {ours}: checkpoints written through "
        f"the sidecar run its Orbax against the job's; pin {ours} in both (the build's import test refuses another)"
    )
