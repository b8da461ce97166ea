"""Code written for one process per host, which Pathways runs as one process that sees every device: data sharded
by process (10), ``local_devices()`` taken as this host's (11), the node's CPU count (12), ``process_index() == 0``
guards (17)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from pwdeploy.check.program import Module
from pwdeploy.check.rule import GRAIN_LOADER, PORTING, Hit, Rule

INDEX, COUNT = "jax.process_index", "jax.process_count"


def _calls_of(module: Module, node: ast.AST, *names: str) -> bool:
    return any(module.called(n) in names for n in ast.walk(node))


def _arguments(call: ast.Call) -> list[ast.expr]:
    return [*call.args, *(k.value for k in call.keywords)]


SHARD_KEYWORDS = frozenset(
    {"shard_index", "shard_count", "num_shards", "shard_id", "index", "rank", "world_size", "num_replicas"}
)


def _shards_by_process(module: Module, node: ast.Call, name: str) -> bool:
    """``x.shard(...)`` or a sharding keyword (``shard_index=``, ``rank=``, ...) given a process index or count;
    Grain's ``ShardByJaxProcess``. ``print(jax.process_index())`` is not sharding."""
    if name.startswith("grain") and name.endswith(".ShardByJaxProcess"):
        return True
    if isinstance(node.func, ast.Attribute) and node.func.attr == "shard":
        return _calls_of(module, ast.Tuple(elts=_arguments(node)), INDEX, COUNT)
    return any(k.arg in SHARD_KEYWORDS and _calls_of(module, k.value, INDEX, COUNT) for k in node.keywords)


def _derived(module: Module) -> dict[str, frozenset[str]]:
    """Names assigned from the process index or count (``start = jax.process_index() * per_host``), with which of
    the two each carries; names assigned from such names carry theirs (in source order, as Python binds them)."""
    carried: dict[str, frozenset[str]] = {}
    for node in module.of(ast.Assign, ast.AnnAssign, ast.AugAssign):
        value = getattr(node, "value", None)
        if value is None:
            continue
        found = _carries(module, value, carried)
        if not found:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for target in targets:
            for name in ast.walk(target) if target is not None else ():
                if isinstance(name, ast.Name):
                    carried[name.id] = carried.get(name.id, frozenset()) | found
    return carried


def _carries(module: Module, node: ast.AST, carried: dict[str, frozenset[str]]) -> frozenset[str]:
    """Which of the process index and count an expression is computed from."""
    found: set[str] = set()
    for inner in ast.walk(node):
        if isinstance(inner, ast.Call) and (name := module.called(inner)) in (INDEX, COUNT):
            found.add(name)
        elif isinstance(inner, ast.Name) and inner.id in carried:
            found |= carried[inner.id]
    return frozenset(found)


GATHER = frozenset({"jax.experimental.multihost_utils.process_allgather"})


Scoped = tuple[int, str]  # (the id of the function a name lives in, or 0 for the module; the name)


def _gathered(module: Module) -> set[Scoped]:
    """Names that hold what every process gathered (``process_allgather``), directly or through names computed from
    such names, a store into them (``found[key] = process_allgather(x)``) or a loop over them, each in its function:
    splitting gathered output per process is not loading input by process. Two passes, as comprehensions carry no
    line."""
    found: set[Scoped] = set()
    nodes = list(module.of(ast.Assign, ast.AnnAssign, ast.For, ast.comprehension, ordered=False))
    for _ in range(2):
        for node in nodes:
            value = node.iter if isinstance(node, (ast.For, ast.comprehension)) else getattr(node, "value", None)
            scope = _scope(module, node)
            if value is None or not _mentions_gathered(module, value, found, scope):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]  # type: ignore[attr-defined]
            for target in targets:
                base = target.value if isinstance(target, ast.Subscript) else target
                found.update((scope, n.id) for n in ast.walk(base) if isinstance(n, ast.Name))
    return found


def _scope(module: Module, node: ast.AST) -> int:
    function = (p for p in module.ancestors(node) if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))
    return id(next(function, module.tree))


