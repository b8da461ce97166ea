"""What a requirement's extras bring into the job image that the job's code never imports, said when the image is
made (``image dockerfile``, ``image build``): ``maxtext[tpu]`` or ``-e .[tpu]`` pulls every package of the ``tpu``
extra (for MaxText: libtpu, which the Pathways client never loads: the workers run it).

An extra's packages are read where pwdeploy can read them without installing anything: the job's own project
(``[project.optional-dependencies]`` of the ``pyproject.toml`` beside the config or in ``image.source_dir``, or the
requirements files ``hatch-requirements-txt`` names there, as MaxText's do), or the metadata of the distribution
installed beside pwdeploy (``importlib.metadata``: its ``Requires-Dist`` entries marked ``extra == "..."``). A
package the requirements file names itself is wanted; one the code imports (a top-level ``import``/``from``,
matched by the distribution's import names where it is installed, else by its normalised name) is used. Said, not
changed: pip installs what the requirements ask for.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from pwdeploy.config import JobConfig

_REQUIREMENT = re.compile(r"^\s*(?:-e\s+)?([A-Za-z0-9][A-Za-z0-9._-]*|\.|\./?[^\s\[]*)\s*\[([^\]]+)\]")
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_IMPORT = re.compile(r"^[ \t]*(?:from|import)[ \t]+([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)
_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def extras_notes(job: JobConfig, code_files: Iterable[Path]) -> list[str]:
    """One note per requirement line whose extras bring packages the job's code does not import."""
    path = job.image.requirements
    if path is None or not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    named = {normalized(m.group(1)) for line in lines if (m := _NAME.match(line))}
    imported: set[str] | None = None
    notes = []
    for number, line in enumerate(lines, start=1):
        match = _REQUIREMENT.match(line)
        if match is None:
            continue
        extras = [e.strip() for e in match.group(2).split(",") if e.strip()]
        pulled = {normalized(p) for p in _extra_packages(job, match.group(1), extras)} - named
        if not pulled:
            continue
        imported = _imports(code_files) if imported is None else imported
        unused = sorted(p for p in pulled if not _import_names(p) & imported)
        if unused:
            shown = ", ".join(unused)
            notes.append(
                f"image.requirements line {number} ({line.strip()}): its extras {', '.join(extras)} bring "
                f"{len(unused)} package(s) the job's code does not import itself, which the image installs (some "
                f"may be what the packages it imports need): {shown}; name what the job needs instead of the extra "
                "to leave the others out"
            )
    return notes


def _extra_packages(job: JobConfig, name: str, extras: list[str]) -> Iterator[str]:
    own = _own_project(job)
    if own is not None and (name.startswith(".") or normalized(name) == normalized(own[0])):
        yield from _project_extras(own[1], own[2], extras)
        return
    try:
        from importlib import metadata

        requires = metadata.requires(name) or []
    except Exception:  # not installed here: nothing can be said of its extras
        return
    for entry in requires:
        marker = _EXTRA.search(entry)
        if marker and marker.group(1) in extras and (found := _NAME.match(entry)):
            yield found.group(1)


def _own_project(job: JobConfig) -> tuple[str, dict[str, object], Path] | None:
    for folder in dict.fromkeys([job.base_dir, *([job.image.source_dir] if job.image.source_dir else [])]):
        path = folder / "pyproject.toml"
        if path.is_file():
            import tomllib

            try:
                data = tomllib.loads(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
                return None
            project = data.get("project", {})
            if isinstance(project, dict) and isinstance(project.get("name"), str):
                return project["name"], data, folder
    return None


def _project_extras(data: dict[str, object], folder: Path, extras: list[str]) -> Iterator[str]:
    project = data.get("project", {})
    static = project.get("optional-dependencies", {}) if isinstance(project, dict) else {}
    hatch = data.get("tool", {})
    for key in ("hatch", "metadata", "hooks", "requirements_txt", "optional-dependencies"):
        hatch = hatch.get(key, {}) if isinstance(hatch, dict) else {}
    for extra in extras:
        for entry in static.get(extra, []) if isinstance(static, dict) else []:
            if found := _NAME.match(str(entry)):
                yield found.group(1)
        for file in hatch.get(extra, []) if isinstance(hatch, dict) else []:
            yield from _file_names(folder / str(file))


def _file_names(path: Path) -> Iterator[str]:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return
    for line in lines:
        if not line.lstrip().startswith(("#", "-")) and (found := _NAME.match(line)):
            yield found.group(1)


def _imports(files: Iterable[Path]) -> set[str]:
    found: set[str] = set()
    for path in files:
        try:
            found.update(_IMPORT.findall(path.read_text(encoding="utf-8", errors="replace")))
        except OSError:
            continue
    return found


def _import_names(distribution: str) -> set[str]:
    """The top-level modules a distribution provides: from its installed files where it is installed, else its
    name with ``_`` for ``-`` (``tensorflow-text`` -> ``tensorflow_text``)."""
    names = {distribution.replace("-", "_")}
    try:
        from importlib import metadata

        files = metadata.files(distribution) or []
    except Exception:
        return names
    for file in files:
        top = file.parts[0] if file.parts else ""
        if top.endswith(".py"):
            names.add(top[:-3])
        elif top and not top.endswith((".dist-info", ".data")) and "." not in top and top != "__pycache__":
            names.add(top)
    return names
