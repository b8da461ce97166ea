"""Orbax checkpoints under Pathways persistence, whose array handler (installed by ``pathwaysutils.initialize()``
when ``ENABLE_PATHWAYS_PERSISTENCE=1``, which pwdeploy sets) refuses OCDBT (3), casting on save (4) and restore
targets that are not NamedSharding (5), read in Orbax v0's calls and v1's Context; and checkpoints that go through
the controller (15)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from pwdeploy.check.program import Module, env_writes, literal_str
from pwdeploy.check.rule import ORBAX_HANDLER, ORBAX_TYPES, Context, Hit, Known, Rule
from pwdeploy.check.rules.checkpointing_impl import PERSISTENCE as PERSISTENCE_IMPL
from pwdeploy.check.rules.checkpointing_impl import V1, selections
from pwdeploy.check.rules.given_configs import ocdbt_in_configs
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


# What a checkpointer does that writes nothing: one used only for these is not saving OCDBT.
READS = frozenset({"metadata", "item_metadata", "restore", "close"})


def reads_only(module: Module, call: ast.Call) -> bool:
    """The checkpointer ``call`` makes is used only to read: ``ocp.StandardCheckpointer().metadata(path)``, or a
    name it is bound to whose every use in its scope is a read (``ckptr.metadata(...)``, ``ckptr.restore(...)``)."""
    parent = module.parents.get(id(call))
    if isinstance(parent, ast.Attribute):
        return parent.attr in READS and _is_called(module, parent)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
        return _used_only_to_read(module, parent.targets[0].id, parent)
    if isinstance(parent, ast.withitem) and isinstance(parent.optional_vars, ast.Name):
        return _used_only_to_read(module, parent.optional_vars.id, parent)
    return False


def _is_called(module: Module, attribute: ast.Attribute) -> bool:
    call = module.parents.get(id(attribute))
    return isinstance(call, ast.Call) and call.func is attribute


def _used_only_to_read(module: Module, name: str, binding: ast.AST) -> bool:
    scope = next((p for p in module.ancestors(binding) if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    uses = [
        n
        for n in ast.walk(scope or module.tree)
        if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
    ]
    for use in uses:
        attribute = module.parents.get(id(use))
        if not (isinstance(attribute, ast.Attribute) and attribute.attr in READS and _is_called(module, attribute)):
            return False
    return bool(uses)


def ocdbt(module: Module) -> Iterator[Hit]:
    if not module.mentions("orbax"):
        return
    for call, name in module.calls():
        kind = orbax_class(name, {*OCDBT_HANDLERS, "StandardCheckpointer", "CheckpointManager"})
        if kind is None or _has_splat(call):
            continue
        if kind in ("StandardCheckpointer", "PyTreeCheckpointer") and reads_only(module, call):
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


# Orbax v1's saving entry points (orbax.checkpoint.v1 / .experimental.v1, and its training Checkpointer).
V1_SAVES = frozenset(
    {"save", "save_async", "save_pytree", "save_pytree_async", "save_checkpointables", "save_checkpointables_async"}
)


def v1_save(name: str) -> bool:
    last = name.rpartition(".")[2]
    return name.startswith(V1) and (last in V1_SAVES or name.endswith(".training.Checkpointer"))


class V1Saving(NamedTuple):
    """What ``orbax-ocdbt`` keeps of a module that saves with Orbax v1."""

    first: tuple[int, str] | None  # the first v1 save (line, code)
    ocdbt_off: bool  # sets use_ocdbt = False (``ctx.array.saving.use_ocdbt = False``, ``Saving(use_ocdbt=False)``)
    not_persistence: bool  # selects colocated Python or no dispatcher, which write OCDBT
    orbax: bool = True  # uses Orbax at all (a config file's OCDBT key then matters: ``given_configs``)


def v1_saving(module: Module) -> V1Saving:
    if not module.mentions("v1"):
        return V1Saving(None, False, False, module.mentions("orbax"))
    first = next(((c.lineno, module.code(c)) for c, n in module.calls() if v1_save(n)), None)
    assigned = any(
        isinstance(node, ast.Assign)
        and any(module.code(t).endswith(".use_ocdbt") for t in node.targets)
        and isinstance(node.value, ast.Constant)
        and node.value.value is False
        for node in module.of(ast.Assign)
    )
    passed = any(
        isinstance(value := _keyword(call, "use_ocdbt"), ast.Constant) and value.value is False
        for call, name in module.calls()
        if name.startswith(V1)
    )
    chosen = any(s.impl != PERSISTENCE_IMPL for s in selections(module))
    return V1Saving(first, assigned or passed, chosen)


def ocdbt_judge(context: Context) -> Iterable[Hit]:
    """What ``orbax-ocdbt`` decides over every module: Orbax v1 saves, and the config files the command names."""
    yield from v1_ocdbt(context)
    yield from ocdbt_in_configs(context)


def v1_ocdbt(context: Context) -> Iterable[Hit]:
    """Orbax v1 writes OCDBT by default, and on Pathways its Context picks the persistence handler unless told
    otherwise, which refuses OCDBT (MaxText's checkpoint_context.py says so, and turns to no dispatcher)."""
    known = context.of("orbax-ocdbt")
    first = next(((k.file, k.facts.first) for k in known if k.facts.first is not None), None)
    if first is None or any(k.facts.ocdbt_off or k.facts.not_persistence for k in known):
        return
    file, (line, code) = first
    yield Hit(
        file,
        line,
        f"{code} saves with Orbax v1, which writes OCDBT unless its Context says otherwise (array.saving.use_ocdbt "
        "defaults to True), through the Pathways persistence handler (the v1 Context's default on Pathways): "
        '"ValueError: OCDBT not supported for Pathways."',
        "set ctx.array.saving.use_ocdbt = False and ctx.array.saving.use_zarr3 = False in the ocp.Context the saves "
        "run in, or select colocated Python (ctx.pathways.checkpointing_impl)",
    )


def save_cast(module: Module) -> Iterator[Hit]:
    if not module.mentions("orbax"):
        return
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
    for node in module.of(ast.Assign, ast.withitem, ordered=False):
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
    if not module.mentions("orbax"):
        return
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


class Checkpointing(NamedTuple):
    """What ``controller-checkpoints`` keeps of a module."""

    first: tuple[int, str] | None  # the first Orbax checkpointer or manager made: (line, code)
    colocated: bool  # uses colocated Python (imports it, or passes use_colocated_python=)
    persistence_off: int  # the line that sets ENABLE_PATHWAYS_PERSISTENCE=0 (0: none)
    initializes: bool  # calls pathwaysutils.initialize()


def checkpointing(module: Module) -> Checkpointing:
    orbax = module.mentions("orbax")
    first = next(
        (
            (c.lineno, module.code(c))
            for c, n in module.calls()
            if orbax and (orbax_class(n, CHECKPOINTERS) or v1_save(n))
        ),
        None,
    )
    colocated = any(name.startswith("jax.experimental.colocated_python") for name in module.aliases.values()) or any(
        k.arg == "use_colocated_python" for c, _ in module.calls() for k in c.keywords
    )
    off = next(
        (n.lineno for n, key, value in env_writes(module) if key == PERSISTENCE and literal_str(value) == "0"), 0
    )
    initializes = any(name in INITIALIZE for _, name in module.calls())
    return Checkpointing(first, colocated, off, initializes)


def controller_checkpoints(context: Context) -> Iterable[Hit]:
    known = context.of("controller-checkpoints")
    first = next(((k.file, k.facts.first) for k in known if k.facts.first is not None), None)
    if first is None or any(k.facts.colocated for k in known):
        return
    file, (line, code) = first
    why = _persistence_off(context, known)
    if why:
        yield Hit(
            file,
            line,
            f"{code} checkpoints with neither Pathways persistence "
            f"nor colocated Python ({why}): every byte goes through the controller",
        )


def _persistence_off(context: Context, known: list[Known]) -> str:
    for k in known:
        if k.facts.persistence_off:
            return f"{k.file}:{k.facts.persistence_off} sets {PERSISTENCE}=0"
    if context.job is not None and context.job.headless:
        return f"a headless job's client (pwdeploy connect) is not given {PERSISTENCE}=1"
    if context.job is not None and context.main_env.get(PERSISTENCE) != "1":
        return f"the rendered main container does not set {PERSISTENCE}=1"
    if not any(k.facts.initializes for k in known):
        return "pathwaysutils.initialize(), which installs the persistence handler, is never called"
    return ""


RULES = (
    Rule(
        "orbax-ocdbt",
        3,
        "error",
        "Orbax OCDBT under Pathways persistence (v0 CheckpointManager/PyTreeCheckpointHandler, v1 Context left at "
        "defaults)",
        "ocp.PyTreeCheckpointHandler(use_ocdbt=False, use_zarr3=False) in the CheckpointManager's item_handlers",
        f"{ORBAX_HANDLER}; MaxText PR #5208",
        ocdbt,
        learn=v1_saving,
        judge=ocdbt_judge,
        needs_job=True,
    ),
    Rule(
        "orbax-save-cast",
        4,
        "error",
        "SaveArgs(dtype=...): casting while saving",
        "cast the arrays before saving (jax.tree.map(lambda a: a.astype(...), tree)) and drop SaveArgs(dtype=)",
        ORBAX_HANDLER,
        save_cast,
    ),
    Rule(
        "orbax-restore-sharding",
        5,
        "error",
        "restore without ArrayRestoreArgs/a NamedSharding target, or with SingleDeviceSharding/PositionalSharding",
        "restore into an abstract tree of jax.ShapeDtypeStruct with NamedSharding shardings "
        "(ocp.checkpoint_utils.construct_restore_args(abstract))",
        ORBAX_HANDLER,
        restore_sharding,
    ),
    Rule(
        "controller-checkpoints",
        15,
        "warning",
        "checkpointing with neither Pathways persistence nor colocated Python",
        f"call pathwaysutils.initialize() with {PERSISTENCE}=1 (pwdeploy sets it), or checkpoint through colocated "
        "Python",
        ORBAX_TYPES,
        learn=checkpointing,
        judge=controller_checkpoints,
        needs_job=True,
    ),
)