def _mentions_gathered(module: Module, node: ast.AST, found: set[Scoped], scope: int) -> bool:
    return any(
        (isinstance(n, ast.Name) and (scope, n.id) in found) or (isinstance(n, ast.Call) and module.called(n) in GATHER)
        for n in ast.walk(node)
    )


def process_sharding(module: Module) -> Iterator[Hit]:
    said = "on Pathways there is one process (process_index() is 0, process_count() is 1), so the one CPU host loads "
    said += "the whole global batch"
    if not module.mentions("process_", "ShardByJaxProcess"):
        return
    asks = any(name in (INDEX, COUNT) for _, name in module.calls())
    carried = _derived(module) if asks else {}
    gathered = _gathered(module) if asks and module.mentions("process_allgather") else set()
    for node in module.of(ast.Call, ast.Subscript, ordered=False):
        if isinstance(node, ast.Call) and _shards_by_process(module, node, module.called(node) or ""):
            yield Hit(module.shown, node.lineno, f"{module.code(node)} shards the data by JAX process: {said}")
        elif (
            asks
            and isinstance(node, ast.Subscript)
            and _sliced_by_process(module, node, carried)
            and not _mentions_gathered(module, node.value, gathered, _scope(module, node))
        ):
            yield Hit(module.shown, node.lineno, f"{module.code(node)} slices the data by JAX process: {said}")


def _sliced_by_process(module: Module, node: ast.Subscript, carried: dict[str, frozenset[str]]) -> bool:
    """``rows[jax.process_index() :: jax.process_count()]``, ``rows[start : start + per_host]`` with bounds computed
    from both, or ``np.array_split(rows, jax.process_count())[jax.process_index()]``."""
    if not isinstance(node.ctx, ast.Load):
        return False  # a store into a table indexed by process is not data loaded
    if isinstance(node.slice, ast.Slice):
        return _carries(module, node.slice, carried) == {INDEX, COUNT}
    split = node.value  # only a split into process_count() parts, indexed by the process: not any table
    return (
        isinstance(split, ast.Call)
        and COUNT in _carries(module, ast.Tuple(elts=_arguments(split)), carried)
        and INDEX in _carries(module, node.slice, carried)
    )


def _is_count(module: Module, node: ast.AST, call: str, listing: str) -> bool:
    """``jax.<call>()`` or ``len(jax.<listing>())``."""
    if module.called(node) == call:
        return True
    if not (isinstance(node, ast.Call) and module.is_builtin_call(node, "len") and node.args):
        return False
    return module.called(node.args[0]) == listing


def local_devices(module: Module) -> Iterator[Hit]:
    if not module.mentions("local_device"):
        return
    for node in module.of(ast.BinOp, ast.ListComp, ast.GeneratorExp, ast.For, ordered=False):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.FloorDiv)):
            sides = (node.left, node.right)
            local = any(_is_count(module, s, "jax.local_device_count", "jax.local_devices") for s in sides)
            every = any(_is_count(module, s, "jax.device_count", "jax.devices") for s in sides)
            if local and every:
                yield Hit(
                    module.shown,
                    node.lineno,
                    f"{module.code(node)} takes jax.local_devices() as this host's "
                    "devices: on Pathways they are every device of every slice, so this is 1 host",
                )
        elif isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.For)):
            iters = [g.iter for g in node.generators] if not isinstance(node, ast.For) else [node.iter]
            local_iter = next((i for i in iters if _over_local_devices(module, i)), None)
            if local_iter is not None and _calls_of(module, node, "jax.device_put"):
                yield Hit(
                    module.shown,
                    node.lineno,
                    f"a loop over {module.code(local_iter)} calls jax.device_put for "
                    "each device from this process: on Pathways that is every device of the job, from one host",
                )


WRAPPERS = ("enumerate", "zip", "list", "tuple", "sorted", "reversed")


