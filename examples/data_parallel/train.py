"""Data-parallel training of a small MLP on synthetic regression data: the pwdeploy example job.

The same file runs locally (`pwdeploy local run -f job.yaml`) and on Pathways (`pwdeploy submit -f job.yaml`).

Data: the examples (``dp_data``, in sidecar/src) are written once to an ArrayRecord file and read back through a
Grain pipeline with ``runtime.data_workers()`` worker processes (0: in-process), its prefetch buffer sized to
/dev/shm by ``runtime.prefetch_buffer``. With ``--loader colocated_python`` each batch is instead made by a
colocated-Python function on the CPU hosts next to the accelerators (sidecar/job.yaml). Same batches either way.

Two strategies give the same result:

- ``jit`` (default): ``jax.jit`` over a ``Mesh`` of every device (``(slice, data)`` with more than one slice);
  the batch is sharded over every mesh axis, parameters are replicated, and the compiler inserts the gradient
  all-reduce.
- ``pmap``: the classic form, ``jax.pmap`` with an explicit ``jax.lax.pmean`` of the gradients.

Training depends only on the seed and the global batch, never on the device count, the loader or its workers.
The last line of stdout is one JSON object: devices, steps, final_loss, examples_per_second, strategy,
compile_seconds, loader, data_workers, mesh, start_step, restarts, ...

Restarts: with ``PWDEPLOY_CHECKPOINT_DIR`` set, the parameters, the step and the loader's position are saved
every ``--checkpoint-seconds`` (or ``--checkpoint-every`` steps) and at the end (checkpointing.py), and a start
restores the latest complete checkpoint and goes on from there: a job killed at any step and restarted ends with
the loss of a run that was never killed. ``runtime.step_done(step)`` after each step is where
`local run --fail-at-step` kills it. SIGTERM (Kubernetes stopping the job: a Kueue eviction, a deleted pod) saves a
checkpoint at the next step boundary and exits 143 (``runtime.stop_on_sigterm``), which requeues or restarts it.
Optional: ``PWDEPLOY_PROFILE_DIR`` writes a profiler trace of the training loop.

Elastic: with ``PWDEPLOY_ELASTIC_SLICES`` > 0 (``tpu.elastic_slices``) the loop runs inside pathwaysutils'
``elastic_retry`` (elastic_training.py): a lost slice is survived in-process, without a restart, and taken back
when it returns; `local run --lose-slice SLICE@STEP` proves it (docs/elastic.md).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from pwdeploy import runtime

HERE = Path(__file__).resolve().parent
# This folder (checkpointing.py, loaders.py) and the sidecar's package (dp_data) are importable wherever this
# file runs: as a script (its folder is on sys.path), in the job image (which copies this folder), in the tests.
for folder in (HERE, HERE / "sidecar" / "src"):
    if str(folder) not in sys.path:
        sys.path.append(str(folder))

import dp_data  # noqa: E402
from checkpointing import DEFAULT_SECONDS, Checkpoints, Restored  # noqa: E402
from elastic_training import add_arguments, run_elastic_job  # noqa: E402
from loaders import colocated_batches, grain_batches, write_records  # noqa: E402
from mtc_checkpoints import DEFAULT_EVERY as MTC_EVERY  # noqa: E402
from mtc_checkpoints import MtcCheckpoints  # noqa: E402

FEATURES = dp_data.FEATURES
HIDDEN = 32
EXAMPLES = dp_data.EXAMPLES
LOADERS = ("grain", "colocated_python")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64, help="global batch size (divisible by the devices)")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("TRAIN_SEED", "0")))
    parser.add_argument("--strategy", choices=("jit", "pmap"), default="jit")
    parser.add_argument("--loader", choices=LOADERS, default="grain")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get("TRAIN_DATA_DIR", Path(tempfile.gettempdir()) / "pwdeploy-dp-example")),
        help="where the ArrayRecord file of the examples is written once (env TRAIN_DATA_DIR)",
    )
    parser.add_argument("--log-every", type=int, default=0, help="print the loss every N steps (0: never)")
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        help="with PWDEPLOY_CHECKPOINT_DIR set, save a checkpoint every N steps (0: only the last step; default: "
        "by time, --checkpoint-seconds)",
    )
    parser.add_argument(
        "--checkpoint-seconds",
        type=int,
        default=DEFAULT_SECONDS,
        help="with PWDEPLOY_CHECKPOINT_DIR set and no --checkpoint-every, save at the first step at least this many "
        f"seconds after the last save (default {DEFAULT_SECONDS}; docs/checkpoints.md says how to choose it)",
    )
    parser.add_argument(
        "--mtc",
        action="store_true",
        help="multi-tier checkpoints (a job with mtc.enabled): every --checkpoint-every steps (default "
        f"{MTC_EVERY}) to the MTC ramdisk, restored from there on a restart (mtc_checkpoints.py)",
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch < 1 or EXAMPLES % args.batch:
        parser.error(f"--steps must be >= 1 and --batch must divide {EXAMPLES}")
    if (args.checkpoint_every or 0) < 0 or args.checkpoint_seconds < 1:
        parser.error("--checkpoint-every must be 0 or more, --checkpoint-seconds 1 or more")
    return args


def init_params(seed: int) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    k1, k2 = jax.random.split(jax.random.key(seed))
    return {
        "w1": jax.random.normal(k1, (FEATURES, HIDDEN)) / jnp.sqrt(FEATURES),
        "b1": jnp.zeros((HIDDEN,)),
        "w2": jax.random.normal(k2, (HIDDEN, 1)) / jnp.sqrt(HIDDEN),
        "b2": jnp.zeros((1,)),
    }


def loss_fn(params: dict[str, Any], x: Any, y: Any) -> Any:
    import jax.numpy as jnp

    hidden = jnp.tanh(x @ params["w1"] + params["b1"])
    prediction = hidden @ params["w2"] + params["b2"]
    return jnp.mean((prediction - y) ** 2)


def sgd(params: dict[str, Any], grads: dict[str, Any], lr: float) -> dict[str, Any]:
    import jax

    updated: dict[str, Any] = jax.tree.map(lambda p, g: p - lr * g, params, grads)
    return updated


def jit_step(lr: float, mesh: Any) -> tuple[Any, Any, Any]:
    """(the step jitted over ``mesh``, the parameters' sharding: replicated, the batches': over every mesh axis)."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    replicated, by_example = NamedSharding(mesh, P()), NamedSharding(mesh, P(mesh.axis_names))

    def step(params: dict[str, Any], x: Any, y: Any) -> tuple[dict[str, Any], Any]:
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)  # a global mean: the compiler all-reduces
        return sgd(params, grads, lr), loss

    jitted = jax.jit(step, in_shardings=(replicated, by_example, by_example), out_shardings=(replicated, replicated))
    return jitted, replicated, by_example


