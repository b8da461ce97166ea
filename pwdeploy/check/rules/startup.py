"""How the program starts: the backend before ``pathwaysutils.initialize()`` (1), ``jax.distributed.initialize()``
(2), and JAX compilation-cache settings that ``initialize()`` turns off (13)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from pwdeploy.check.program import JIT, Module, env_writes, literal_str, static_truth
from pwdeploy.check.rule import MAXTEXT_DISTRIBUTED, PORTING, PW_INIT, Context, Hit, Known, Rule
from pwdeploy.check.rules.guards import pathways_guarded

INITIALIZE = frozenset({"pathwaysutils.initialize", "pwdeploy.runtime.initialize"})
# Calls that start JAX's backend (or need it started): on Pathways the first one must come after initialize().
BACKEND = frozenset(
    {f"jax.{name}" for name in ("devices", "device_count", "local_devices", "local_device_count", "device_put")}
    | {f"jax.{name}" for name in ("process_index", "process_count", "make_mesh")}
    | {"jax.experimental.mesh_utils.create_device_mesh", "jax.random.PRNGKey", "jax.random.key"}
    | {f"jax.numpy.{name}" for name in ("array", "asarray", "zeros", "ones", "arange", "full", "empty", "eye")}
)


# What runs, in order, as ``init-order`` keeps it of a module (its tree is gone by the time the order is walked),
# each step (kind, line, a, b, c): ("init", line) a call of initialize(); ("use", line, code) the first backend use
# of this sequence (a later one cannot be the first before initialize()); ("import", line, module) an import;
# ("call", line, own, imported, called) a call that may run a job function: ``own`` a bare name (this module's
# function, if it has one by that name), ``imported`` an imported name (owner.function), ``called`` the name
# called (a job method that initialises may be behind it). Unused places are "".
Step = tuple[str, int, str, str, str]


class Flow(NamedTuple):
    """What ``init-order`` keeps of a module: its import-time run and each top-level function's body, as steps."""

    body: tuple[Step, ...]
    functions: dict[str, tuple[Step, ...]]
    initializers: frozenset[str]  # functions (at any depth) that call initialize()
    initialize_at: int  # the first initialize() call's line (0: none)


def flow(module: Module) -> Flow:
    top = set(module.jitted)
    functions = {name: _Steps(module, top).run(function.body) for name, function in module.functions.items()}
    initializers = frozenset(name for name, at in _calls_by_function(module) if at in INITIALIZE)
    first = next((c.lineno for c, name in module.calls() if name in INITIALIZE), 0)
    return Flow(_Steps(module, top).run(module.tree.body), functions, initializers, first)


class _Steps:
    """One sequence of steps: statements as Python runs them (decorators, class bodies, the branch of an ``if``
    that can run, calls in the order their expression evaluates them), without entering any function."""

    def __init__(self, module: Module, jitted: set[str]) -> None:
        self.module = module
        self.jitted = jitted
        self.steps: list[Step] = []
        self.used = False

    def run(self, statements: list[ast.stmt]) -> tuple[Step, ...]:
        for statement in statements:
            self.statement(statement)
        return tuple(self.steps)

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for decorator in node.decorator_list:
                self.expression(decorator)
            if isinstance(node, ast.ClassDef):
                for inner in node.body:
                    self.statement(inner)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [self.module.absolute(node)]
            self.steps.extend(("import", node.lineno, name, "", "") for name in names)
            return
        if isinstance(node, (ast.If, ast.While)):
            verdict = static_truth(node.test)
            if verdict is not None:
                for inner in node.body if verdict else node.orelse:
                    self.statement(inner)
                return
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                self.statement(child)
            elif isinstance(child, ast.ExceptHandler):
                for inner in child.body:
                    self.statement(inner)
            else:
                self.expression(child)

    def expression(self, node: ast.AST) -> None:
        calls = [n for n in _evaluated(node) if isinstance(n, ast.Call)]
        for call in sorted(calls, key=lambda c: (c.lineno, c.col_offset)):
            self.call(call)

    def call(self, call: ast.Call) -> None:
        module = self.module
        name = module.called(call) or ""
        if name in INITIALIZE:
            self.steps.append(("init", call.lineno, "", "", ""))
            return
        if not self.used and (name in BACKEND or _calls_jitted(module, call, self.jitted)):
            self.used = True
            self.steps.append(("use", call.lineno, module.code(call), "", ""))
        if isinstance(call.func, ast.Name) and call.func.id not in module.aliases:
            self.steps.append(("call", call.lineno, call.func.id, "", call.func.id))
        else:
            self.steps.append(("call", call.lineno, "", name, _called_name(call)))