def _over_local_devices(module: Module, node: ast.AST) -> bool:
    """``jax.local_devices()``, also inside ``enumerate(...)``, ``zip(...)``, ``list(...)``, ``sorted(...)``."""
    if module.called(node) == "jax.local_devices":
        return True
    return (
        isinstance(node, ast.Call)
        and module.is_builtin_call(node, *WRAPPERS)
        and any(_over_local_devices(module, arg) for arg in node.args)
    )


CPU_COUNT = frozenset({"os.cpu_count", "multiprocessing.cpu_count"})


def cpu_count(module: Module) -> Iterator[Hit]:
    for call, name in module.calls():
        if name in CPU_COUNT:
            yield Hit(
                module.shown,
                call.lineno,
                f"{module.code(call)} is the node's vCPU count, not the container's CPU limit: "
                "one worker per node CPU oversubscribes the container",
            )
            continue
        keyword = {"DataLoader": "worker_count", "pick_performance_config": "max_workers"}.get(name.rpartition(".")[2])
        if name.startswith("grain") and keyword:
            value = next((k.value for k in call.keywords if k.arg == keyword), None)
            if isinstance(value, ast.Constant) and value.value is None:
                yield Hit(
                    module.shown,
                    call.lineno,
                    f"{module.code(call)}: {keyword}=None makes Grain start os.cpu_count() workers, the node's vCPUs",
                )


def _process_index_test(module: Module, node: ast.AST) -> ast.AST | None:
    """The ``process_index() == 0`` part of a test, also as one operand of ``and``/``or``."""
    if _process_index_zero(module, node):
        return node
    if isinstance(node, ast.BoolOp):
        return next((found for v in node.values if (found := _process_index_test(module, v)) is not None), None)
    return None


def _process_index_zero(module: Module, node: ast.AST) -> bool:
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
        sides = (node.left, node.comparators[0])
        zero = any(isinstance(s, ast.Constant) and s.value == 0 and s.value is not False for s in sides)
        return zero and any(module.called(s) == INDEX for s in sides)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return module.called(node.operand) == INDEX
    return False


def process_index_guard(module: Module) -> Iterator[Hit]:
    for node in module.of(ast.If, ast.IfExp, ast.While, ordered=False):
        if not isinstance(node, (ast.If, ast.IfExp, ast.While)):
            continue
        test = _process_index_test(module, node.test)
        if test is None:
            continue
        always = "false" if isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.NotEq) else "true"
        part = "" if test is node.test else f" (in {module.code(node.test)})"
        yield Hit(
            module.shown,
            node.lineno,
            f"{module.code(test)}{part} is always {always} on Pathways (one process): the guard does not pick one "
            "host, and code meant for the other processes never runs",
        )


RULES = (
    Rule(
        "process-sharding",
        10,
        "warning",
        "data sharded by jax.process_index()/process_count() (ds.shard(...), Grain ShardByJaxProcess, slices by hand)",
        "load each batch next to the accelerators with colocated Python (pwdeploy sidecar), or load the global "
        "batch once and shard it with jax.device_put(batch, NamedSharding(mesh, P('data')))",
        f"{PORTING} (data loading)",
        process_sharding,
    ),
    Rule(
        "local-devices",
        11,
        "warning",
        "jax.local_devices()/local_device_count() used as this host's devices (arithmetic, a device_put per device)",
        "use the mesh's devices (mesh.devices, jax.devices()) and the global batch; there is one host on Pathways",
        f"{PORTING} (process index)",
        local_devices,
    ),
    Rule(
        "cpu-count",
        12,
        "warning",
        "os.cpu_count()/multiprocessing.cpu_count()/Grain worker_count=None: the node's vCPUs",
        "use pwdeploy.runtime.data_workers() (the container's CPU limit; PWDEPLOY_DATA_WORKERS)",
        f"{PORTING}; {GRAIN_LOADER}",
        cpu_count,
    ),
    Rule(
        "process-index-guard",
        17,
        "info",
        "jax.process_index() == 0 guards (alone or in and/or): always true",
        "drop the guard on Pathways (one process does everything), or keep it if the code also runs multi-controller",
        f"{PORTING} (process index)",
        process_index_guard,
    ),
)
