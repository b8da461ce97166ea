"""Job config files for tests: one writer, so every test's job starts from the same small valid base."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

# What every test job needs and few tests vary: a one-host slice, the jax the CLI fixtures report, a bucket.
BASE: dict[str, Any] = {"pathways_version": "0.10.2", "tpu": {"type": "v5p-8"}, "storage": {"scratch": "gs://bkt/s"}}


def write_job(folder: Path, name: str, *, file: str = "job.yaml", **fields: Any) -> Path:
    """``folder/file`` holding BASE with ``name`` and ``fields`` (top-level fields and whole sections: a section
    given here replaces BASE's); the folder is made when missing."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file
    path.write_text(yaml.safe_dump({"name": name, **BASE, **fields}), encoding="utf-8")
    return path


def edit_job(path: Path, change: Callable[[dict[str, Any]], object]) -> None:
    """Rewrite the job file at ``path`` after ``change`` edited its mapping in place."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
