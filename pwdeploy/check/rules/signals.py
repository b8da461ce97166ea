"""A SIGTERM handler that fails the job when Kubernetes stops it (24): one that exits with a code other than 143, 75
or a code of scheduling.retry_exit_codes, and one that returns without stopping the program.

The kubelet stops a container with SIGTERM and, once the grace period is over, SIGKILL (137). The head's
podFailurePolicy fails the JobSet on any exit of main outside [0, 75, 143, retry codes]: a handler that exits 1
turns a Kueue eviction into a failed job, one that exits 0 completes it unfinished, and one that only logs leaves
the program running into the SIGKILL (docs/restarts.md, "How a container stops")."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from pwdeploy import identifiers as ids
from pwdeploy.check.program import FunctionNode, Module
from pwdeploy.check.rule import Context, Hit, Rule

KILLED = "kubernetes: pkg/kubelet/kuberuntime/kuberuntime_container.go (killContainer)"
SIGTERM = frozenset({"signal.SIGTERM", "signal.Signals.SIGTERM"})
EXITS = frozenset({"sys.exit", "os._exit"})
LOGS = frozenset(
    {"print", "debug", "info", "warning", "warn", "error", "exception", "critical", "log", "write", "flush"}
)
# What a handler that dies of SIGTERM itself calls: the default action back, then the signal again.
REDELIVERS = frozenset({"os.kill", "signal.raise_signal", "os.killpg", "signal.pthread_kill"})


class Handler(NamedTuple):
    """One SIGTERM handler installed: where, how it reads, and what it does."""

    line: int
    code: str  # the signal.signal(...) call as written
    exits: tuple[int, ...]  # the literal codes it exits with (0 for a bare exit)
    swallows: str  # "" when it stops the program (or may), else how it lets the program run on


def handlers(module: Module) -> list[Handler]:
    if not module.mentions("SIGTERM", "signal"):
        return []
    found = []
    for call, name in module.calls():
        if name == "signal.signal" and len(call.args) >= 2 and _is_sigterm(module, call.args[0]):
            exits, swallows = _what_it_does(module, call.args[1])
            if exits or swallows:
                found.append(Handler(call.lineno, module.code(call), exits, swallows))
    return found


def _is_sigterm(module: Module, node: ast.expr) -> bool:
    return module.qualname(node) in SIGTERM or (isinstance(node, ast.Constant) and node.value == 15)


def _what_it_does(module: Module, handler: ast.expr) -> tuple[tuple[int, ...], str]:
    named = module.qualname(handler)
    if named == "signal.SIG_IGN":
        return (), "ignores SIGTERM (SIG_IGN)"
    if named == "signal.default_int_handler":
        return (128 + 2,), ""  # KeyboardInterrupt, uncaught: Python ends the process with SIGINT (130)
    body: list[ast.AST]
    if isinstance(handler, ast.Lambda):
        body = [handler.body]
    elif isinstance(handler, ast.Name) and isinstance(function := module.functions.get(handler.id), FunctionNode):
        body = list(function.body)
    else:
        return (), ""  # a method, an imported function: not read here
    nodes = [node for top in body for node in _walk(top)]
    exits = tuple(code for node in nodes if (code := _exit_code(module, node)) is not None)
    if exits or any(_acts(module, node) for node in nodes):
        return exits, ""
    return (), "returns without stopping the program (it only logs, or does nothing)"


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a handler's body, not entering functions defined inside it."""
    yield node
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            yield from _walk(child)


def _exit_code(module: Module, node: ast.AST) -> int | None:
    """The literal code ``sys.exit(N)``, ``os._exit(N)``, ``exit(N)`` or ``raise SystemExit(N)`` exits with (0
    without one); None for anything else, or a code that is not a literal."""
    call = node.exc if isinstance(node, ast.Raise) else node
    if isinstance(node, ast.Raise) and isinstance(call, ast.Name) and call.id == "SystemExit":
        return 0
    if not isinstance(call, ast.Call):
        return None
    raised = isinstance(node, ast.Raise) and isinstance(call.func, ast.Name) and call.func.id == "SystemExit"
    is_exit = raised or module.called(call) in EXITS or module.is_builtin_call(call, "exit", "quit")
    if not is_exit:
        return None
    if not call.args:
        return 0
    value = call.args[0]
    return value.value if isinstance(value, ast.Constant) and type(value.value) is int else None


def _acts(module: Module, node: ast.AST) -> bool:
    """Whether the handler does something that may stop the program later: raises, exits, signals, changes state
    the program can see (a global, an attribute, an item), or calls a method that is not logging."""
    if isinstance(node, (ast.Raise, ast.Global, ast.Nonlocal)):
        return True
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(isinstance(t, (ast.Attribute, ast.Subscript)) for t in targets)
    if isinstance(node, ast.Call):
        if module.called(node) in EXITS | REDELIVERS:
            return True
        if isinstance(node.func, ast.Attribute):
            return node.func.attr not in LOGS
    return False


def judge(context: Context) -> Iterable[Hit]:
    job = context.job
    allowed = {ids.RETRY_EXIT_CODE, ids.STOPPED_EXIT_CODE, *(job.scheduling.retry_exit_codes if job else ())}
    for known in context.of(RULE_ID):
        for handler in known.facts:
            wrong = [code for code in handler.exits if code not in allowed]
            if handler.swallows:
                yield Hit(known.file, handler.line, f"{handler.code} {handler.swallows}: {_RUNS_ON}")
            elif wrong:
                yield Hit(known.file, handler.line, f"{handler.code}: the handler exits {wrong[0]}: {_said(wrong[0])}")


_RUNS_ON = (
    "the program runs on until the kubelet's SIGKILL at the end of the grace period (exit 137), which the head's "
    "podFailurePolicy fails the JobSet on"
)


def _said(code: int) -> str:
    if code == 0:
        return "the head Job completes, and the JobSet with it, with the work unfinished"
    return (
        "a stop from outside (a Kueue eviction, a deleted head pod) then fails the JobSet instead of leaving it to be "
        "requeued or restarted"
    )


RULE_ID = "sigterm-handler"
RULES = (
    Rule(
        RULE_ID,
        24,
        "warning",
        "a SIGTERM handler that exits with a code other than 143/75 (or a retry code), or lets the program run on",
        "save, then exit 143 (or 75): pwdeploy.runtime.stop_on_sigterm() does both within the pod's grace period "
        '(docs/restarts.md, "Saving on SIGTERM")',
        KILLED,
        learn=handlers,
        judge=judge,
        needs_job=True,
    ),
)
