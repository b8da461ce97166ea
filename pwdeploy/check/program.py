"""The job's Python sources as the rules read them: parsed, never imported or run.

A ``Module`` knows what its names were imported as (``import jax as j`` makes ``j.devices`` read
``jax.devices``; ``from orbax import checkpoint as ocp`` makes ``ocp.SaveArgs`` read
``orbax.checkpoint.SaveArgs``), which names hold jitted functions, and which code can never run (``if False:``,
``if TYPE_CHECKING:``), so that a rule matches what a call is, not what it is called.
"""

from __future__ import annotations

import ast
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
JIT = frozenset({"jax.jit", "jax.pmap"})


@dataclass
class Module:
    name: str  # dotted, relative to the folder it was found in: "train", "data.loader"
    path: Path
    shown: str  # the file as findings name it
    tree: ast.Module
    text: str
    ignores: dict[int, frozenset[str]] = field(default_factory=dict)  # line -> rules ignored there ("*": all)

    @cached_property
    def aliases(self) -> dict[str, str]:
        """Local name -> what it was imported as, over the whole file (imports inside functions too)."""
        found: dict[str, str] = {}
        for node in self.of(ast.Import, ast.ImportFrom):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        found[alias.asname] = alias.name
                    else:
                        top = alias.name.partition(".")[0]
                        found[top] = top
            elif isinstance(node, ast.ImportFrom):
                base = self.absolute(node)
                for alias in node.names:
                    if alias.name != "*" and base:
                        found[alias.asname or alias.name] = f"{base}.{alias.name}"
        return found

    def absolute(self, node: ast.ImportFrom) -> str:
        """The module an ``ImportFrom`` names, relative imports made absolute against this module's package."""
        if not node.level:
            return node.module or ""
        package = self.name.split(".")[: -node.level] if not self.is_package else self.name.split(".")
        if self.is_package and node.level > 1:
            package = package[: -(node.level - 1)]
        return ".".join([*package, *([node.module] if node.module else [])])

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"

    def qualname(self, node: ast.AST) -> str | None:
        """``jax.devices`` for ``j.devices`` after ``import jax as j``; None for what was not imported."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.qualname(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def called(self, node: ast.AST) -> str | None:
        """The qualified name of what ``node`` calls, when it is a call of an imported name."""
        return self.qualname(node.func) if isinstance(node, ast.Call) else None

    def mentions(self, *words: str) -> bool:
        """Whether the source holds any of ``words``: a rule whose names cannot appear without one of them (an
        import of ``orbax``, an attribute ``elastic_retry``) skips the file at the cost of a text search."""
        return any(word in self.text for word in words)

    def is_builtin_call(self, node: ast.AST, *names: str) -> bool:
        """A call of the builtin ``name`` (not shadowed by an import of the same name)."""
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in names
            and node.func.id not in self.aliases
        )

    @cached_property
    def _by_type(self) -> dict[type, list[ast.AST]]:
        """The live nodes by type, each list in source order, from one walk: the rules ask for nodes of a kind and
        never walk the whole file themselves."""
        by_type: dict[type, list[ast.AST]] = {}
        stack: list[ast.AST] = [self.tree]
        pop, extend = stack.pop, stack.extend
        while stack:
            node = pop()
            found = by_type.get(type(node))
            if found is None:
                by_type[type(node)] = [node]
            else:
                found.append(node)
            children = _children(node)
            children.reverse()
            extend(children)
        return by_type

    @cached_property
    def parents(self) -> dict[int, ast.AST]:
        """Each live node's parent (by ``id``): a second walk, made only for a rule that asks where a node is."""
        parents: dict[int, ast.AST] = {}
        stack: list[ast.AST] = [self.tree]
        while stack:
            node = stack.pop()
            children = _children(node)
            for child in children:
                parents[id(child)] = node
            stack.extend(children)
        return parents

    def of(self, *kinds: type, ordered: bool = True) -> Iterator[ast.AST]:
        """The live nodes of these kinds, in source order (an index built once: rules do not walk the file);
        ``ordered=False``: kind by kind, for a rule to which the order makes no difference."""
        if len(kinds) == 1 or not ordered:
            return (node for kind in kinds for node in self._by_type.get(kind, ()))
        if len(kinds) == 1:
            return iter(self._by_type.get(kinds[0], ()))
        found = [node for kind in kinds for node in self._by_type.get(kind, ())]
        found.sort(key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))
        return iter(found)

    def calls(self) -> Iterator[tuple[ast.Call, str]]:
        """(call, qualified name) of every live call of an imported name."""
        return iter(self._calls)

    @cached_property
    def _calls(self) -> list[tuple[ast.Call, str]]:
        return [(n, name) for n in self.of(ast.Call) if isinstance(n, ast.Call) and (name := self.called(n) or "")]

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        parent = self.parents.get(id(node))
        while parent is not None:
            yield parent
            parent = self.parents.get(id(parent))

    @cached_property
    def functions(self) -> dict[str, FunctionNode]:
        """The module's top-level functions by name."""
        return {n.name: n for n in self.tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}

    @cached_property
    def jitted(self) -> frozenset[str]:
        """Names the module binds anywhere (functions included) to a jitted function: ``f = jax.jit(g)``,
        ``@jax.jit``/``@partial(jax.jit, ...)`` on a def, ``f = g.lower(...).compile()``."""
        names: set[str] = set()
        for node in self.of(ast.Assign):
            if isinstance(node, ast.Assign) and self.is_jitted_value(node.value):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        for node in self.of(ast.FunctionDef, ast.AsyncFunctionDef, ordered=False):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                self.is_jit_decorator(d) for d in node.decorator_list
            ):
                names.add(node.name)
        return frozenset(names)

    def is_jitted_value(self, value: ast.AST) -> bool:
        if self.called(value) in JIT:
            return True
        return (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr == "compile"
            and isinstance(value.func.value, ast.Call)
            and isinstance(value.func.value.func, ast.Attribute)
            and value.func.value.func.attr == "lower"
        )

    def is_jit_decorator(self, decorator: ast.AST) -> bool:
        if self.qualname(decorator) in JIT or self.called(decorator) in JIT:
            return True
        return (
            self.called(decorator) == "functools.partial"
            and isinstance(decorator, ast.Call)
            and bool(decorator.args)
            and self.qualname(decorator.args[0]) in JIT
        )

    @cached_property
    def env_writes(self) -> list[tuple[ast.Assign | ast.Call, str, ast.expr]]:
        """(node, variable, value) for each environment variable the module sets (``_env_writes``)."""
        return list(_env_writes(self))

    @cached_property
    def _lines(self) -> list[bytes]:
        # Lines as the parser numbers them (\n, \r\n, \r), as bytes: col_offset counts UTF-8 bytes.
        return [line.encode() for line in io.StringIO(self.text, newline="").readlines()]

    def code(self, node: ast.AST) -> str:
        """The source text of ``node``, for quoting in a message (``ast.get_source_segment``, with the file split
        into lines once rather than at every call)."""
        start, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        first, last = getattr(node, "col_offset", None), getattr(node, "end_col_offset", None)
        if start is None or end is None or first is None or last is None or end > len(self._lines):
            return ast.unparse(node)
        lines = self._lines[int(start) - 1 : int(end)]
        if len(lines) == 1:
            return lines[0][int(first) : int(last)].decode(errors="replace")
        text = lines[0][int(first) :] + b"".join(lines[1:-1]) + lines[-1][: int(last)]
        return text.decode(errors="replace")


