"""The training loop: host syncs on every step (14), and errors swallowed inside ``elastic_retry`` (16)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from pwdeploy.check.program import FunctionNode, Module
from pwdeploy.check.rule import JAX_PROFILER, MAXTEXT_ELASTIC, PORTING, PW_ELASTIC, Hit, Rule

SYNC_CALLS = frozenset({"jax.device_get", "jax.block_until_ready"})
SYNC_CONVERSIONS = frozenset({"numpy.asarray", "numpy.array", "jax.device_get"})
SYNC_METHODS = frozenset({"item", "tolist", "block_until_ready"})
BUILTIN_CONVERSIONS = ("float", "int", "bool")


def _every_step(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of a loop body that run on every iteration (not those under an ``if`` or an inner loop)."""
    for statement in body:
        yield statement
        if isinstance(statement, (ast.With, ast.AsyncWith)):
            yield from _every_step(statement.body)
        elif isinstance(statement, ast.Try):
            yield from _every_step([*statement.body, *statement.finalbody])


def _simple(statement: ast.stmt) -> bool:
    return not isinstance(
        statement, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, *_DEFS)
    )


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _names(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def _device_values(statements: list[ast.stmt], jitted: frozenset[str]) -> set[str]:
    """Names a loop body binds to what a jitted function returned (``params, loss = step(params, batch)``)."""
    found: set[str] = set()
    for statement in statements:
        if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call):
            func = statement.value.func
            if isinstance(func, ast.Name) and func.id in jitted:
                for target in statement.targets:
                    found |= _names(target)
    return found


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _sync(module: Module, call: ast.Call, device: set[str]) -> bool:
    name = module.called(call)
    if name in SYNC_CALLS:
        return True
    arg = call.args[0] if len(call.args) == 1 else None
    on_device = arg is not None and _root_name(arg) in device
    if on_device and (name in SYNC_CONVERSIONS or module.is_builtin_call(call, *BUILTIN_CONVERSIONS)):
        return True
    func = call.func
    return isinstance(func, ast.Attribute) and func.attr in SYNC_METHODS and _root_name(func.value) in device


TEXT_BUILTINS = ("print", "str", "repr", "format")


def _formatted(module: Module, node: ast.AST, device: set[str]) -> ast.AST | None:
    """The device value an f-string, ``%``, ``.format()``, ``print()``, ``str()``/``repr()``/``format()`` turns into
    text (``print(f"{loss:.4f}")``, ``"%.4f" % loss``); None when it formats only host values."""
    values: list[ast.AST] = []
    if isinstance(node, ast.JoinedStr):
        values = [v.value for v in node.values if isinstance(v, ast.FormattedValue)]
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant):
        values = list(node.right.elts) if isinstance(node.right, ast.Tuple) else [node.right]
    elif isinstance(node, ast.Call) and module.is_builtin_call(node, *TEXT_BUILTINS):
        values = [*node.args, *(k.value for k in node.keywords if k.arg is None)]
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and isinstance(node.func.value, ast.Constant)
    ):
        values = [*node.args, *(k.value for k in node.keywords)]
    return next((v for v in values if _root_name(v) in device), None)


def _loops(module: Module) -> Iterator[tuple[ast.For | ast.While, frozenset[str]]]:
    """Each live loop with the jitted names it can see (bound anywhere in the module: a function's own included)."""
    for node in module.of(ast.For, ast.While):
        if isinstance(node, (ast.For, ast.While)):
            yield node, module.jitted


def host_sync(module: Module) -> Iterator[Hit]:
    for loop, jitted in _loops(module):
        steps = list(_every_step(loop.body))
        device = _device_values(steps, jitted)
        if not device:
            continue  # not a loop that calls a jitted step
        for statement in steps:
            if not _simple(statement):
                continue
            for node in ast.walk(statement):
                if isinstance(node, ast.Call) and _sync(module, node, device):
                    yield Hit(
                        module.shown,
                        node.lineno,
                        f"{module.code(node)} waits for the device on every step "
                        f"of the loop at line {loop.lineno}: on Pathways each is a round trip through the IFRT "
                        "proxy and stops dispatching the next step ahead",
                    )
                elif (value := _formatted(module, node, device)) is not None:
                    yield Hit(
                        module.shown,
                        getattr(node, "lineno", loop.lineno),
                        f"{module.code(node)} turns {module.code(value)}, which the jitted step returned, into text "
                        f"on every step of the loop at line {loop.lineno}: formatting or printing an array reads it "
                        "to the host and waits for the device, on Pathways a round trip through the IFRT proxy",
                    )


BROAD = frozenset({"Exception", "BaseException", "builtins.Exception", "builtins.BaseException"})
JAX_ERRORS = frozenset({"jax.errors.JaxRuntimeError", "jaxlib.xla_extension.XlaRuntimeError"})


