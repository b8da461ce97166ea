"""Orbax checkpoints under Pathways persistence, whose array handler (installed by ``pathwaysutils.initialize()``
when ``ENABLE_PATHWAYS_PERSISTENCE=1``, which pwdeploy sets) refuses OCDBT (3), casting on save (4) and restore
targets that are not NamedSharding (5); and checkpoints that go through the controller (15)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator

from pwdeploy.check.program import Module, env_writes, literal_str
from pwdeploy.check.rule import ORBAX_HANDLER, ORBAX_TYPES, Context, Hit, Rule, per_module
from pwdeploy.check.rules.startup import INITIALIZE

OCDBT_HANDLERS = frozenset({"PyTreeCheckpointHandler", "StandardCheckpointHandler", "PyTreeCheckpointer"})
CHECKPOINTERS = frozenset(
    {"CheckpointManager", "Checkpointer", "AsyncCheckpointer", "PyTreeCheckpointer", "StandardCheckpointer"}
)
NOT_NAMED = frozenset({"jax.sharding.SingleDeviceSharding", "jax.sharding.PositionalSharding"})
RESTORE_TARGETS = frozenset({"args", "item", "items", "restore_args", "restore_kwargs", "target"})
PERSISTENCE = "ENABLE_PATHWAYS_PERSISTENCE"


def orbax_class(name: str | None, classes: Iterable[str]) -> str | None:
    """The class name when ``name`` is one of orbax.checkpoint's ``classes`` (under any of its modules)."""
    if not name or not name.startswith("orbax.checkpoint"):
        return None
    last = name.rpartition(".")[2]
    return last if last in classes else None


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _has_splat(call: ast.Call) -> bool:
    return any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args)


def ocdbt(module: Module) -> Iterator[Hit]:
    for call, name in module.calls():
        kind = orbax_class(name, {*OCDBT_HANDLERS, "StandardCheckpointer", "CheckpointManager"})
        if kind is None or _has_splat(call):
            continue
        code = module.code(call)
        if kind == "CheckpointManager":
            handlers = ("item_handlers", "handler_registry", "checkpointers")
            if all(_keyword(call, name) is None for name in handlers) and len(call.args) < 2:
                yield Hit(
                    module.shown,
                    call.lineno,
                    f"{code} saves with Orbax's default handlers, which write OCDBT: "
                    'under Pathways persistence "ValueError: OCDBT not supported for Pathways."',
                    "pass item_handlers={...: ocp.PyTreeCheckpointHandler(use_ocdbt=False, use_zarr3=False)}",
                )
        elif kind == "StandardCheckpointer":
            yield Hit(
                module.shown,
                call.lineno,
                f"{code} writes OCDBT and has no option to stop: under Pathways "
                'persistence "ValueError: OCDBT not supported for Pathways."',
                "use ocp.PyTreeCheckpointer(use_ocdbt=False) or a CheckpointManager with "
                "ocp.PyTreeCheckpointHandler(use_ocdbt=False, use_zarr3=False)",
            )
        else:
            value = _keyword(call, "use_ocdbt")
            if value is None or (isinstance(value, ast.Constant) and value.value is True):
                yield Hit(
                    module.shown,
                    call.lineno,
                    f"{code} writes OCDBT (use_ocdbt defaults to True): under "
                    'Pathways persistence "ValueError: OCDBT not supported for Pathways."',
                )


def save_cast(module: Module) -> Iterator[Hit]:
    for call, name in module.calls():
        if orbax_class(name, {"SaveArgs"}):
            dtype = _keyword(call, "dtype")
            if dtype is not None and not (isinstance(dtype, ast.Constant) and dtype.value is None):
                yield Hit(
                    module.shown,
                    call.lineno,
                    f"{module.code(call)} casts while saving: the Pathways "
                    'persistence handler refuses it: "Casting during save not supported for Pathways."',
                )


def _checkpointer_names(module: Module) -> set[str]:
    """The code of every name or attribute an orbax checkpointer or manager is assigned to."""
    names: set[str] = set()
    for node in module.of(ast.Assign, ast.withitem):
        if isinstance(node, ast.Assign) and orbax_class(module.called(node.value), CHECKPOINTERS):
            names.update(module.code(t) for t in node.targets)
        elif (
            isinstance(node, ast.withitem)
            and node.optional_vars is not None
            and orbax_class(module.called(node.context_expr), CHECKPOINTERS)
        ):
            names.add(module.code(node.optional_vars))
    return names


