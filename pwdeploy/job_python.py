"""The Python the job runs: what its own project asks for (``requires-python`` in the ``pyproject.toml`` of the
job's folder), the Python an official base image carries (``python:3.12-slim``), and the minor version chosen from
them. The job image is built for it and ``pwdeploy check`` parses the program with its grammar.

``requires-python`` is read as PEP 440 specifiers over a Python ``X.Y`` (``>=3.12``, ``>=3.10,<3.13``,
``~=3.11``, ``==3.12.*``, ``!=3.13``): enough for the minor versions an image is made for. The file is read only
when it exists (tomllib is imported then): a render of a job without one pays a stat.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from pwdeploy.config import JobConfig
from pwdeploy.errors import ConfigError

# Minor versions with an official python:X.Y-slim-bookworm image and jax 0.10 wheels, in order.
CANDIDATES = ("3.11", "3.12", "3.13")
PYPROJECT = "pyproject.toml"
_DIGITS = frozenset("0123456789")
OFFICIAL_PYTHON = r"(?:docker\.io/)?(?:library/)?python:([0-9]+\.[0-9]+)\b.*"  # what official_python reads
_OPERATORS = ("~=", "==", "!=", "<=", ">=", "<", ">")


class Requirement(NamedTuple):
    """The job's project's ``requires-python`` and the file it is written in."""

    spec: str
    file: Path


def official_python(image: str) -> str | None:
    """X.Y of an official Python image (``python:3.12-slim``, ``docker.io/library/python:3.12``), else None: the
    first digits, a dot and digits of its tag, followed by no letter, digit or ``_`` (read with string methods: a
    pinned render calls this, and compiling an expression costs it 0.2 ms)."""
    rest = image.removeprefix("docker.io/").removeprefix("library/")
    if not rest.startswith("python:"):
        return None
    tag = rest[len("python:") :]
    major, dot, after = tag.partition(".")
    minor = after[: len(after) - len(after.lstrip("0123456789"))]
    following = after[len(minor) : len(minor) + 1]
    if not dot or not major or not minor or not _DIGITS.issuperset(major):
        return None
    if following and (following.isalnum() or following == "_"):
        return None
    return f"{major}.{minor}"


def project_requirement(job: JobConfig) -> Requirement | None:
    """``requires-python`` of the ``pyproject.toml`` in the config's folder (or ``image.source_dir``), if any."""
    folders = dict.fromkeys([job.base_dir, *([job.image.source_dir] if job.image.source_dir else [])])
    for folder in folders:
        found = requirement_in(folder / PYPROJECT)
        if found is not None:
            return found
    return None