def _elastic_functions(module: Module) -> Iterator[FunctionNode]:
    """Functions wrapped by ``<manager>.elastic_retry(...)``: decorated, or passed as ``elastic_retry(...)(f)``."""
    if not module.mentions("elastic_retry"):
        return
    wrapped: set[str] = set()
    for node in module.of(ast.Call):
        if isinstance(node, ast.Call) and _is_elastic_retry(node.func) and node.args:
            wrapped |= {a.id for a in node.args if isinstance(a, ast.Name)}
    for node in module.of(ast.FunctionDef, ast.AsyncFunctionDef, ordered=False):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
            node.name in wrapped or any(_is_elastic_retry(d) for d in node.decorator_list)
        ):
            yield node


def _is_elastic_retry(node: ast.AST) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return isinstance(target, ast.Attribute) and target.attr == "elastic_retry" and isinstance(node, ast.Call)


def _swallows(module: Module, handler: ast.ExceptHandler) -> str | None:
    """What a handler catches that hides a slice loss, when its body raises nothing."""
    if any(isinstance(n, ast.Raise) for n in ast.walk(handler)):
        return None
    if handler.type is None:
        return "except:"
    caught = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    for kind in caught:
        name = module.qualname(kind) or (kind.id if isinstance(kind, ast.Name) else "")
        if name in BROAD or name in JAX_ERRORS:
            return f"except {module.code(kind)}"
    return None


def elastic_swallow(module: Module) -> Iterator[Hit]:
    functions = list(_elastic_functions(module))
    for function in functions:
        for node in ast.walk(function):
            if isinstance(node, ast.ExceptHandler) and (caught := _swallows(module, node)):
                yield Hit(
                    module.shown,
                    node.lineno,
                    f"{caught} inside {function.name}(), which elastic_retry "
                    "wraps, handles the JaxRuntimeError of a lost slice without raising it: elastic_retry never "
                    "sees the slice go down, so it neither waits for it nor retries",
                )
    if not functions:
        return
    for node in module.of(ast.Assign):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and node.value.value is False
            and any(module.qualname(t) == "logging.raiseExceptions" for t in node.targets)
        ):
            yield Hit(
                module.shown,
                node.lineno,
                "logging.raiseExceptions = False with elastic_retry: a "
                "JaxRuntimeError raised while a log call formats an array is silently dropped",
                "leave logging.raiseExceptions = True, as the elastic_retry docstring asks",
            )


START_TRACE = frozenset({"jax.profiler.start_trace", "pathwaysutils.profiling.start_trace"})
STOP_TRACE = frozenset({"jax.profiler.stop_trace", "pathwaysutils.profiling.stop_trace"})


def _stops_finally(module: Module, function: FunctionNode) -> bool:
    """The function stops the trace in a ``finally:``, so that a retry does not find it still running."""
    return any(
        module.called(call) in STOP_TRACE
        for node in ast.walk(function)
        if isinstance(node, ast.Try)
        for statement in node.finalbody
        for call in ast.walk(statement)
    )


def _conditional(module: Module, node: ast.AST, function: FunctionNode) -> bool:
    """Under an ``if`` inside ``function``: the program may start the trace on the first attempt only."""
    for parent in module.ancestors(node):
        if parent is function:
            return False
        if isinstance(parent, (ast.If, ast.IfExp)):
            return True
    return False


def elastic_profiler(module: Module) -> Iterator[Hit]:
    for function in _elastic_functions(module):
        if _stops_finally(module, function):
            continue
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Call)
                and (name := module.called(node)) in START_TRACE
                and not _conditional(module, node, function)
            ):
                yield Hit(
                    module.shown,
                    node.lineno,
                    f"{module.code(node)} starts a trace inside {function.name}(), which elastic_retry runs again "
                    f"after a slice loss: the lost attempt never reached {name.rpartition('.')[0]}.stop_trace(), "
                    'so the retry fails with "RuntimeError: Profile has already been started. Only one profile may '
                    'be run at a time." (and a trace taken while slices come back measures the recovery)',
                )


RULES = (
    Rule(
        "host-sync",
        14,
        "warning",
        "per-step host syncs in the training loop (float(loss), np.asarray, jax.device_get, .block_until_ready())",
        "read values only every N steps (if step % N == 0: ...) or after the loop; keep the step's outputs on device",
        f"{PORTING} (introduction: asynchronous dispatch)",
        host_sync,
    ),
    Rule(
        "elastic-swallow",
        16,
        "warning",
        "inside elastic_retry: a broad except around the step, or logging set to swallow the JaxRuntimeError",
        "catch only what you handle, or re-raise (raise) after logging, so elastic_retry sees the slice loss",
        PW_ELASTIC,
        elastic_swallow,
    ),
    Rule(
        "elastic-profiler",
        19,
        "warning",
        "jax.profiler.start_trace() on every attempt of a function elastic_retry retries, never stopped in a finally:",
        "profile outside the elastic function (or with jax.profiler.trace(...) as a with block), or stop the trace "
        "in a finally: so that a retry starts a new one",
        f"{JAX_PROFILER}; {MAXTEXT_ELASTIC}",
        elastic_profiler,
    ),
)
