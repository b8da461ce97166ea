"""How a program checkpoints on Pathways, and whether the job can run it: the Pathways array handler it selects
(Orbax v0 ``pathways.register_type_handlers``, Orbax v1 ``Context.pathways.checkpointing_impl``), multi-tier
checkpointing (MTC), and checkpoints read and written by the controller.

Facts (orbax-checkpoint 0.12.8): ``register_pathways_handlers(checkpointing_impl=None)`` takes
``CheckpointingImpl.from_options(use_colocated_python=True, use_persistence_array_handler=True)``, i.e. colocated
Python (``_src/serialization/pathways_handler_registry.py``); ``from_options`` picks colocated Python, else
persistence, else no dispatcher, "very ill-advised ... checkpointing from the controller"
(``_src/serialization/pathways_types.py``); the v1 Context's ``pathways.checkpointing_impl`` selects the same
(``experimental/v1/_src/serialization/registration.py``: unset, persistence). Colocated Python runs in the workers'
sidecar. MTC: ``initialize_multi_tier_checkpointing(use_colocated_python=False)`` (the default) takes the
multi-controller path, ``jax.distributed.initialize`` and a ``jax-init-info.txt`` the MTC driver writes for
multi-controller jobs only; ``ReplicatorCheckpointManagerOptions(use_colocated_python=False)`` (the default) needs
the distributed ids that path sets (``multi_tier_checkpointing/initialization.py``,
``replicator_checkpoint_manager.py``); both intervals given, or one not above 0, raise ``ValueError``. A controller-
side handler (the standard ArrayHandler, or no dispatcher) reads and writes whole arrays on the head: google/tunix
#2137 measured about 18 GB of head memory for 5.4 GiB arrays (fine) and 690 GB for 64 GiB arrays (OOMKilled), about
12 arrays in flight; MaxText selects it on purpose when colocated Python is off (``checkpoint_context.py``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from pwdeploy.check.program import Module
from pwdeploy.check.rule import Context, Hit, Rule
from pwdeploy.check.rules.guards import pathways_guarded

COLOCATED, PERSISTENCE, NO_DISPATCHER = "COLOCATED_PYTHON", "PERSISTENCE", "NO_DISPATCHER"
REGISTER = ("orbax.checkpoint.pathways.register_type_handlers", ".pathways_handler_registry.register_pathways_handlers")
V1 = ("orbax.checkpoint.v1.", "orbax.checkpoint.experimental.v1.")
MTC_INIT = "initialize_multi_tier_checkpointing"
MTC_OPTIONS = "ReplicatorCheckpointManagerOptions"
ORBAX_IMPL = (
    "google/orbax: checkpoint/orbax/checkpoint/_src/serialization/pathways_handler_registry.py "
    "(register_pathways_handlers), pathways_types.py (CheckpointingImpl.from_options)"
)
ORBAX_MTC = (
    "google/orbax: checkpoint/orbax/checkpoint/experimental/emergency/multi_tier_checkpointing/initialization.py"
)


class Selection(NamedTuple):
    """Where a program chooses how Pathways checkpoints (a literal choice only)."""

    line: int
    code: str
    impl: str  # COLOCATED, PERSISTENCE or NO_DISPATCHER
    api: str  # how the program said it
    conditional: bool = False  # under an ``if``: it may not run (MaxText chooses by its config)


def conditional(module: Module, node: ast.AST) -> bool:
    """Under an ``if`` (or a conditional expression) of its module: a program that decides at run time, as MaxText
    decides on ``enable_multi_tier_checkpointing``, may never run it."""
    return any(isinstance(parent, (ast.If, ast.IfExp)) for parent in module.ancestors(node))


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _true(node: ast.expr | None) -> bool | None:
    """A literal True/False (None: absent, or not a literal)."""
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, bool) else None


def impl_of(module: Module, node: ast.expr) -> str | None:
    """The CheckpointingImpl ``node`` names when it says so literally: a member, or ``from_options(...)``."""
    name = module.qualname(node) or ""
    for impl in (COLOCATED, PERSISTENCE, NO_DISPATCHER):
        if name.endswith(f"CheckpointingImpl.{impl}"):
            return impl
    if isinstance(node, ast.Call) and (module.called(node) or "").endswith("CheckpointingImpl.from_options"):
        flags = [_keyword(node, "use_colocated_python"), _keyword(node, "use_persistence_array_handler")]
        values = [_true(flag) for flag in flags]
        if any(flag is not None and value is None for flag, value in zip(flags, values, strict=True)):
            return None  # decided at run time
        return COLOCATED if values[0] else PERSISTENCE if values[1] else NO_DISPATCHER
    return None


def selections(module: Module) -> tuple[Selection, ...]:
    """Every literal choice of the Pathways array handler in ``module``, in source order."""
    if not module.mentions("orbax"):
        return ()
    found: list[Selection] = []
    for call, name in module.calls():
        if name.startswith("orbax.checkpoint") and name.endswith(REGISTER):
            given = _keyword(call, "checkpointing_impl") or (call.args[1] if len(call.args) > 1 else None)
            impl = COLOCATED if given is None else impl_of(module, given)  # Orbax's default: colocated first
            if impl is not None:
                api = "Orbax v0 register_type_handlers"
                found.append(Selection(call.lineno, module.code(call), impl, api, conditional(module, call)))
        elif name.startswith(V1) and name.endswith(".PathwaysOptions"):
            given = _keyword(call, "checkpointing_impl")
            if given is not None and (impl := impl_of(module, given)) is not None:
                api = "Orbax v1 PathwaysOptions"
                found.append(Selection(call.lineno, module.code(call), impl, api, conditional(module, call)))
    for node in module.of(ast.Assign):
        assert isinstance(node, ast.Assign)
        targets = [module.code(t) for t in node.targets]
        if any(t.endswith(".pathways.checkpointing_impl") for t in targets):
            impl = impl_of(module, node.value)
            if impl is not None:
                found.append(
                    Selection(node.lineno, module.code(node), impl, "Orbax v1 Context", conditional(module, node))
                )
    return tuple(sorted(found))


class MtcUse(NamedTuple):
    """A call that sets up multi-tier checkpointing."""

    line: int
    code: str
    what: str  # MTC_INIT or MTC_OPTIONS
    colocated: bool | None  # use_colocated_python as written: absent is False (Orbax's default); None: not literal
    guarded: bool  # under an ``if`` that asks about Pathways
    conditional: bool  # under any ``if``, or its arguments in a ``**`` mapping: it may not run as written


def mtc_uses(module: Module) -> tuple[MtcUse, ...]:
    if not module.mentions(MTC_INIT, MTC_OPTIONS):
        return ()
    found = []
    for call, name in module.calls():
        what = name.rpartition(".")[2]
        if name.startswith("orbax.checkpoint") and what in (MTC_INIT, MTC_OPTIONS):
            flag = _keyword(call, "use_colocated_python")
            splat = any(k.arg is None for k in call.keywords)  # **options may hold it: not known here
            colocated = None if flag is None and splat else False if flag is None else _true(flag)
            guarded, maybe = pathways_guarded(module, call), conditional(module, call) or splat
            found.append(MtcUse(call.lineno, module.code(call), what, colocated, guarded, maybe))
    return tuple(found)


# ------------------------------------------------------------------------------------------ the judges


def colocated_without_sidecar(context: Context) -> Iterable[Hit]:
    job = context.job
    if job is None or job.sidecar.enabled:
        return
    for known in context.of("colocated-no-sidecar"):
        chosen, uses = known.facts
        for selection in chosen:
            if selection.impl == COLOCATED and not selection.conditional:
                yield Hit(
                    known.file,
                    selection.line,
                    f"{selection.code} selects colocated-Python checkpointing ({selection.api}), which runs in the "
                    "workers' colocated-Python sidecar, but the job has none (sidecar.enabled is false): every save "
                    "and restore fails",
                )
        for use in uses:
            if use.colocated and not use.conditional:
                yield Hit(
                    known.file,
                    use.line,
                    f"{use.code}: Pathways multi-tier checkpointing runs its setup and its saves in colocated-Python "
                    "functions, in the workers' sidecar, but the job has none (sidecar.enabled is false)",
                )


def mtc_without_volume(context: Context) -> Iterable[Hit]:
    job = context.job
    if job is None or job.mtc.enabled:
        return
    first = next(((k.file, use) for k in context.of("mtc-no-volume") for use in k.facts if not use.conditional), None)
    if first is not None:
        file, use = first
        yield Hit(
            file,
            use.line,
            f"{use.code} sets up multi-tier checkpointing, but the job has no MTC volume (mtc.enabled is false): no "
            "MTC driver reads the replicator.yaml Orbax writes, and Orbax gives up after 600 s (TimeoutError)",
        )


def mtc_colocated_off(module: Module) -> Iterator[Hit]:
    for use in mtc_uses(module):
        if use.colocated is False and not use.guarded:
            said = "" if "use_colocated_python" in use.code else " (use_colocated_python defaults to False)"
            path = (
                "calls jax.distributed.initialize and waits for the jax-init-info.txt the MTC driver writes only for "
                "multi-controller jobs"
                if use.what == MTC_INIT
                else "saves through the multi-controller engine, which needs the distributed ids only "
                "jax.distributed sets up"
            )
            yield Hit(
                module.shown,
                use.line,
                f"{use.code} takes Orbax's multi-controller MTC path{said}: on Pathways, one controller, it {path}",
            )


def backup_intervals(module: Module) -> Iterator[Hit]:
    if not module.mentions(MTC_INIT):
        return
    for call, name in module.calls():
        if not (name.startswith("orbax.checkpoint") and name.endswith(MTC_INIT)):
            continue
        given = {k.arg: k.value for k in call.keywords if k.arg in ("backup_interval_minutes", "backup_interval_steps")}
        set_ = {k: v for k, v in given.items() if not (isinstance(v, ast.Constant) and v.value is None)}
        if len(set_) == 2:
            yield Hit(
                module.shown,
                call.lineno,
                f'{module.code(call)} gives both backup intervals: Orbax raises "Exactly one of '
                'backup_interval_minutes or backup_interval_steps must be specified."',
            )
        for key, value in set_.items():
            if isinstance(value, ast.Constant) and isinstance(value.value, int) and value.value <= 0:
                yield Hit(module.shown, call.lineno, f'{module.code(call)}: Orbax raises "{key} must be > 0."')


RULES = (
    Rule(
        "colocated-no-sidecar",
        20,
        "error",
        "colocated-Python checkpointing selected (Orbax v0 register_type_handlers(), v1 Context, MTC) in a job "
        "without the sidecar",
        "set sidecar.image (or sidecar.repository and `pwdeploy sidecar build --push`), or select the persistence "
        "handler: checkpointing_impl=CheckpointingImpl.PERSISTENCE",
        ORBAX_IMPL,
        learn=lambda module: (selections(module), mtc_uses(module)),
        judge=colocated_without_sidecar,
        needs_job=True,
    ),
    Rule(
        "mtc-no-volume",
        21,
        "error",
        "multi-tier checkpointing set up in a job without mtc.enabled (no MTC driver volume)",
        "set mtc.enabled: true (--mtc), with the cluster set up for it (docs/checkpoints.md)",
        ORBAX_MTC,
        learn=mtc_uses,
        judge=mtc_without_volume,
        needs_job=True,
    ),
    Rule(
        "mtc-colocated-off",
        22,
        "error",
        "initialize_multi_tier_checkpointing / ReplicatorCheckpointManagerOptions without use_colocated_python=True",
        "pass use_colocated_python=True (Pathways' MTC path, as MaxText does on a single controller)",
        ORBAX_MTC,
        mtc_colocated_off,
    ),
    Rule(
        "mtc-backup-interval",
        23,
        "error",
        "initialize_multi_tier_checkpointing with both backup intervals, or one not above 0",
        "give one: backup_interval_minutes or backup_interval_steps (pwdeploy.runtime.mtc_options() passes the job's)",
        ORBAX_MTC,
        backup_intervals,
    ),
)
