"""Whether a line runs only off Pathways (or only on it), as the program says so: under an ``if`` that asks about
Pathways or the single controller (``if not runtime.on_pathways():``), after an early exit that asks
(``if config.enable_single_controller: return``, MaxText's ``maybe_initialize_jax_distributed_system``), or in a
function of the module that is called only from such places (a helper the guarded function calls after its early
return). The rules that fire on multi-controller or non-Pathways code ask this and stay quiet where the program
already keeps the code away from Pathways; which way the test points is not judged (precision over recall)."""

from __future__ import annotations

import ast

from pwdeploy.check.program import Module

# Words of a test that asks whether this is Pathways, its single controller or its proxy backend.
PATHWAYS_WORDS = ("pathways", "jax_platforms", "single_controller", "proxy")
_EXITS = (ast.Return, ast.Raise)


def asks_pathways(module: Module, test: ast.AST) -> bool:
    text = module.code(test).lower()
    return any(word in text for word in PATHWAYS_WORDS)


def pathways_guarded(module: Module, node: ast.AST) -> bool:
    """``node`` runs only as the program decides about Pathways: under an ``if`` that asks, after an early exit that
    asks, or inside a function of this module called only from such places."""
    return _guarded_here(module, node) or _enclosing(module, node) in _guarded_functions(module)


def _guarded_here(module: Module, node: ast.AST) -> bool:
    child = node
    for parent in module.ancestors(node):
        if isinstance(parent, ast.If) and child is not parent.test and asks_pathways(module, parent.test):
            return True
        for block in _blocks(parent):
            if child in block and any(_early_exit(module, s) for s in block[: block.index(child)]):
                return True
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return False  # a guard outside the function does not run with it
        child = parent
    return False


def _blocks(parent: ast.AST) -> list[list[ast.stmt]]:
    return [value for name in ("body", "orelse", "finalbody") if isinstance(value := getattr(parent, name, None), list)]


def _early_exit(module: Module, statement: ast.stmt) -> bool:
    """``if <asks about Pathways>: ...; return`` (or raise): what follows it in the block runs only one way."""
    return (
        isinstance(statement, ast.If)
        and bool(statement.body)
        and isinstance(statement.body[-1], _EXITS)
        and asks_pathways(module, statement.test)
    )


def _enclosing(module: Module, node: ast.AST) -> str | None:
    """The module's top-level function that holds ``node``, if any."""
    outer = None
    for parent in module.ancestors(node):
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            outer = parent
    return outer.name if outer is not None and module.functions.get(outer.name) is outer else None


def _guarded_functions(module: Module) -> set[str]:
    """Top-level functions whose every call in the module (at least one) is guarded, or is in such a function.
    Asked only for a line not guarded where it is (a few calls a file), so it is not kept."""
    calls: dict[str, list[ast.Call]] = {}
    for node in module.of(ast.Call, ordered=False):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in module.functions:
            calls.setdefault(node.func.id, []).append(node)
    guarded: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, sites in calls.items():
            if name not in guarded and all(_guarded_here(module, c) or _enclosing(module, c) in guarded for c in sites):
                guarded.add(name)
                changed = True
    return guarded