# Fields that never hold a node a rule asks for: names and numbers, and the contexts and operators (shared,
# childless) under every name and expression.
_NOT_NODES = frozenset(
    {"identifier", "string", "constant", "int", "expr_context", "operator", "boolop", "unaryop", "cmpop"}
)
_SIGNATURE = re.compile(r"(\w+)([*?]?) (\w+)")


def _node_fields(kind: type) -> tuple[tuple[str, bool], ...]:
    """(field, holds a list) for each field of an ``ast`` class that can hold a child, in field order, read from
    its ASDL signature (``Name(identifier id, expr_context ctx)``): the walk then asks only for what can be one."""
    signature = {name: (kind_, mark) for kind_, mark, name in _SIGNATURE.findall(kind.__doc__ or "")}
    fields: list[tuple[str, bool]] = []
    for name in getattr(kind, "_fields", ()):
        kind_, mark = signature.get(name, ("?", "?"))
        if kind_ not in _NOT_NODES:
            fields.append((name, mark == "*" and (kind, name) not in _HOLES))
    return tuple(fields)


# Lists that hold None beside nodes (``{**a}``: a None key; a keyword-only argument without a default): walked
# item by item, as a field not in the signature is.
_HOLES = frozenset({(ast.Dict, "keys"), (ast.arguments, "kw_defaults")})
_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}


