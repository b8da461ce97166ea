"""The house's size limits (docs/development.md, "Size"): no module of pwdeploy/ over 400 lines, no function over 40
lines, and no room holding more than 15 % of the code. A module or function that outgrows them is split by role
(what each part is for), not cut in half. Each failure prints what was measured, so the fix starts from numbers."""

from __future__ import annotations

import ast
import functools
import io
import tokenize
from pathlib import Path
from typing import NamedTuple

PACKAGE = Path(__file__).resolve().parent.parent / "pwdeploy"
MAX_MODULE_LINES = 400  # every line of the file: code, docstrings, comments, blanks
MAX_FUNCTION_LINES = 40  # from `def` to the function's last line, its docstring included (decorators not)
MAX_ROOM_SHARE = 0.15  # of the package's code lines (neither blank, nor comment, nor docstring)
_LAYOUT = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)


class Module(NamedTuple):
    lines: int  # every line of the file
    code: int  # its code lines
    functions: list[tuple[int, str]]  # (lines, qualified name) of each function


@functools.cache
def _house() -> dict[str, Module]:
    """Every module of pwdeploy/ measured, by its path under pwdeploy/."""
    house = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        house[_name(path)] = Module(len(source.splitlines()), _code_lines(source, tree), _functions(tree))
    return house


def _name(path: Path) -> str:
    """A module's path under pwdeploy/ (``kube/seam.py``)."""
    return path.relative_to(PACKAGE).as_posix()


def _room(name: str) -> str:
    """The top-level package or module a module belongs to (a sub-room counts with its room)."""
    return name.split("/")[0].removesuffix(".py")


def _rooms() -> dict[str, int]:
    """The code lines of each room."""
    rooms: dict[str, int] = {}
    for name, module in _house().items():
        rooms[_room(name)] = rooms.get(_room(name), 0) + module.code
    return rooms


def _functions(tree: ast.AST) -> list[tuple[int, str]]:
    """(lines, qualified name) of every function and method, nested ones included."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                found.append(((child.end_lineno or child.lineno) - child.lineno + 1, name))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def _code_lines(source: str, tree: ast.AST) -> int:
    """Lines with code on them: not blank, not only a comment, not part of a docstring (radon's SLOC, nearly)."""
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in _LAYOUT:
            lines.update(range(token.start[0], token.end[0] + 1))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body:
            first = body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                lines.difference_update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return len(lines)


def _figures() -> str:
    """The house in numbers, printed with every failure."""
    house = _house()
    total = sum(module.code for module in house.values())
    biggest = sorted(_rooms().items(), key=lambda kv: -kv[1])[:3]
    longest = max(lines for module in house.values() for lines, _ in module.functions)
    return (
        f"pwdeploy/: {len(house)} modules, {sum(m.lines for m in house.values())} lines, {total} code lines; the "
        f"longest module {max(m.lines for m in house.values())} lines, the longest function {longest} lines; the "
        "biggest rooms: " + ", ".join(f"{room} {lines} code lines ({lines / total:.1%})" for room, lines in biggest)
    )


def test_no_module_is_over_the_limit() -> None:
    over = sorted(((m.lines, name) for name, m in _house().items() if m.lines > MAX_MODULE_LINES), reverse=True)
    assert not over, (
        f"modules over {MAX_MODULE_LINES} lines (split each by role): "
        + ", ".join(f"{name} {lines}" for lines, name in over)
        + f"\n{_figures()}"
    )


def test_no_function_is_over_the_limit() -> None:
    over = sorted(
        ((lines, f"{name}:{function}") for name, m in _house().items() for lines, function in m.functions),
        reverse=True,
    )
    over = [(lines, name) for lines, name in over if lines > MAX_FUNCTION_LINES]
    assert not over, (
        f"functions over {MAX_FUNCTION_LINES} lines (make its parts functions of their own, or a table): "
        + ", ".join(f"{name} {lines}" for lines, name in over)
        + f"\n{_figures()}"
    )


def test_no_room_holds_more_than_its_share() -> None:
    total = sum(module.code for module in _house().values())
    over = sorted(
        ((lines / total, room) for room, lines in _rooms().items() if lines / total > MAX_ROOM_SHARE), reverse=True
    )
    assert not over, (
        f"rooms holding more than {MAX_ROOM_SHARE:.0%} of the code lines (move a part that has a role of its own "
        "to a room of its own): " + ", ".join(f"{room} {share:.1%}" for share, room in over) + f"\n{_figures()}"
    )


def test_the_measure_counts_what_it_says() -> None:
    """The counting itself, on a planted module: a docstring, comments and blanks are no code lines; a nested
    function is measured on its own and inside the one around it."""
    source = (
        '"""A module\'s docstring,\nover two lines."""\n'
        "\n"
        "# a comment\n"
        "def outer(x):\n"
        '    """Its docstring."""\n'
        "    def inner():\n"
        "        return (x +\n"
        "                1)  # one expression, two lines\n"
        "    return inner()\n"
        "\n"
        "class Box:\n"
        "    def get(self):\n"
        "        return 1\n"
    )
    tree = ast.parse(source)
    assert _code_lines(source, tree) == 8
    assert sorted(_functions(tree)) == [(2, "Box.get"), (3, "outer.inner"), (6, "outer")]
