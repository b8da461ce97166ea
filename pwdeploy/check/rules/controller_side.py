"""Checkpoints read and written on the controller: Orbax's standard ArrayHandler registered again for jax.Array
over the Pathways handler, or a Pathways handler without a dispatcher (v0 ``register_type_handlers`` or the v1
Context). The head then holds whole arrays: harmless for small arrays, fatal for large ones, and producers choose
it on purpose for small models (MaxText selects no dispatcher when colocated Python is off; google/tunix#2137 kept
the standard handler for OCDBT checkpoints), so it is a warning whose message says how large an array the head's
``main.memory`` can take this way."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from pwdeploy.check.program import Module
from pwdeploy.check.rule import ORBAX_PATHWAYS_REGISTRY, Context, Hit, Rule
from pwdeploy.check.rules.checkpointing_impl import NO_DISPATCHER, selections
from pwdeploy.check.rules.checkpoints import orbax_class
from pwdeploy.check.rules.guards import pathways_guarded
from pwdeploy.quantity import amount

STANDARD_HANDLERS = frozenset({"ArrayHandler", "SingleReplicaArrayHandler"})
# google/tunix#2137: ~690 GB of head memory restoring 64 GiB arrays, 4 layer slots x {wi_0, wi_1, wo} in flight.
ARRAYS_IN_FLIGHT = 12
GIB = 1 << 30


class ControllerSide(NamedTuple):
    line: int
    code: str
    how: str  # what the code does, for the message


def controller_side(module: Module) -> tuple[ControllerSide, ...]:
    """Where ``module`` makes the controller read and write whole arrays, outside a Pathways guard."""
    if not module.mentions("orbax"):
        return ()
    found = [
        ControllerSide(s.line, s.code, f"selects no dispatcher ({s.api})")
        for s in selections(module)
        if s.impl == NO_DISPATCHER
    ]
    for call, name in module.calls():
        if not (name.startswith("orbax.checkpoint") and name.endswith(".register_type_handler")):
            continue
        kind = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "ty"), None)
        handler = (
            call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "handler"), None)
        )
        if kind is None or handler is None or module.qualname(kind) != "jax.Array":
            continue
        standard = orbax_class(module.called(handler), STANDARD_HANDLERS)
        if standard and not pathways_guarded(module, call):
            how = f"puts Orbax's standard {standard} back for jax.Array over the Pathways handler"
            found.append(ControllerSide(call.lineno, module.code(call), how))
    return tuple(sorted(found))


def head_bound(context: Context) -> str:
    """What the job's head can take, when the job is known."""
    if context.job is None:
        return "size main.memory for it"
    memory = context.job.main.memory
    largest = amount(memory, "main.memory") / ARRAYS_IN_FLIGHT / GIB
    return (
        f"with about {ARRAYS_IN_FLIGHT} arrays in flight, main.memory {memory} takes arrays up to about "
        f"{largest:.1f} GiB each"
    )


def judge(context: Context) -> Iterable[Hit]:
    for known in context.of("orbax-array-handler"):
        for found in known.facts:
            yield Hit(
                known.file,
                found.line,
                f"{found.code} {found.how}: every checkpoint goes through the controller, which holds whole arrays "
                "in the head's memory (google/tunix#2137: about 18 GB for 5.4 GiB arrays, fine; 690 GB for 64 GiB "
                f"arrays, OOMKilled): {head_bound(context)}",
            )


RULES = (
    Rule(
        "orbax-array-handler",
        18,
        "warning",
        "checkpoints through the controller: Orbax's standard ArrayHandler registered again for jax.Array, or a "
        "Pathways handler with no dispatcher (v0 or v1 Context)",
        "for a model whose arrays outgrow the head, keep the Pathways handler pathwaysutils.initialize() registers "
        "(or select CheckpointingImpl.PERSISTENCE / COLOCATED_PYTHON); make the registration only off Pathways "
        "(if not pwdeploy.runtime.on_pathways(): ...)",
        ORBAX_PATHWAYS_REGISTRY,
        learn=controller_side,
        judge=judge,
        needs_job=True,
    ),
)