def _children(node: ast.AST) -> list[ast.AST]:
    """``ast.iter_child_nodes`` as a list, less the leaves and the branch of an ``if``/``while`` that cannot run
    (one list per node, fields known per class: the walk is most of what `check` costs beyond parsing)."""
    kind = type(node)
    fields = _FIELDS.get(kind)
    if fields is None:
        fields = _FIELDS[kind] = _node_fields(kind)
    children: list[ast.AST] = []
    for name, is_list in fields:
        value = getattr(node, name, None)
        if is_list:
            children += value  # type: ignore[arg-type]  # an ASDL list: nodes only
        elif isinstance(value, ast.AST):
            children.append(value)
        elif isinstance(value, list):
            children += [item for item in value if isinstance(item, ast.AST)]
    if kind is ast.If or kind is ast.While:
        verdict = static_truth(node.test)  # type: ignore[attr-defined]
        if verdict is not None:
            return [node.test, *(node.body if verdict else node.orelse)]  # type: ignore[attr-defined]
    return children


def static_truth(test: ast.AST) -> bool | None:
    """True/False for a test Python decides before running (``False``, ``0``, ``TYPE_CHECKING``), else None."""
    if isinstance(test, ast.Constant):
        return bool(test.value)
    if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
        return False
    if isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING":
        return False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = static_truth(test.operand)
        return None if inner is None else not inner
    return None


EnvWrite = tuple[ast.Assign | ast.Call, str, ast.expr]


def env_writes(module: Module) -> list[EnvWrite]:
    """The module's ``_env_writes``, found once."""
    return module.env_writes


def _env_writes(module: Module) -> Iterator[EnvWrite]:
    """(node, variable, value) for each literal-named environment variable the module sets: ``os.environ[K] = V``,
    ``os.environ.setdefault(K, V)``, ``os.environ.update({K: V})`` / ``update(K=V)``, ``os.putenv(K, V)``."""
    if not module.mentions("environ", "putenv"):
        return
    for node in module.of(ast.Assign, ast.Call, ordered=False):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if not (isinstance(target, ast.Subscript) and module.qualname(target.value) == "os.environ"):
                    continue
                if isinstance(target.slice, ast.Constant) and isinstance(target.slice.value, str):
                    yield node, target.slice.value, node.value
        elif isinstance(node, ast.Call):
            name = module.called(node)
            if name in ("os.environ.setdefault", "os.putenv") and len(node.args) == 2:
                key = node.args[0]
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    yield node, key.value, node.args[1]
            elif name == "os.environ.update":
                yield from _update_pairs(node)


def _update_pairs(node: ast.Call) -> Iterator[EnvWrite]:
    for arg in node.args:
        if isinstance(arg, ast.Dict):
            for key, value in zip(arg.keys, arg.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    yield node, key.value, value
    for keyword in node.keywords:
        if keyword.arg:
            yield node, keyword.arg, keyword.value


def literal_str(node: ast.AST) -> str | None:
    """The string a node is when Python knows it before running (a literal; an f-string's leading text is not)."""
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
