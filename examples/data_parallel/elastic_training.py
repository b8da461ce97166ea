"""The example's training loop when the job is elastic (``tpu.elastic_slices`` > 0): a lost slice does not end it.

The loop runs inside pathwaysutils' ``Manager.elastic_retry``. When a slice is lost, reading an array that lives on
it raises a ``JaxRuntimeError`` the manager recognises as a slice down (``is_error_due_to_slice_down``); the
manager waits until at least ``tpu.slices - tpu.elastic_slices`` slices answer its health check and calls the loop
again, which rebuilds its mesh over the slices active now and goes on from the state kept below. When a lost slice
is back (the manager's monitor finds it healthy: ``available_inactive_slices``), the loop keeps its state and
raises ``ScaleUpSignalError``, and the next attempt runs on every slice again.

What is kept, and where: the parameters, the step and the data loader's position, copied to host memory every
``--elastic-keep-every`` steps (and before a scale-up). That copy is also what tells a lost slice: it is the one
place the loop reads device values, so a loss shows there, and the steps after the last copy are re-done. The
arrays of the failed attempt are let go: they may live on the lost slice.

The global batch is kept (every step trains on ``--batch`` examples, whatever the slice count), so training does
not depend on which slices were active: the loss trajectory equals an uninterrupted run's. The per-device batch
grows on fewer slices; a job whose per-device batch already fills device memory scales the global batch with
``manager.scale_by_active_slices`` instead (MaxText does), and then also its learning-rate schedule.

Inside the retry: no broad ``except Exception`` (it would swallow the slice-down error), ``logging.raiseExceptions``
on (a log call that reads a lost array must raise, not print), and no ``with jax.profiler.trace``: the manager
stops a running trace on an elastic event, and the context's own stop would then raise over the slice-down error.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pwdeploy import runtime

DEFAULT_TIMEOUT = 1800.0  # seconds the manager waits for enough slices before it gives up (a slice is re-created)


class Parts(NamedTuple):
    """What the loop needs from the example, for a mesh: the jitted step and the batches."""

    jit_step: Callable[[Any], tuple[Any, Any, Any]]  # mesh -> (step, params' sharding, batches' sharding)
    batches: Callable[[Any, int, Any], tuple[Iterator[Any], dict[str, Any], Callable[[], Any]]]
    due: Callable[[int], bool]  # whether a checkpoint is saved after that step
    save: Callable[[int, Any, float, Any], None]  # (step, params, loss, loader position): save a checkpoint


@dataclass
class Kept:
    """The state to resume from, in host memory: valid whatever slice is lost next."""

    step: int
    params: Any  # numpy arrays
    data: Any  # the loader's position at ``step`` (None: the step alone says it)
    losses: dict[int, float] = field(default_factory=dict)  # every step's loss, by step
    attempts: int = 0
    meshes: list[dict[str, int]] = field(default_factory=list)
    loader_info: dict[str, Any] = field(default_factory=dict)
    first_step_seconds: float = 0.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--elastic-keep-every", type=int, default=1, metavar="N",
                        help="elastic jobs: copy the state to host memory every N steps; a lost slice costs the "
                        "steps since the last copy (default 1)")  # fmt: skip
    parser.add_argument("--elastic-timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help="elastic jobs: give up when fewer than tpu.slices - tpu.elastic_slices slices answer "
                        f"for this long (default {DEFAULT_TIMEOUT:g})")  # fmt: skip
    parser.add_argument("--elastic-poll", type=float, default=10.0, metavar="SECONDS",
                        help="elastic jobs: seconds between the manager's health checks (default 10)")  # fmt: skip


def train_elastic(
    args: argparse.Namespace, manager: Any, kept: Kept, parts: Parts, log: Callable[[int, Any], None]
) -> Kept:
    """Train steps ``kept.step + 1 .. args.steps`` inside ``manager.elastic_retry``; the state kept at the end."""
    from pathwaysutils.elastic.manager import ScaleUpSignalError

    logging.raiseExceptions = True  # a log call that reads a lost array raises, and the manager sees it
    minimum = manager.total_slice_count - runtime.elastic_slices()
    profile_dir = os.environ.get("PWDEPLOY_PROFILE_DIR") or None

    @manager.elastic_retry(minimum_slice_count=minimum, poll_interval=args.elastic_poll, timeout=args.elastic_timeout)  # type: ignore[untyped-decorator]
    def attempt() -> Kept:
        import jax

        kept.attempts += 1
        mesh = runtime.active_mesh(manager)
        if args.batch % mesh.size:
            raise SystemExit(f"error: --batch {args.batch} is not divisible by the {mesh.size} active devices")
        kept.meshes.append(dict(mesh.shape))
        step, replicated, by_example = parts.jit_step(mesh)
        params = jax.device_put(kept.params, replicated)
        loaded, info, position = parts.batches(mesh, kept.step, kept.data)
        kept.loader_info = kept.loader_info or info
        tracing = profile_dir is not None and kept.attempts == 1  # the first attempt only: never in a recovery
        if tracing:
            jax.profiler.start_trace(str(profile_dir))
        started, pending = time.perf_counter(), []
        try:
            for done, (x, y) in enumerate(loaded, start=kept.step + 1):
                params, loss = step(params, jax.device_put(x, by_example), jax.device_put(y, by_example))
                pending.append(loss)
                if done == kept.step + 1 and kept.attempts == 1:
                    kept.first_step_seconds = time.perf_counter() - started
                log(done, loss)
                due = parts.due(done)
                if done % args.elastic_keep_every == 0 or done == args.steps or due:
                    pending = keep(kept, done, params, pending, position())
                    if due:  # after the copy: a checkpoint never holds a lost slice's arrays
                        parts.save(done, params, kept.losses[done], kept.data)
                runtime.step_done(done)  # `local run --lose-slice SLICE@STEP` loses the slice here
                if manager.available_inactive_slices:  # a lost slice is back: go on with it from here
                    pending = keep(kept, done, params, pending, position())
                    raise ScaleUpSignalError(f"slices {sorted(manager.available_inactive_slices)} are back")
        finally:
            loaded.close()  # type: ignore[attr-defined]  # a generator: its loader's workers stop
        if tracing:
            jax.profiler.stop_trace()
        return kept

    done: Kept = attempt()
    return done


def keep(kept: Kept, done: int, params: Any, pending: list[Any], data: Any) -> list[Any]:
    """Copy the parameters and the losses since the last copy to host memory (raises the slice-down error when a
    slice they live on is lost); the new list of pending losses (empty)."""
    import jax

    host_params, losses = jax.device_get((params, pending))
    first = done - len(losses) + 1
    kept.losses.update({step: float(loss) for step, loss in enumerate(losses, start=first)})
    kept.step, kept.params, kept.data = done, host_params, data
    return []


def run_elastic_job(
    args: argparse.Namespace,
    manager: Any,
    *,
    init_params: Callable[[int], Any],
    open_checkpoints: Callable[[argparse.Namespace, Any], tuple[Any, Any]],
    jit_step: Callable[[Any], tuple[Any, Any, Any]],
    batches: Callable[[Any, int, Any], tuple[Iterator[Any], dict[str, Any], Callable[[], Any]]],
) -> dict[str, Any]:
    """The whole elastic job: the start state (a checkpoint's, else the initial parameters), the loop, its result."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    replicated = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), P())
    checkpoints, restored = open_checkpoints(args, jax.device_put(init_params(args.seed), replicated))
    start_step = restored.step if restored else 0
    initial = restored.params if restored else init_params(args.seed)
    kept = Kept(start_step, jax.device_get(initial), restored.data_state if restored else None)
    saved: list[int] = []

    def save(done: int, params: Any, loss: float, data_state: Any) -> None:
        checkpoints.save(done, params, loss, data_state)
        saved.append(done)

    def log(done: int, loss: Any) -> None:
        if args.log_every and done % args.log_every == 0:
            print(f"step {done}: loss {float(loss):.6f}", flush=True)

    due = (lambda done: checkpoints.due(done)) if checkpoints is not None else (lambda done: False)
    begin = time.perf_counter()
    try:
        kept = train_elastic(args, manager, kept, Parts(jit_step, batches, due, save), log)
    finally:
        if checkpoints is not None:
            checkpoints.close()  # the last save committed before the job says it is done
    seconds = time.perf_counter() - begin
    ran = args.steps - start_step
    return {
        "devices": jax.device_count(),
        "steps": args.steps,
        "final_loss": kept.losses.get(args.steps, restored.loss if restored else float("nan")),
        "examples_per_second": ran * args.batch / seconds if ran and seconds > 0 else 0.0,
        "strategy": args.strategy,
        "compile_seconds": kept.first_step_seconds,
        "batch": args.batch,
        "seed": args.seed,
        "mesh": kept.meshes[-1],
        "start_step": start_step,
        "restarts": runtime.restart_attempt(),
        "checkpoints_saved": saved,
        "elastic_attempts": kept.attempts,
        "elastic_meshes": kept.meshes,
        "losses": [kept.losses[step] for step in sorted(kept.losses)],
        **kept.loader_info,
    }