def restore_sharding(module: Module) -> Iterator[Hit]:
    said = "the Pathways persistence handler restores only into NamedSharding targets given by ArrayRestoreArgs"
    for call, name in module.calls():
        kind = orbax_class(name, {"ArrayRestoreArgs", "PyTreeRestore", "StandardRestore"})
        if kind == "ArrayRestoreArgs":
            sharding = _keyword(call, "sharding")
            if sharding is not None and module.called(sharding) in NOT_NAMED:
                yield Hit(
                    module.shown,
                    call.lineno,
                    f'{module.code(call)}: {said}: "Pathways only supports jax.sharding.NamedSharding."',
                )
        elif kind and not call.args and not _has_splat(call) and not (RESTORE_TARGETS & {k.arg for k in call.keywords}):
            yield Hit(
                module.shown,
                call.lineno,
                f"{module.code(call)} restores without a target: {said}: "
                '"Must provide ArrayRestoreArgs to restore as jax.Array."',
            )
    receivers = _checkpointer_names(module)
    for node in module.of(ast.Call):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "restore"
            and module.code(node.func.value) in receivers
            and len(node.args) <= 1
            and not _has_splat(node)
            and not (RESTORE_TARGETS & {k.arg for k in node.keywords})
        ):
            yield Hit(
                module.shown,
                node.lineno,
                f"{module.code(node)} restores without a target: {said}: "
                '"Must provide ArrayRestoreArgs to restore as jax.Array."',
            )


def _uses_colocated_python(modules: list[Module]) -> bool:
    return any(
        name.startswith("jax.experimental.colocated_python") for m in modules for name in m.aliases.values()
    ) or any(k.arg == "use_colocated_python" for m in modules for c, _ in m.calls() for k in c.keywords)


def controller_checkpoints(context: Context) -> Iterable[Hit]:
    first = next(((m, c) for m in context.modules for c, n in m.calls() if orbax_class(n, CHECKPOINTERS)), None)
    if first is None or _uses_colocated_python(context.modules):
        return
    module, call = first
    why = _persistence_off(context)
    if why:
        yield Hit(
            module.shown,
            call.lineno,
            f"{module.code(call)} checkpoints with neither Pathways persistence "
            f"nor colocated Python ({why}): every byte goes through the controller",
        )


def _persistence_off(context: Context) -> str:
    for module in context.modules:
        for node, key, value in env_writes(module):
            if key == PERSISTENCE and literal_str(value) == "0":
                return f"{module.shown}:{node.lineno} sets {PERSISTENCE}=0"
    if context.job is not None and context.job.headless:
        return f"a headless job's client (pwdeploy connect) is not given {PERSISTENCE}=1"
    if context.job is not None and context.main_env.get(PERSISTENCE) != "1":
        return f"the rendered main container does not set {PERSISTENCE}=1"
    if not any(name in INITIALIZE for m in context.modules for _, name in m.calls()):
        return "pathwaysutils.initialize(), which installs the persistence handler, is never called"
    return ""


RULES = (
    Rule(
        "orbax-ocdbt",
        3,
        "error",
        "Orbax OCDBT under Pathways persistence (CheckpointManager/PyTreeCheckpointHandler left at defaults)",
        "ocp.PyTreeCheckpointHandler(use_ocdbt=False, use_zarr3=False) in the CheckpointManager's item_handlers",
        f"{ORBAX_HANDLER}; MaxText PR #5208",
        per_module(ocdbt),
    ),
    Rule(
        "orbax-save-cast",
        4,
        "error",
        "SaveArgs(dtype=...): casting while saving",
        "cast the arrays before saving (jax.tree.map(lambda a: a.astype(...), tree)) and drop SaveArgs(dtype=)",
        ORBAX_HANDLER,
        per_module(save_cast),
    ),
    Rule(
        "orbax-restore-sharding",
        5,
        "error",
        "restore without ArrayRestoreArgs/a NamedSharding target, or with SingleDeviceSharding/PositionalSharding",
        "restore into an abstract tree of jax.ShapeDtypeStruct with NamedSharding shardings "
        "(ocp.checkpoint_utils.construct_restore_args(abstract))",
        ORBAX_HANDLER,
        per_module(restore_sharding),
    ),
    Rule(
        "controller-checkpoints",
        15,
        "warning",
        "checkpointing with neither Pathways persistence nor colocated Python",
        f"call pathwaysutils.initialize() with {PERSISTENCE}=1 (pwdeploy sets it), or checkpoint through colocated "
        "Python",
        ORBAX_TYPES,
        controller_checkpoints,
        needs_job=True,
    ),
)