def requirement_in(path: Path) -> Requirement | None:
    if not path.is_file():
        return None
    import tomllib

    try:
        project = tomllib.loads(path.read_text(encoding="utf-8")).get("project", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    spec = project.get("requires-python") if isinstance(project, dict) else None
    return Requirement(spec.strip(), path) if isinstance(spec, str) and spec.strip() else None


def allows(spec: str, version: str) -> bool | None:
    """Whether Python ``version`` (X.Y) meets ``spec``; None for a specifier this reader does not know."""
    minor = _tuple(version)
    verdicts = [_one(item.strip(), minor) for item in spec.split(",") if item.strip()]
    return None if None in verdicts else all(verdicts)


def choose(spec: str, running: str) -> str | None:
    """The Python for a project that asks ``spec``: ``running`` when it is allowed, else the allowed candidate
    nearest it (the newer on a tie); None when no candidate is allowed (or the spec cannot be read)."""
    if allows(spec, running) is not False:
        return running
    allowed = [v for v in CANDIDATES if allows(spec, v)]
    if not allowed:
        return None
    return min(allowed, key=lambda v: (abs(_tuple(v)[1] - _tuple(running)[1]), -_tuple(v)[1]))


def _tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def _one(item: str, minor: tuple[int, ...]) -> bool | None:
    operator = next((op for op in _OPERATORS if item.startswith(op)), None)
    if operator is None:
        return None
    text = item[len(operator) :].strip()
    wildcard = text.endswith(".*")
    bound = _tuple(text.removesuffix(".*"))
    if not bound or len(bound) != len(text.removesuffix(".*").split(".")):
        return None
    if operator in ("==", "!=") and (wildcard or len(bound) <= 2):
        same = minor[: len(bound)] == bound if len(bound) <= len(minor) else False
        return same if operator == "==" else not same
    if operator == "~=":  # ~=3.11 means >=3.11, ==3.*
        return minor >= bound[:2] and minor[:1] == bound[:1]
    here = minor + (0,) * max(0, len(bound) - len(minor))
    return {"<": here < bound, "<=": here <= bound, ">": here > bound, ">=": here >= bound}.get(operator)


class JobPython(NamedTuple):
    """The Python X.Y the job runs, and what says so (for messages)."""

    version: str
    why: str


def job_python(job: JobConfig, running: str) -> JobPython | None:
    """The Python of the job's main container, where the config or the project says: ``sidecar.python_version``
    (the client's), an official ``image.base``, else the job project's ``requires-python`` (the Python the job
    image is built for: ``running`` when it is allowed); None when nothing says."""
    if job.sidecar.python_version:
        return JobPython(job.sidecar.python_version, "sidecar.python_version")
    official = official_python(job.image.base) if job.image.base else None
    if official:
        return JobPython(official, f"image.base {job.image.base}")
    needed = project_requirement(job)
    return _chosen(needed, running)


def python_near(folder: Path, running: str, levels: int = 6) -> JobPython | None:
    """The Python the project of ``folder`` (or of a folder above it, up to ``levels``) asks for, as ``job_python``."""
    for place in [folder, *folder.parents][:levels]:
        needed = requirement_in(place / PYPROJECT)
        if needed is not None:
            return _chosen(needed, running)
    return None


def _chosen(needed: Requirement | None, running: str) -> JobPython | None:
    if needed is None:
        return None
    chosen = choose(needed.spec, running)
    return JobPython(chosen, f"requires-python {needed.spec} in {needed.file}") if chosen else None


def chosen_python(job: JobConfig, running: str) -> str:
    """The Python the job image is built for when the config names none: ``running`` (pwdeploy's, or the one a
    pushed image recorded) when the job's project allows it, else the allowed candidate nearest it. ConfigError
    (naming image.base, with the fix) when the project allows none of the candidates."""
    needed = project_requirement(job)
    if needed is None:
        return running
    chosen = choose(needed.spec, running)
    if chosen is None:
        raise ConfigError(
            "image.base",
            f"the job's project asks for Python {needed.spec} ({needed.file}), which none of the Pythons pwdeploy "
            f"chooses a base for ({', '.join(CANDIDATES)}) meets",
            hint="set image.base to a Python image that meets it (and sidecar.python_version to its X.Y with a "
            "sidecar)",
        )
    return chosen


def check_allowed(job: JobConfig, version: str, field: str, value: str) -> None:
    """ConfigError naming ``field`` when the job's project does not allow Python ``version`` (``value``: what the
    field holds, for the message)."""
    needed = project_requirement(job)
    if needed is not None and allows(needed.spec, version) is False:
        raise ConfigError(
            field,
            f"{value} runs Python {version}, but the job's project asks for Python {needed.spec} ({needed.file})",
            hint=f"use a Python that meets {needed.spec}, or change requires-python",
        )


def choice_note(job: JobConfig, running: str) -> str | None:
    """One line saying that the job image runs another Python than pwdeploy's, and why; None when it does not."""
    needed = project_requirement(job)
    if needed is None or job.sidecar.python_version or job.image.base:
        return None
    chosen = choose(needed.spec, running)
    if chosen is None or chosen == running:
        return None
    return (
        f"the job image runs Python {chosen} (python:{chosen}-slim-bookworm): the job's project asks for "
        f"{needed.spec} ({needed.file.name}), which pwdeploy's Python {running} does not meet; set image.base or "
        "sidecar.python_version to choose another"
    )
