"""tests/lowest-versions.txt pins each direct dependency at the floor pyproject.toml declares, so that
scripts/test-lowest.sh tests the lowest versions a user may get, and no others."""

from __future__ import annotations

import re
import tomllib

from tests.conftest import REPO

REQUIREMENT = re.compile(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(.*)$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def floors() -> dict[str, str]:
    """Every declared dependency (runtime and dev) that has a floor: name -> the floor."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    found = {}
    for line in [*project["dependencies"], *project["optional-dependencies"]["dev"]]:
        match = REQUIREMENT.match(line)
        assert match is not None, line
        floor = re.search(r">=\s*([0-9][^,;\s]*)", match.group(3))
        if floor is not None:
            found[canonical(match.group(1))] = floor.group(1)
    return found


def pins() -> dict[str, str]:
    found = {}
    for line in (REPO / "tests" / "lowest-versions.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            found[canonical(name)] = version.strip()
    return found


def padded(version: str) -> tuple[int, ...]:
    """``8`` and ``8.0.0`` are one release."""
    parts = tuple(int(part) for part in version.split("."))
    return parts + (0,) * (3 - len(parts))


def test_every_runtime_dependency_has_a_floor_and_is_pinned() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    runtime = {canonical(re.split(r"[\[<>=!~;\s]", line, maxsplit=1)[0]) for line in project["dependencies"]}
    declared, pinned = floors(), pins()
    assert runtime <= set(declared), f"a runtime dependency without a floor: {sorted(runtime - set(declared))}"
    assert runtime <= set(pinned), f"not pinned in tests/lowest-versions.txt: {sorted(runtime - set(pinned))}"


def test_every_pin_is_a_declared_floor() -> None:
    declared = floors()
    for name, version in pins().items():
        assert name in declared, f"{name} is pinned but not a declared dependency with a floor"
        assert padded(version) == padded(declared[name]), f"{name}: pinned {version}, declared >={declared[name]}"