def jit_trainer(params: dict[str, Any], lr: float, slices: bool) -> tuple[Any, Any, Any, Any]:
    """(jitted step, replicated params, the batches' sharding: over every mesh axis, the mesh)."""
    import jax

    mesh = runtime.data_mesh("data", slices=slices)
    jitted, replicated, by_example = jit_step(lr, mesh)
    return jitted, jax.device_put(params, replicated), by_example, mesh


def pmap_trainer(params: dict[str, Any], lr: float) -> tuple[Any, Any, Any]:
    """(pmapped step, params stacked per device, a function splitting a batch into one shard per device)."""
    import jax
    import numpy as np

    n = jax.local_device_count()

    def step(params: dict[str, Any], x: Any, y: Any) -> tuple[dict[str, Any], Any]:
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)  # the mean over this device's shard
        grads = jax.lax.pmean(grads, "data")
        return sgd(params, grads, lr), jax.lax.pmean(loss, "data")

    def per_device(a: Any) -> Any:
        a = np.asarray(a)
        return a.reshape(n, a.shape[0] // n, *a.shape[1:])

    put = jax.pmap(lambda a: a)  # one shard per device
    params = jax.tree.map(lambda p: put(np.broadcast_to(np.asarray(p), (n, *p.shape))), params)
    return jax.pmap(step, axis_name="data"), params, per_device


def batches(
    args: argparse.Namespace, mesh: Any, start: int = 0, state: Any = None
) -> tuple[Iterator[tuple[Any, Any]], dict[str, Any], Any]:
    """(each step's (inputs, targets) from step ``start`` on, what the JSON line says about the loader, a
    function giving the loader's position to checkpoint: None when the step alone says it)."""
    if args.loader == "colocated_python":
        info: dict[str, Any] = {"loader": "colocated_python", "data_workers": 0, "colocated_calls": 0}

        def counted() -> Iterator[tuple[Any, Any]]:
            for made in colocated_batches(mesh, seed=args.seed, batch=args.batch, steps=args.steps, start=start):
                info["colocated_calls"] += 1
                yield made

        return counted(), info, lambda: None
    if start and state is None and not args.mtc:  # multi-tier checkpoints resume the loader by index
        raise SystemExit(
            f"error: the checkpoint of step {start} holds no Grain loader position (it was written with "
            "--loader colocated_python); resume with that loader, or start in a new checkpoint directory"
        )
    workers = runtime.data_workers()
    position = grain_position(state, workers, start)
    path = write_records(args.data_dir, args.seed)
    loaded, buffer, iterator = grain_batches(
        path, batch=args.batch, steps=args.steps, workers=workers, state=position, start=0 if position else start
    )
    info = {"loader": "grain", "data_workers": workers, "prefetch_buffer": buffer}
    return loaded, info, lambda: {"data_workers": workers, "grain": iterator.get_state()}


def grain_position(state: Any, workers: int, start: int) -> Any:
    """The Grain iterator state to resume from, or None to resume at batch ``start`` by index. A Grain state
    records how batches were spread over the worker processes that wrote it: set on an iterator with another
    worker count it fails (a KeyError) or, worse, goes on from the wrong batch. Every step takes one batch of a
    dataset indexed in order, so the same batches follow from the step alone."""
    if state is None:
        return None
    written = state.get("data_workers") if isinstance(state, dict) and "grain" in state else None
    if written == workers:
        return state["grain"]
    had = "an unknown number of" if written is None else str(written)
    print(
        f"train.py: note: the checkpoint of step {start} holds a Grain position written with {had} data workers "
        f"and this run has {workers}; the loader goes on at batch {start} by index instead (the same batches)",
        file=sys.stderr,
    )
    return None


class Trainer(NamedTuple):
    step: Any  # the jitted or pmapped step: (params, x, y) -> (params, loss)
    params: Any  # laid out for ``step``
    place: Any  # (x, y) from the loader -> the step's inputs
    specs: list[Any]  # the step's input shapes, to compile it ahead of the loop
    mesh: Any
    to_checkpoint: Any  # params -> the tree a checkpoint holds (replicated over every device)


def make_trainer(args: argparse.Namespace, params: dict[str, Any], replicated: Any) -> Trainer:
    import jax
    import numpy as np
    from jax.sharding import Mesh

    devices = jax.device_count()
    if args.strategy == "pmap":
        step, params, per_device = pmap_trainer(params, args.lr)
        shard = args.batch // devices
        specs = [jax.ShapeDtypeStruct((devices, shard, n), np.float32) for n in (FEATURES, 1)]

        def place_pmap(x: Any, y: Any) -> tuple[Any, Any]:
            return per_device(x), per_device(y)

        def unstack(stacked: Any) -> Any:
            return jax.device_put(_first_tree(stacked), replicated)

        return Trainer(step, params, place_pmap, specs, Mesh(np.array(jax.devices()), ("data",)), unstack)
    step, params, by_example, mesh = jit_trainer(params, args.lr, slices=runtime.slice_count(jax.devices()) > 1)
    specs = [jax.ShapeDtypeStruct((args.batch, n), np.float32, sharding=by_example) for n in (FEATURES, 1)]

    def place(x: Any, y: Any) -> tuple[Any, Any]:
        return jax.device_put(x, by_example), jax.device_put(y, by_example)

    return Trainer(step, params, place, specs, mesh, lambda same: same)


def open_checkpoints(
    args: argparse.Namespace, like: Any
) -> tuple[Checkpoints | MtcCheckpoints | None, Restored | None]:
    """(the checkpoints under PWDEPLOY_CHECKPOINT_DIR, the latest readable one): (None, None) when it is unset;
    with --mtc, the multi-tier checkpoints in the MTC directory and the step the MTC driver handed back."""
    if args.mtc:
        options = runtime.mtc_options()
        if options is None:
            raise SystemExit("error: --mtc needs a job with mtc.enabled (PWDEPLOY_MTC_DIR is not set)")
        every = args.checkpoint_every or MTC_EVERY
        mtc = MtcCheckpoints(options, args.steps, every=every, mesh=jax_mesh(like))
        return mtc, mtc.restore(like)
    directory = runtime.checkpoint_dir()
    if not directory:
        return None, None
    checkpoints = Checkpoints(directory, args.steps, every=args.checkpoint_every, seconds=args.checkpoint_seconds)
    return checkpoints, checkpoints.restore(like)


def jax_mesh(tree: Any) -> Any:
    """The mesh the arrays of ``tree`` are placed on."""
    import jax

    return jax.tree.leaves(tree)[0].sharding.mesh


def train(args: argparse.Namespace) -> dict[str, Any]:
    runtime.initialize()  # Pathways: connect to the proxy; locally: nothing
    if runtime.elastic_slices() > 0:
        return elastic_job(args)
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    devices = jax.device_count()
    if args.batch % devices:
        raise SystemExit(f"error: --batch {args.batch} is not divisible by the {devices} devices")
    # Checkpoints hold the parameters replicated over every device, placed with a NamedSharding: the only kind of
    # target the Pathways persistence handler restores into.
    replicated = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), P())
    params = jax.device_put(init_params(args.seed), replicated)
    checkpoints, restored = open_checkpoints(args, params)
    start_step = restored.step if restored else 0
    trainer = make_trainer(args, restored.params if restored else params, replicated)

    start = time.perf_counter()
    step = trainer.step.lower(trainer.params, *trainer.specs).compile()  # compiled once, ahead of the loop, to time it
    compile_seconds = time.perf_counter() - start

    loaded, loader_info, position = batches(args, trainer.mesh, start_step, restored.data_state if restored else None)
    saved: list[int] = []

    def after_step(done: int, params: Any, loss: Any) -> None:
        if args.log_every and done % args.log_every == 0:
            print(f"step {done}: loss {float(_first(loss)):.6f}", flush=True)
        stopping = STOP is not None and STOP.requested  # the kubelet's SIGTERM: a Kueue eviction, a deleted pod
        if checkpoints is not None and (checkpoints.due(done) or stopping):
            checkpoints.save(done, trainer.to_checkpoint(params), float(_first(loss)), position())
            saved.append(done)
        if stopping:
            if checkpoints is not None:
                checkpoints.close()  # the last checkpoint committed within the grace period
            print(f"train.py: stopped after step {done} (SIGTERM), checkpoint saved: exiting 143", flush=True)
            STOP.exit()  # 143: Kueue requeues the job (or the JobSet restarts it) and it resumes from this step
        runtime.step_done(done)  # `local run --fail-at-step N` kills the job here, on its first attempt

    profile_dir = runtime.profile_dir()
    try:
        with jax.profiler.trace(profile_dir) if profile_dir else contextlib.nullcontext():
            placed = (trainer.place(x, y) for x, y in loaded)
            final_loss, seconds = train_loop(step, trainer.params, placed, start_step, after_step)
    finally:
        if checkpoints is not None:
            checkpoints.close()  # the last save committed before the job says it is done
    ran = args.steps - start_step
    return {
        "devices": devices,
        "steps": args.steps,
        "final_loss": final_loss if final_loss is not None else restored.loss if restored else float("nan"),
        "examples_per_second": ran * args.batch / seconds if ran and seconds > 0 else 0.0,
        "strategy": args.strategy,
        "compile_seconds": compile_seconds,
        "batch": args.batch,
        "seed": args.seed,
        "mesh": dict(trainer.mesh.shape),
        "start_step": start_step,
        "restarts": runtime.restart_attempt(),
        "checkpoints_saved": saved,
        **loader_info,
    }


