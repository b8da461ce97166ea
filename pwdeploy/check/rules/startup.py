"""How the program starts: the backend before ``pathwaysutils.initialize()`` (1), ``jax.distributed.initialize()``
(2), and JAX compilation-cache settings that ``initialize()`` turns off (13)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator

from pwdeploy.check.program import JIT, FunctionNode, Module, Program, env_writes, literal_str, static_truth
from pwdeploy.check.rule import MAXTEXT_DISTRIBUTED, PORTING, PW_INIT, Context, Hit, Rule, per_module

INITIALIZE = frozenset({"pathwaysutils.initialize", "pwdeploy.runtime.initialize"})
# Calls that start JAX's backend (or need it started): on Pathways the first one must come after initialize().
BACKEND = frozenset(
    {f"jax.{name}" for name in ("devices", "device_count", "local_devices", "local_device_count", "device_put")}
    | {f"jax.{name}" for name in ("process_index", "process_count", "make_mesh")}
    | {"jax.experimental.mesh_utils.create_device_mesh", "jax.random.PRNGKey", "jax.random.key"}
    | {f"jax.numpy.{name}" for name in ("array", "asarray", "zeros", "ones", "arange", "full", "empty", "eye")}
)


class _Order:
    """Walks the entry module as Python runs it: top-level statements in order, into the job modules it imports
    and the functions it calls (once each), noting each backend use before the first initialize()."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.initialized = False
        self.init_at: tuple[Module, int] | None = None
        self.early: tuple[Module, ast.Call, str] | None = None
        self.entered: set[int] = set()
        # Where initialize() is called from: an unresolved call of one of these (a method) may initialise.
        self.initializers = {
            name for module in program.modules for name, at in _calls_by_function(module) if at in INITIALIZE
        }
        self.initialize_at = next(
            ((m, c.lineno) for m in program.modules for c, name in m.calls() if name in INITIALIZE), None
        )

    def module(self, module: Module) -> None:
        if id(module) in self.entered:
            return
        self.entered.add(id(module))
        jitted = module.jitted()
        for statement in module.tree.body:
            self.statement(module, statement, jitted)

    def statement(self, module: Module, node: ast.stmt, jitted: set[str]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for decorator in node.decorator_list:
                self.expression(module, decorator, jitted)
            if isinstance(node, ast.ClassDef):
                for inner in node.body:
                    self.statement(module, inner, jitted)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            self.imports(module, node)
            return
        if isinstance(node, (ast.If, ast.While)):
            verdict = static_truth(node.test)
            if verdict is not None:
                for inner in node.body if verdict else node.orelse:
                    self.statement(module, inner, jitted)
                return
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                self.statement(module, child, jitted)
            elif isinstance(child, ast.ExceptHandler):
                for inner in child.body:
                    self.statement(module, inner, jitted)
            else:
                self.expression(module, child, jitted)

    def imports(self, module: Module, node: ast.Import | ast.ImportFrom) -> None:
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [module.absolute(node)]
        for name in names:
            found = self.program.by_name.get(name)
            if found is not None:
                self.module(found)

    def expression(self, module: Module, node: ast.AST, jitted: set[str]) -> None:
        calls = [n for n in _evaluated(node) if isinstance(n, ast.Call)]
        for call in sorted(calls, key=lambda c: (c.lineno, c.col_offset)):
            self.call(module, call, jitted)

    def call(self, module: Module, call: ast.Call, jitted: set[str]) -> None:
        name = module.called(call) or ""
        if name in INITIALIZE:
            if not self.initialized:
                self.initialized, self.init_at = True, (module, call.lineno)
            return
        uses = name in BACKEND or _calls_jitted(module, call, jitted)
        if uses and not self.initialized and self.early is None:
            self.early = (module, call, name)
        target = self._function(module, call, name)
        if target is None and _called_name(call) in self.initializers:
            self.initialized = True  # a method of the job's that calls initialize(): assume it did
        if target is not None and id(target[1]) not in self.entered:
            self.entered.add(id(target[1]))
            owner, function = target
            inner = owner.jitted() | owner.jitted(function)
            for statement in function.body:
                self.statement(owner, statement, inner)

    def _function(self, module: Module, call: ast.Call, name: str) -> tuple[Module, FunctionNode] | None:
        """The job's own function a call runs: one of this module's, or one imported from a job module."""
        if isinstance(call.func, ast.Name) and call.func.id not in module.aliases:
            found = module.functions.get(call.func.id)
            return (module, found) if found is not None else None
        owner_name, _, attr = name.rpartition(".")
        owner = self.program.by_name.get(owner_name)
        if owner is not None and attr in owner.functions:
            return owner, owner.functions[attr]
        return None


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
    entry = context.program.entry
    if entry is None:
        return
    order = _Order(context.program)
    order.module(entry)
    if order.early is None:
        return
    module, call, _ = order.early
    code = module.code(call)
    init_at = order.init_at or order.initialize_at
    if init_at is not None:
        where, line = init_at
        at = f"line {line}" if where is module else f"{where.shown}:{line}"
        yield Hit(
            module.shown,
            call.lineno,
            f"{code} runs before pathwaysutils.initialize() ({at}): on Pathways "
            "the proxy backend is not registered yet: \"Unable to initialize backend 'proxy'\"",
        )
    else:
        yield Hit(
            module.shown,
            call.lineno,
            f"{code} uses the JAX backend and the program never calls "
            "pathwaysutils.initialize(): on Pathways \"Unable to initialize backend 'proxy'\"",
        )


def _guarded(module: Module, node: ast.AST) -> bool:
    """Under an ``if`` that asks whether this is Pathways (or a single controller)."""
    for parent in module.ancestors(node):
        if isinstance(parent, ast.If):
            test = module.code(parent.test).lower()
            if any(word in test for word in ("pathways", "jax_platforms", "single_controller", "proxy")):
                return True
    return False


def distributed_initialize(module: Module) -> Iterator[Hit]:
    for call, name in module.calls():
        if name == "jax.distributed.initialize" and not _guarded(module, call):
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
        init_order,
    ),
    Rule(
        "distributed-initialize",
        2,
        "error",
        "jax.distributed.initialize() on the single controller",
        "remove it, or skip it on Pathways (if not pwdeploy.runtime.on_pathways(): ...), as MaxText skips it for a "
        "single controller",
        MAXTEXT_DISTRIBUTED,
        per_module(distributed_initialize),
    ),
    Rule(
        "compile-cache",
        13,
        "warning",
        "JAX persistent compilation-cache settings, which pathwaysutils.initialize() disables",
        "drop the setting on Pathways; Pathways keeps its compilation cache in the job's scratch location",
        f"{PORTING} (compilation cache); {PW_INIT}",
        per_module(compile_cache),
    ),
)