class _Order:
    """Walks the entry module as Python runs it: top-level statements in order, into the job modules it imports
    and the functions it calls (once each), noting each backend use before the first initialize()."""

    def __init__(self, known: list[Known]) -> None:
        self.by_name = {k.name: k for k in known}
        self.initialized = False
        self.init_at: tuple[str, int] | None = None
        self.early: tuple[str, int, str] | None = None
        self.entered: set[tuple[int, str]] = set()
        # Where initialize() is called from: an unresolved call of one of these (a method) may initialise.
        self.initializers = frozenset().union(*(k.facts.initializers for k in known))
        self.initialize_at = next(((k.file, k.facts.initialize_at) for k in known if k.facts.initialize_at), None)

    def module(self, known: Known) -> None:
        if (id(known), "") in self.entered:
            return
        self.entered.add((id(known), ""))
        self.steps(known, known.facts.body)

    def steps(self, known: Known, steps: tuple[Step, ...]) -> None:
        for step in steps:
            if step[0] == "init":
                if not self.initialized:
                    self.initialized, self.init_at = True, (known.file, step[1])
            elif step[0] == "use":
                if not self.initialized and self.early is None:
                    self.early = (known.file, step[1], step[2])
            elif step[0] == "import":
                found = self.by_name.get(step[2])
                if found is not None:
                    self.module(found)
            else:
                self.call(known, *step[2:])

    def call(self, known: Known, own: str, imported: str, called: str) -> None:
        target: tuple[Known, str] | None = None
        if own:
            target = (known, own) if own in known.facts.functions else None
        else:
            owner_name, _, attr = imported.rpartition(".")
            owner = self.by_name.get(owner_name)
            target = (owner, attr) if owner is not None and attr in owner.facts.functions else None
        if target is None:
            if called in self.initializers:
                self.initialized = True  # a method of the job's that calls initialize(): assume it did
            return
        owner, function = target
        if (id(owner), function) not in self.entered:
            self.entered.add((id(owner), function))
            self.steps(owner, owner.facts.functions[function])


def _evaluated(node: ast.AST) -> Iterator[ast.AST]:
    """Nodes of an expression that run when it does (not the bodies of lambdas and comprehensions' defs)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if not isinstance(current, ast.Lambda):
            stack.extend(ast.iter_child_nodes(current))


def _calls_jitted(module: Module, call: ast.Call, jitted: set[str]) -> bool:
    if isinstance(call.func, ast.Name) and call.func.id in jitted:
        return True
    return module.called(call.func) in JIT  # jax.jit(f)(x)


def _called_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _calls_by_function(module: Module) -> Iterator[tuple[str, str]]:
    """(function name, qualified name) of each call of an imported name, for the functions enclosing it."""
    for call, name in module.calls():
        if name not in INITIALIZE:
            continue
        for parent in module.ancestors(call):
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield parent.name, name


def init_order(context: Context) -> Iterable[Hit]:
    known = context.of("init-order")
    entry = next((k for k in known if k.file == context.entry), None)
    if entry is None:
        return
    order = _Order(known)
    order.module(entry)
    if order.early is None:
        return
    file, line, code = order.early
    init_at = order.init_at or order.initialize_at
    if init_at is not None:
        where, init_line = init_at
        at = f"line {init_line}" if where == file else f"{where}:{init_line}"
        yield Hit(
            file,
            line,
            f"{code} runs before pathwaysutils.initialize() ({at}): on Pathways "
            "the proxy backend is not registered yet: \"Unable to initialize backend 'proxy'\"",
        )
    else:
        yield Hit(
            file,
            line,
            f"{code} uses the JAX backend and the program never calls "
            "pathwaysutils.initialize(): on Pathways \"Unable to initialize backend 'proxy'\"",
        )


def distributed_initialize(module: Module) -> Iterator[Hit]:
    for call, name in module.calls():
        if name == "jax.distributed.initialize" and not pathways_guarded(module, call):
            yield Hit(
                module.shown,
                call.lineno,
                f"{module.code(call)}: Pathways has one controller process and no "
                "coordinator: it is not needed there and raises or waits for a coordinator that never comes",
            )


CACHE_OPTIONS = frozenset(
    {
        "jax_compilation_cache_dir",
        "jax_enable_compilation_cache",
        "jax_persistent_cache_min_compile_time_secs",
        "jax_persistent_cache_min_entry_size_bytes",
        "jax_persistent_cache_enable_xla_caches",
        "jax_compilation_cache_max_size",
    }
)
CACHE_CALLS = frozenset(
    f"jax.experimental.compilation_cache.compilation_cache.{name}" for name in ("set_cache_dir", "initialize_cache")
)


def compile_cache(module: Module) -> Iterator[Hit]:
    said = "pathwaysutils.initialize() turns JAX's persistent compilation cache off: Pathways caches compiled "
    said += "programs itself"
    for call, name in module.calls():
        option = literal_str(call.args[0]) if name == "jax.config.update" and len(call.args) == 2 else None
        turned_off = isinstance(call.args[-1], ast.Constant) and call.args[-1].value is False if call.args else False
        if (option in CACHE_OPTIONS and not turned_off) or name in CACHE_CALLS:
            yield Hit(module.shown, call.lineno, f"{module.code(call)}: {said}")
    for node, key, _ in env_writes(module):
        if key.startswith("JAX_COMPILATION_CACHE") or key.startswith("JAX_PERSISTENT_CACHE"):
            yield Hit(module.shown, node.lineno, f"sets {key}: {said}")


RULES = (
    Rule(
        "init-order",
        1,
        "error",
        "JAX backend used (jax.devices(), a jitted call, at import time too) before pathwaysutils.initialize()",
        "call pathwaysutils.initialize() (or pwdeploy.runtime.initialize()) first, before any use of jax devices",
        PW_INIT,
        learn=flow,
        judge=init_order,
        needs_entry=True,
    ),
    Rule(
        "distributed-initialize",
        2,
        "error",
        "jax.distributed.initialize() on the single controller",
        "remove it, or skip it on Pathways (if not pwdeploy.runtime.on_pathways(): ...), as MaxText skips it for a "
        "single controller",
        MAXTEXT_DISTRIBUTED,
        distributed_initialize,
    ),
    Rule(
        "compile-cache",
        13,
        "warning",
        "JAX persistent compilation-cache settings, which pathwaysutils.initialize() disables",
        "drop the setting on Pathways; Pathways keeps its compilation cache in the job's scratch location",
        f"{PORTING} (compilation cache); {PW_INIT}",
        compile_cache,
    ),
)
