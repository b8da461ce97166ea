"""The layers of the house: which rooms (packages and top-level modules of pwdeploy) and sub-rooms (the packages
inside a room) each may import, checked over every import of every module (lazy, type-only, relative and
`importlib.import_module` with a literal name), no import cycle between modules, and the scanner proved on a planted
house whose edges are known."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "pwdeploy"

# Ground floor first; a room may import only the rooms named in its row (and itself). The CLI sits on top.
LEAVES = frozenset(
    {"errors", "identifiers", "names", "imageref", "atomic", "report", "severity", "text", "finding", "releases"}
)
ALLOWED: dict[str, frozenset[str]] = {
    "errors": frozenset({"finding"}),  # ValidationError holds findings (a type-only import)
    "releases": frozenset(),  # the Pathways releases seen: data, no imports
    "text": frozenset(),
    "severity": frozenset(),
    "finding": frozenset({"severity", "text"}),  # one shape for every finding (check, diagnose, preflight, validation)
    "identifiers": frozenset(),
    "names": frozenset(),
    "imageref": frozenset({"errors"}),
    "atomic": frozenset({"errors"}),
    "report": frozenset({"errors", "finding", "severity"}),
    "quantity": frozenset({"errors"}),
    "arguments": frozenset({"errors"}),  # a library caller's arguments checked (the api's)
    "catalog": frozenset({"errors"}),
    "slices": frozenset({"identifiers"}),
    "stopping": frozenset({"identifiers"}),
    "loader_workers": frozenset({"identifiers"}),  # the job's data loader (runtime names its helpers)
    "runtime": frozenset({"identifiers", "slices", "stopping", "loader_workers"}),
    "config": LEAVES | {"quantity", "catalog"},
    "job_python": LEAVES | {"config"},
    "sidecar_imports": LEAVES | {"config"},  # the sidecar's import test: its image's build and local run run it
    "advice": LEAVES | {"config"},
    "envcontract": LEAVES | {"config"},
    "kube": LEAVES,
    "registry": LEAVES,
    "gcs": LEAVES,
    "validation": LEAVES | {"quantity", "catalog"},
    "manifests": LEAVES | {"quantity", "catalog", "config", "envcontract"},
    "images": LEAVES | {"quantity", "catalog", "config", "registry", "job_python", "sidecar_imports"},
    "preflight": LEAVES | {"quantity", "catalog", "config", "gcs", "registry"},
    "cluster": LEAVES | {"quantity", "catalog", "config", "envcontract", "kube", "manifests"},
    "drill": LEAVES | {"quantity", "catalog", "config", "envcontract", "kube", "manifests", "cluster"},
    "session": LEAVES | {"quantity", "catalog", "config", "envcontract", "kube", "manifests", "cluster"},
    "readiness": LEAVES | {"quantity", "catalog", "config", "envcontract", "kube", "manifests", "cluster"},
    "local": LEAVES
    | {
        "quantity",
        "catalog",
        "config",
        "envcontract",
        "gcs",
        "runtime",
        "slices",
        "stopping",
        "manifests",
        "sidecar_imports",
    },
    "check": LEAVES | {"quantity", "catalog", "config", "envcontract", "manifests", "job_python"},
    "api": frozenset(),  # the library's face: every room below the CLI (test_the_api_stands_below_the_cli)
    "cli": frozenset(),  # the top floor may import every room
    "__main__": frozenset({"cli"}),
    "__init__": frozenset(),
}
ALLOWED["api"] = frozenset(ALLOWED) - {"api", "cli", "__main__"}

# Sub-rooms (the packages inside a room): what each may import, other rooms (within its room's row) and the modules
# or sub-rooms beside it in its room ("cluster.jobsets"); and which of those may import it. pwdeploy's own
# ``__init__`` (the version) is open to all.
SUB_ROOMS: dict[str, frozenset[str]] = {
    "cluster.diagnose": frozenset(
        {
            "identifiers",
            "severity",
            "finding",
            "text",
            "kube",
            "cluster.jobsets",
            "cluster.job_events",
            "cluster.logs",
            "cluster.progress",
        }
    ),
    "check.rules": frozenset({"identifiers", "envcontract", "quantity", "check.program", "check.rule"}),
    "local.transfer_probe": frozenset(),  # runs in the job's own process: nothing of pwdeploy
}
IMPORTED_IN_ROOM_BY: dict[str, frozenset[str]] = {
    "cluster.diagnose": frozenset(),  # status is a view: its findings are passed in (api, session)
    "check.rules": frozenset({"check.run"}),
    "local.transfer_probe": frozenset(),  # started as a file, not imported
}


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(path: Path, name: str) -> Iterator[tuple[int, str]]:
    """Every module the module ``name`` (at ``path``) imports, with the line: ``import a``, ``from a import b``
    (``a.b`` too, when that is a module), relative imports (``from . import b``, ``from ..a import b``) and
    ``importlib.import_module`` (or ``import_module``) called with a literal name (a relative one with a literal
    ``package``). Lazy imports inside functions and ``TYPE_CHECKING`` imports count as well."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module or "", node.level, package)
            if base:
                yield node.lineno, base
                for alias in node.names:
                    yield node.lineno, f"{base}.{alias.name}"
        elif isinstance(node, ast.Call) and _is_import_module(node.func):
            target = _literal_target(node)
            if target:
                yield node.lineno, target


