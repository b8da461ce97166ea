"""The sidecar lock file: which pushed digest holds a job's current sidecar inputs.

``pwdeploy sidecar build --push`` records ``<repository>@sha256:...`` with the inputs hash in
``pwdeploy-sidecar.lock`` next to the job config (one entry per job name; commit it with the config).
``apply_lock`` pins that digest into the job when sidecar.image is unset and the inputs still hash the same.
When they changed, it warns and pins nothing: rendering then stops with "no sidecar image has been pushed",
while commands that do not need the image (local runs, the build itself) go on.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pwdeploy.atomic import write_text_atomic
from pwdeploy.config import JobConfig
from pwdeploy.errors import ConfigError

FORMAT_VERSION = 1
LOCK_NAME = "pwdeploy-sidecar.lock"


@dataclass(frozen=True)
class LockEntry:
    repository: str
    tag: str
    digest: str  # sha256:...
    inputs_hash: str
    base_image: str
    jax_version: str
    python_version: str

    @property
    def image(self) -> str:
        return f"{self.repository}@{self.digest}"


def lock_path(job: JobConfig) -> Path:
    return job.base_dir / LOCK_NAME


def read_lock(path: Path) -> dict[str, LockEntry]:
    """Entries by job name; {} when there is no lock file. ConfigError for a file that is not a lock."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(
            None, f"cannot read the sidecar lock file {path}: {exc}", hint="delete it and push again"
        ) from None
    try:
        if data.get("version") != FORMAT_VERSION:
            raise ValueError(f"version {data.get('version')!r}, expected {FORMAT_VERSION}")
        return {str(name): LockEntry(**entry) for name, entry in data["jobs"].items()}
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            None, f"{path} is not a pwdeploy sidecar lock file ({exc})", hint="delete it and push again"
        ) from None


def record(path: Path, job_name: str, entry: LockEntry) -> None:
    """Add or replace one job's entry; the file is replaced atomically, never left half-written."""
    entries = read_lock(path)
    entries[job_name] = entry
    data: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "jobs": {name: dataclasses.asdict(e) for name, e in sorted(entries.items())},
    }
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")


def current_entry(job: JobConfig) -> LockEntry | None:
    """The lock entry for this job when its repository matches, without checking that the inputs are unchanged."""
    if job.sidecar.repository is None:
        return None
    entry = read_lock(lock_path(job)).get(job.name)
    return entry if entry is not None and entry.repository == job.sidecar.repository else None


def apply_lock(job: JobConfig, warn: Callable[[str], None] | None = None) -> JobConfig:
    """The job with sidecar.image pinned to the locked digest, when unset and the inputs are unchanged."""
    if job.sidecar.image is not None:
        return job
    entry = current_entry(job)
    if entry is None:
        return job
    from pwdeploy.sidecar.inputs import collect

    inputs = collect(job)
    if inputs.inputs_hash != entry.inputs_hash:
        (warn or _warn_stderr)(
            f"the sidecar inputs of {job.name} changed since {entry.image} was pushed "
            f"(recorded in {lock_path(job)}); not using it. Run `pwdeploy sidecar build --push` to push the "
            "current inputs, or set sidecar.image."
        )
        return job
    return job._replace(sidecar=job.sidecar._replace(image=entry.image))


def _warn_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)
