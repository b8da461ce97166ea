"""Where the job's Python finds the program `pwdeploy check` reads: the entry module ``main.command`` runs and the
folders its imports are looked up in, searched as the job's interpreter searches them (``sys.path``): the script's
folder (``python3 train.py``) or the working directory (``python3 -m pkg.train``), then ``PYTHONPATH`` as
``main.env`` sets it (relative entries against the working directory, ``/app/...`` as the job image copies the
source folder there), then a ``src/`` folder beside the config (a src layout, whose package the image installs).

The working directory is the config's folder: where ``local run`` starts the command, and where the job image's
``WORKDIR`` puts it (``pwdeploy/images/job_image.py``: the source folder is copied to ``/app``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

from pwdeploy.check.sources import real
from pwdeploy.config import JobConfig

IMAGE_APP = "/app"  # where the job image copies image.source_dir (pwdeploy/images/job_image.py APP)
SRC_LAYOUT = "src"
_PYTHON = re.compile(r"python[0-9.]*")
_VALUED = frozenset({"-W", "-X", "-c", "-Q"})  # options of the interpreter that take a value


class Entry(NamedTuple):
    """The entry module, the folders its imports are looked up in, and, when no module was found, why."""

    script: Path | None  # the entry module's file
    name: str  # its dotted module name ("train", "maxtext.trainers.pre_train.train")
    roots: tuple[Path, ...]  # where the job's Python looks for modules, in its order
    missing: str = ""  # why nothing was found ("" when ``script`` is set)
    not_python: bool = False  # main.command is not a Python program (``bash run.sh``, ``python -c ...``)


def python_path(job: JobConfig) -> list[Path]:
    """``main.env``'s PYTHONPATH as folders of this machine: relative entries against the config's folder (the
    working directory), ``/app/...`` under the job image's source folder; entries that are no folder here dropped."""
    value = dict(job.main.env).get("PYTHONPATH", "")
    source = (job.image.source_dir or job.base_dir).resolve()
    folders = []
    for entry in filter(None, value.split(os.pathsep)):
        if entry == IMAGE_APP or entry.startswith(IMAGE_APP + "/"):
            path = source / entry[len(IMAGE_APP) :].lstrip("/")
        else:
            path = job.base_dir / entry if not os.path.isabs(entry) else Path(entry)
        if path.is_dir():
            folders.append(path.resolve())
    return folders


def search_roots(job: JobConfig, first: Path) -> tuple[Path, ...]:
    """``first`` (the script's folder, or the working directory for ``-m``), PYTHONPATH, the config's folder and a
    ``src/`` layout beside it, without repeats."""
    src = job.base_dir / SRC_LAYOUT
    layout = [src.resolve()] if src.is_dir() else []
    return tuple(dict.fromkeys([first.resolve(), *python_path(job), job.base_dir.resolve(), *layout]))


def locate(job: JobConfig) -> Entry:
    """The entry module of ``main.command`` (``python3 train.py``, ``python -u -m pkg.train``, ``train.py``)."""
    command = list(job.main.command)
    base = job.base_dir
    if not command:
        return Entry(None, "", (base.resolve(),), "main.command is not set", not_python=True)
    if command[0].endswith(".py"):
        return _script(job, command[0])
    if not _PYTHON.fullmatch(os.path.basename(command[0])):
        return Entry(None, "", (base.resolve(),), f"main.command runs {command[0]}, not Python", not_python=True)
    rest = command[1:]
    while rest and rest[0].startswith("-") and rest[0] != "-m":
        if rest[0] == "-c":
            return Entry(None, "", (base.resolve(),), "main.command runs code given with -c", not_python=True)
        rest = rest[2:] if rest[0] in _VALUED else rest[1:]
    if len(rest) > 1 and rest[0] == "-m":
        return _module(job, rest[1])
    if rest and rest[0].endswith(".py"):
        return _script(job, rest[0])
    return Entry(None, "", (base.resolve(),), "main.command names no Python file or module", not_python=True)


def _script(job: JobConfig, name: str) -> Entry:
    path = job.base_dir / name
    roots = search_roots(job, path.parent)
    if not path.is_symlink() and not path.is_file():
        return Entry(None, "", roots, f"main.command runs {name}, which is not a file in {job.base_dir}")
    return Entry(real(path, "main.command"), path.stem, roots)


def _module(job: JobConfig, dotted: str) -> Entry:
    roots = search_roots(job, job.base_dir)
    parts = dotted.split(".")
    for root in roots:
        for candidate, name in ((root.joinpath(*parts).with_suffix(".py"), dotted),
                                (root.joinpath(*parts, "__main__.py"), f"{dotted}.__main__")):  # fmt: skip
            if candidate.is_file():
                return Entry(real(candidate, "main.command"), name, roots)
    where = ", ".join(str(root) for root in roots)
    return Entry(None, "", roots, f"main.command runs module {dotted}, which is in none of {where}")