def _absolute(module: str, level: int, package: str) -> str:
    """The absolute name of ``from <level dots><module> import ...`` written in ``package``."""
    if level == 0:
        return module
    parts = package.split(".")
    if level - 1 >= len(parts):
        return ""  # beyond the top package: Python refuses it too
    base = ".".join(parts[: len(parts) - (level - 1)])
    return f"{base}.{module}" if module else base


def _is_import_module(func: ast.expr) -> bool:
    if isinstance(func, ast.Attribute):
        return func.attr == "import_module" and isinstance(func.value, ast.Name) and func.value.id == "importlib"
    return isinstance(func, ast.Name) and func.id == "import_module"


def _literal_target(call: ast.Call) -> str:
    """The module ``import_module(NAME[, PACKAGE])`` imports, when both are literal strings."""
    args = [*call.args, *(k.value for k in call.keywords if k.arg == "package")]
    if not args or not isinstance(args[0], ast.Constant) or not isinstance(args[0].value, str):
        return ""
    target = args[0].value
    if not target.startswith("."):
        return target
    if len(args) < 2 or not isinstance(args[1], ast.Constant) or not isinstance(args[1].value, str):
        return ""
    level = len(target) - len(target.lstrip("."))
    return _absolute(target.lstrip("."), level, args[1].value)


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(path, package): path for path in sorted(package.rglob("*.py"))}


def edges(package: Path = PACKAGE) -> Iterator[tuple[str, int, str]]:
    known = modules(package)
    for name, path in known.items():
        for line, target in imports(path, name):
            if target in known and target != name:
                yield name, line, target


def sub_room(module: str) -> str:
    """``pwdeploy.cluster.diagnose.read`` -> ``cluster.diagnose``; a room's own modules are sub-rooms of one."""
    parts = module.split(".")
    return ".".join(parts[1:3]) if len(parts) > 2 else room(module)


def sub_room_problems(package: Path = PACKAGE) -> list[str]:
    """Every edge into or out of a sub-room that its rows do not allow."""
    wrong = []
    for name, line, target in edges(package):
        source, dest = sub_room(name), sub_room(target)
        if source == dest or dest in {"__init__", room(name)}:  # itself, the version, its room's __init__
            continue
        if source in SUB_ROOMS:
            outside = dest if room(target) == room(name) else room(target)
            if outside not in SUB_ROOMS[source]:
                wrong.append(f"{name} (line {line}) imports {target}: {source} may import {sorted(SUB_ROOMS[source])}")
        if dest in SUB_ROOMS and room(name) == room(target) and source not in IMPORTED_IN_ROOM_BY[dest]:
            wrong.append(
                f"{name} (line {line}) imports {target}: in {room(name)}, only {sorted(IMPORTED_IN_ROOM_BY[dest])} "
                f"may import {dest}"
            )
    return wrong


def test_every_sub_room_is_in_the_table() -> None:
    packages = {
        sub_room(name) for name, path in modules().items() if path.name == "__init__.py" and name.count(".") == 2
    }
    assert packages == set(SUB_ROOMS) == set(IMPORTED_IN_ROOM_BY)


