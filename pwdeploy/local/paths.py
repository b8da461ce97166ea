"""The local folders a run creates (``local.compile_cache``, ``local.hlo_dir``, the ``.pwdeploy/`` stand-ins for
checkpoints and profiles), checked before any of them is made: a path under a file, a ``.pwdeploy`` that is a
file, a place nothing can be created in (``/proc``, a read-only mount) is a field error naming the field, its flag
and the path, and nothing is created."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from pwdeploy.errors import ConfigError, raise_all

STATE_DIR = ".pwdeploy"
# The field (and its flag) each kind of folder comes from; checkpoints and profiles are stand-ins for GCS.
FOLDER_FIELDS = {
    "compile cache": ("local.compile_cache", "--compile-cache"),
    "HLO dumps": ("local.hlo_dir", "--local-hlo-dir"),
    "checkpoints": ("storage.checkpoints", None),
    "profiles": ("storage.profiles", None),
}


def folder_problem(path: Path) -> str | None:
    """Why pwdeploy could not create (or write in) the folder ``path``, or None. Probed by making and removing a
    folder in the nearest existing one, since permissions alone do not tell (root, read-only mounts, /proc)."""
    existing = path
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    where = "" if existing == path else f" (in the way of {path})"
    if not existing.is_dir():
        what = "a file" if existing.is_file() else "not a folder"
        return f"{existing} is {what}{where}"
    try:
        probe = tempfile.mkdtemp(prefix=".pwdeploy-probe-", dir=existing)
    except OSError as exc:
        return f"{existing} does not let pwdeploy create folders{where}: {exc.strerror or exc}"
    os.rmdir(probe)
    return None


def check_folders(folders: Iterable[tuple[str, Path]]) -> None:
    """Every problem of the (kind, path) folders a run would create, as field errors; nothing when all can be."""
    errors = []
    for kind, path in folders:
        problem = folder_problem(path)
        if problem is None:
            continue
        field, flag = FOLDER_FIELDS[kind]
        fix = f"pass {flag} DIR naming a folder you can write" if flag else "move or remove what is in the way"
        if any(part.name == STATE_DIR and part.is_file() for part in (path, *path.parents)):
            fix += f"; {STATE_DIR} beside the config holds pwdeploy's local state and must be a folder"
        errors.append(ConfigError(field, f"the local {kind} folder cannot be made: {problem}", hint=fix))
    raise_all(errors)
