"""The layers of the house: which rooms (packages and top-level modules of pwdeploy) each room may import, checked
over every import of every module (lazy and type-only imports too), and no import cycle between modules."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "pwdeploy"

# Ground floor first; a room may import only the rooms named in its row (and itself). The CLI sits on top.
LEAVES = frozenset({"errors", "identifiers", "names", "imageref", "atomic", "report", "text"})
ALLOWED: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "text": frozenset(),
    "identifiers": frozenset(),
    "names": frozenset(),
    "imageref": frozenset({"errors"}),
    "atomic": frozenset({"errors"}),
    "report": frozenset({"errors"}),
    "quantity": frozenset({"errors"}),
    "catalog": frozenset({"errors"}),
    "slices": frozenset({"identifiers"}),
    "runtime": frozenset({"identifiers", "slices"}),
    "config": LEAVES | {"quantity", "catalog"},
    "advice": LEAVES | {"config"},
    "envcontract": LEAVES | {"config"},
    "kube": LEAVES,
    "registry": LEAVES,
    "gcs": LEAVES,
    "validation": LEAVES | {"quantity", "catalog"},
    "manifests": LEAVES | {"quantity", "catalog", "config", "envcontract"},
    "images": LEAVES | {"quantity", "catalog", "config", "registry"},
    "preflight": LEAVES | {"quantity", "catalog", "config", "gcs", "registry"},
    "cluster": LEAVES | {"quantity", "catalog", "config", "envcontract", "kube", "manifests"},
    "local": LEAVES | {"quantity", "catalog", "config", "envcontract", "gcs", "runtime", "slices", "manifests"},
    "check": LEAVES | {"quantity", "catalog", "config", "envcontract", "manifests"},
    "cli": frozenset(),  # the top floor may import every room
    "__main__": frozenset({"cli"}),
    "__init__": frozenset(),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """Every pwdeploy module ``path`` imports, with the line: ``from a import b`` names ``a.b`` when that is a
    module."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def edges() -> Iterator[tuple[str, int, str]]:
    known = modules()
    for name, path in known.items():
        for line, target in imports(path):
            if target in known and target != name:
                yield name, line, target


def test_every_room_is_in_the_table() -> None:
    rooms = {room(name) for name in modules()}
    assert rooms <= set(ALLOWED), f"rooms missing from the layering table: {sorted(rooms - set(ALLOWED))}"


def test_no_room_imports_a_room_above_it() -> None:
    wrong = []
    for name, line, target in edges():
        source, dest = room(name), room(target)
        if source in {"cli", dest} or dest == "__init__" or dest in ALLOWED[source]:  # __init__: the version
            continue
        wrong.append(f"{name} (line {line}) imports {target}: {source} may import only {sorted(ALLOWED[source])}")
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
    ("source", "target"), [("pwdeploy.kube.api", "pwdeploy.cluster.jobsets"), ("pwdeploy.config.model", "pwdeploy.cli")]
)
def test_the_table_refuses_an_upward_edge(source: str, target: str) -> None:
    assert room(target) not in ALLOWED[room(source)]