def test_sub_rooms_import_only_what_their_rows_allow() -> None:
    assert sub_room_problems() == []


def test_a_sub_room_row_is_within_its_room_row() -> None:
    for sub, allowed in SUB_ROOMS.items():
        outer = {name for name in allowed if "." not in name}
        assert outer <= ALLOWED[sub.split(".")[0]], sub


def test_every_room_is_in_the_table() -> None:
    rooms = {room(name) for name in modules()}
    assert rooms <= set(ALLOWED), f"rooms missing from the layering table: {sorted(rooms - set(ALLOWED))}"


def shared_names(package: Path = PACKAGE) -> list[str]:
    """Every file name that two or more modules share, with the modules (``__init__.py`` and ``__main__.py`` aside):
    a module's name alone says which one it is, in a traceback, an editor's tab or a search."""
    by_name: dict[str, list[str]] = {}
    for name, path in modules(package).items():
        if path.name not in {"__init__.py", "__main__.py"}:
            by_name.setdefault(path.name, []).append(name)
    return [f"{file}: {', '.join(names)}" for file, names in sorted(by_name.items()) if len(names) > 1]


def test_no_two_modules_share_a_name() -> None:
    shared = shared_names()
    assert not shared, "modules that share a name (rename one):\n" + "\n".join(shared)


def test_the_name_check_finds_a_planted_pair(tmp_path: Path) -> None:
    package = tmp_path / "pwdeploy"
    for relative in (
        "__init__.py",
        "__main__.py",
        "errors.py",
        "kube/__init__.py",
        "kube/errors.py",
        "cli/__main__.py",
    ):
        (package / relative).parent.mkdir(parents=True, exist_ok=True)
        (package / relative).write_text("")
    assert shared_names(package) == ["errors.py: pwdeploy.errors, pwdeploy.kube.errors"]


def room_problems(package: Path = PACKAGE) -> list[str]:
    """Every edge from a room to a room its row does not name."""
    wrong = []
    for name, line, target in edges(package):
        source, dest = room(name), room(target)
        if source in {"cli", dest} or dest == "__init__" or dest in ALLOWED[source]:  # __init__: the version
            continue
        wrong.append(f"{name} (line {line}) imports {target}: {source} may import only {sorted(ALLOWED[source])}")
    return wrong


def test_no_room_imports_a_room_above_it() -> None:
    wrong = room_problems()
    assert not wrong, "\n".join(wrong)