def elastic_job(args: argparse.Namespace) -> dict[str, Any]:
    """The job with elastic slices: the step loop inside the elastic manager's retry (elastic_training.py)."""
    if args.strategy != "jit":
        raise SystemExit("error: an elastic job needs --strategy jit (its mesh is rebuilt over the active slices)")
    manager = runtime.elastic_manager()  # before the step is jitted: a local run's emulated slice loss patches jit
    return run_elastic_job(
        args,
        manager,
        init_params=init_params,
        open_checkpoints=open_checkpoints,
        jit_step=lambda mesh: jit_step(args.lr, mesh),
        batches=lambda mesh, start, state: batches(args, mesh, start, state),
    )


def train_loop(
    step: Any, params: Any, placed: Iterator[Any], start: int, after_step: Any
) -> tuple[float | None, float]:
    """(final loss, or None if no step ran; seconds): steps ``start + 1``, ... dispatched back to back, blocking
    only on the last loss and where ``after_step(step, params, loss)`` reads a value (logs, checkpoints)."""
    import jax

    begin = time.perf_counter()
    loss = None
    for done, batch in enumerate(placed, start=start + 1):
        params, loss = step(params, *batch)
        after_step(done, params, loss)
    final_loss = None if loss is None else float(_first(jax.block_until_ready(loss)))
    return final_loss, time.perf_counter() - begin