def test_no_import_cycle_between_modules() -> None:
    graph: dict[str, set[str]] = {}
    for name, _, target in edges():
        if target != name.rpartition(".")[0]:  # a module's own package __init__ runs first anyway
            graph.setdefault(name, set()).add(target)
    cycles = [cycle for cycle in _cycles(graph)]
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def _cycles(graph: dict[str, set[str]]) -> Iterator[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(node: str) -> Iterator[list[str]]:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                yield from visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                yield sorted(component)

    for start in sorted(graph):
        if start not in index:
            yield from visit(start)


@pytest.mark.parametrize(
    ("source", "target"),
    [("pwdeploy.kube.seam", "pwdeploy.cluster.jobsets"), ("pwdeploy.config.model", "pwdeploy.cli")],
)
def test_the_table_refuses_an_upward_edge(source: str, target: str) -> None:
    assert room(target) not in ALLOWED[room(source)]


# ---------------------------------------------------------------------------------------------- the scanner

# A planted house: each module holds one kind of import, and the edge the scanner must find (line 1 unless said).
PLANTED = {
    "errors.py": "",
    "text.py": "",
    "config/__init__.py": "from . import model\n",  # relative, the package's own module
    "config/model.py": "from ..errors import ConfigError\n",  # relative, two dots, a module's name
    "config/load.py": "from .model import JobConfig\n",
    "kube/__init__.py": "",
    "kube/seam.py": "import pwdeploy.text\n",  # plain import
    "kube/lazy.py": "def f():\n    from pwdeploy.cluster import jobsets\n",  # lazy, from a package: upward
    "kube/typed.py": "import typing\nif typing.TYPE_CHECKING:\n    from pwdeploy.cluster.jobsets import x\n",
    "kube/dynamic.py": "import importlib\nm = importlib.import_module('pwdeploy.cluster.status')\n",  # upward
    "kube/dynamic_rel.py": "from importlib import import_module\nm = import_module('..cluster', 'pwdeploy.kube')\n",
    "kube/computed.py": "import importlib\nname = 'x'\nm = importlib.import_module(name)\n",  # not literal: none
    "cluster/__init__.py": "",
    "cluster/jobsets.py": "from ..kube import seam\n",
    "cluster/status.py": "from .diagnose import read\n",  # into a sub-room from beside it
    "cluster/diagnose/__init__.py": "",
    "cluster/diagnose/read.py": "from ...config import load\nfrom .. import jobsets\n",  # three dots; the room
}
PLANTED_EDGES = {
    ("pwdeploy.config", "pwdeploy.config.model"),
    ("pwdeploy.config.model", "pwdeploy.errors"),
    ("pwdeploy.config.load", "pwdeploy.config.model"),
    ("pwdeploy.kube.seam", "pwdeploy.text"),
    ("pwdeploy.kube.lazy", "pwdeploy.cluster"),
    ("pwdeploy.kube.lazy", "pwdeploy.cluster.jobsets"),
    ("pwdeploy.kube.typed", "pwdeploy.cluster.jobsets"),
    ("pwdeploy.kube.dynamic", "pwdeploy.cluster.status"),
    ("pwdeploy.kube.dynamic_rel", "pwdeploy.cluster"),
    ("pwdeploy.cluster.jobsets", "pwdeploy.kube"),
    ("pwdeploy.cluster.jobsets", "pwdeploy.kube.seam"),
    ("pwdeploy.cluster.status", "pwdeploy.cluster.diagnose"),
    ("pwdeploy.cluster.status", "pwdeploy.cluster.diagnose.read"),
    ("pwdeploy.cluster.diagnose.read", "pwdeploy.config"),
    ("pwdeploy.cluster.diagnose.read", "pwdeploy.config.load"),
    ("pwdeploy.cluster.diagnose.read", "pwdeploy.cluster"),
    ("pwdeploy.cluster.diagnose.read", "pwdeploy.cluster.jobsets"),
}


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    package = tmp_path / "pwdeploy"
    for relative, source in {"__init__.py": "", **PLANTED}.items():
        (package / relative).parent.mkdir(parents=True, exist_ok=True)
        (package / relative).write_text(source)
    return package


def test_the_scanner_finds_each_planted_edge_and_no_other(planted: Path) -> None:
    assert {(source, target) for source, _, target in edges(planted)} == PLANTED_EDGES
    lines = {(source, target): line for source, line, target in edges(planted)}
    assert lines["pwdeploy.kube.typed", "pwdeploy.cluster.jobsets"] == 3
    assert lines["pwdeploy.kube.dynamic", "pwdeploy.cluster.status"] == 2


def test_the_checks_refuse_the_planted_upward_edges(planted: Path) -> None:
    wrong = room_problems(planted)
    for module in ("lazy", "typed", "dynamic", "dynamic_rel"):  # kube may not import cluster, however it does
        assert any(line.startswith(f"pwdeploy.kube.{module} ") for line in wrong), module
    assert len(wrong) == 5 and not any(
        "pwdeploy.config" in line or "pwdeploy.cluster.jobsets (" in line for line in wrong
    )


def test_the_sub_room_check_refuses_a_planted_edge_its_rows_do_not_allow(
    planted: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # cluster.diagnose may not import config (its row), and cluster.status may import it where IMPORTED_IN_ROOM_BY
    # says so
    monkeypatch.setitem(IMPORTED_IN_ROOM_BY, "cluster.diagnose", frozenset({"cluster.status"}))
    wrong = sub_room_problems(planted)
    assert [line.split(" imports ")[1].split(":")[0] for line in wrong] == ["pwdeploy.config", "pwdeploy.config.load"]
    monkeypatch.setitem(IMPORTED_IN_ROOM_BY, "cluster.diagnose", frozenset())
    assert any(line.startswith("pwdeploy.cluster.status (line 1)") for line in sub_room_problems(planted))