def _first(value: Any) -> Any:
    return value[0] if getattr(value, "ndim", 0) else value


def _first_tree(tree: Any) -> Any:
    import jax

    return jax.tree.map(lambda a: a[0], tree)


def stop_at_once(signum: int, _frame: Any) -> None:
    """Ctrl-C (SIGINT; `pwdeploy local run` passes it to this process alone): say so and exit at once, 130.

    Unwinding instead (a KeyboardInterrupt) would wait for Grain's prefetch threads to notice their workers are
    done (tens of seconds with 7 workers) and for a checkpoint being written. Neither is needed: whoever started
    the program ends the workers (`local run` ends every process of the job, the pod's end ends the container),
    and a checkpoint is committed or not at all (Orbax writes a step into a temporary folder and renames it when
    it is complete; one interrupted half way is not restored from)."""
    with contextlib.suppress(Exception):  # a print of the main thread may hold the buffer: then it is dropped
        sys.stdout.flush()
    with contextlib.suppress(OSError):
        os.write(2, b"train.py: interrupted\n")
    os._exit(128 + signum)


STOP: Any = None  # runtime.stop_on_sigterm()'s Stop, once main() installed it


def main(argv: list[str] | None = None) -> int:
    import signal

    global STOP
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not when started ignoring it (nohup, &)
        signal.signal(signal.SIGINT, stop_at_once)
    # SIGTERM is how Kubernetes stops the job (a Kueue eviction, a deleted pod): save at the next step boundary and
    # exit 143 within the grace period, so that the job is requeued or restarted from there (docs/restarts.md).
    STOP = runtime.stop_on_sigterm()
    args = parse_args(argv)
    needed = ("grain", "array_record") if args.loader == "grain" else ()
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        print(
            f"train.py: {' and '.join(missing)} not installed: the Grain loader reads the example's data with them; "
            "install the example's extra (pip install -e '.[example]' in the pwdeploy checkout) or "
            "requirements.txt beside this file, or pass --loader colocated_python",
            file=sys.stderr,
        )
        return 2
    try:
        result = train(args)
    except TimeoutError as error:  # the elastic manager's: too few slices came back
        print(
            f"train.py: error: fewer than tpu.slices - tpu.elastic_slices slices were healthy for "
            f"--elastic-timeout {args.elastic_timeout:g} s, so elastic training cannot go on "
            f"(pathwaysutils: {error})",
            file=sys.stderr,
            flush=True,
        )
        return 1
    except KeyboardInterrupt:  # SIGINT raised it where stop_at_once is not installed (a caller's own handling)
        print("train.py: interrupted", file=sys.stderr, flush=True)
        return 130
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    # A lost slice exits 75, which restarts the JobSet; any other error fails it (docs/restarts.md).
    sys.exit(runtime.retry_on_slice_loss(main))
