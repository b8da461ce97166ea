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
compile_seconds, loader, data_workers, mesh, ...
Optional: ``PWDEPLOY_CHECKPOINT_DIR`` saves the final parameters with Orbax, ``PWDEPLOY_PROFILE_DIR`` writes a
profiler trace of the training loop.
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
from typing import Any

from pwdeploy import runtime

try:
    import dp_data
except ImportError:  # not on PYTHONPATH: the package beside this file (the job image copies this folder)
    sys.path.append(str(Path(__file__).resolve().parent / "sidecar" / "src"))
    import dp_data

FEATURES = dp_data.FEATURES
HIDDEN = 32
EXAMPLES = dp_data.EXAMPLES
RECORD_BYTES = 4 * (FEATURES + 1)  # one example: its float32 inputs, then its target
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
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch < 1 or EXAMPLES % args.batch:
        parser.error(f"--steps must be >= 1 and --batch must divide {EXAMPLES}")
    return args


def write_records(data_dir: Path, seed: int) -> Path:
    """The examples of ``seed`` as an ArrayRecord file, one record per example; written once, then reused."""
    path = data_dir / f"examples-seed{seed}-{EXAMPLES}x{FEATURES}.array_record"
    if path.exists():
        return path
    import numpy as np
    from array_record.python.array_record_module import ArrayRecordWriter

    data_dir.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")  # renamed into place: readers never see half a file
    x, y = dp_data.examples(seed)
    writer = ArrayRecordWriter(str(partial), "group_size:1")
    for row in np.concatenate([x, y], axis=1):
        writer.write(row.tobytes())
    writer.close()
    os.replace(partial, path)
    return path


def decode_record(record: bytes) -> tuple[Any, Any]:
    import numpy as np

    values = np.frombuffer(record, dtype=np.float32)
    return values[:FEATURES], values[FEATURES:]


def grain_batches(
    path: Path, *, batch: int, steps: int, workers: int, decode: Any = decode_record
) -> tuple[Iterator[Any], int]:
    """(the first ``steps`` batches of the records at ``path``, in order and cycling; the prefetch buffer).

    ``workers`` Grain worker processes decode and batch; 0 does it in this process. Each batch passes through
    /dev/shm on its way from a worker, so the per-worker prefetch buffer is sized to what /dev/shm holds.
    """
    import grain

    runtime.prepare_data_workers(workers)
    source = grain.sources.ArrayRecordDataSource([str(path)])
    per_epoch = len(source) // batch
    dataset = grain.MapDataset.source(source).map(decode).batch(batch, drop_remainder=True)
    dataset = dataset.repeat(-(-steps // per_epoch))[:steps]  # exactly ``steps``: no batch left in /dev/shm
    # In-memory records: grain's reader threads only add overhead (measured 6x slower than none).
    iterable = dataset.to_iter_dataset(grain.ReadOptions(num_threads=0))
    buffer = 0
    if workers:
        batch_bytes = batch * os.path.getsize(path) // len(source)
        buffer = runtime.prefetch_buffer(batch_bytes, workers)
        iterable = iterable.mp_prefetch(
            grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=buffer)
        )
    return _closing(iter(iterable)), buffer


def _closing(iterator: Any) -> Iterator[Any]:
    """The iterator's batches (tuples of arrays), each copied out of /dev/shm at once (the shared block is
    freed as the copy is made, not when JAX lets go of the array); then, or if the loop stops early, the
    workers stop and the blocks Grain still holds are freed."""
    import numpy as np

    batch = None
    try:
        for batch in iterator:
            yield tuple(np.array(part) for part in batch)
    finally:
        batch = None  # the last batch's blocks are let go before the loader waits for their unlinking
        runtime.close_data_loader(iterator)


def colocated_batches(mesh: Any, *, seed: int, batch: int, steps: int) -> Iterator[tuple[Any, Any]]:
    """Each step's batch, made by ``dp_data.make_batch`` on the CPU devices colocated with ``mesh``'s."""
    import jax
    import numpy as np
    from jax.experimental.colocated_python import colocated_cpu_devices
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    cpu_devices = colocated_cpu_devices(list(mesh.devices.flat))
    cpu_mesh = Mesh(np.array(cpu_devices).reshape(mesh.devices.shape), mesh.axis_names)
    requests = NamedSharding(cpu_mesh, P(mesh.axis_names))
    for step in range(steps):
        request = np.tile(np.array([[seed, step, batch]], dtype=np.int32), (cpu_mesh.size, 1))
        yield dp_data.make_batch(jax.device_put(request, requests))


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


def jit_trainer(params: dict[str, Any], lr: float, slices: bool) -> tuple[Any, Any, Any, Any]:
    """(jitted step, replicated params, the batches' sharding: over every mesh axis, the mesh)."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = runtime.data_mesh("data", slices=slices)
    replicated, by_example = NamedSharding(mesh, P()), NamedSharding(mesh, P(mesh.axis_names))

    def step(params: dict[str, Any], x: Any, y: Any) -> tuple[dict[str, Any], Any]:
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)  # a global mean: the compiler all-reduces
        return sgd(params, grads, lr), loss

    params = jax.device_put(params, replicated)
    jitted = jax.jit(step, in_shardings=(replicated, by_example, by_example), out_shardings=(replicated, replicated))
    return jitted, params, by_example, mesh


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


def batches(args: argparse.Namespace, mesh: Any) -> tuple[Iterator[tuple[Any, Any]], dict[str, Any]]:
    """(each step's (inputs, targets), what the JSON line says about the loader)."""
    if args.loader == "colocated_python":
        info: dict[str, Any] = {"loader": "colocated_python", "data_workers": 0, "colocated_calls": 0}

        def counted() -> Iterator[tuple[Any, Any]]:
            for made in colocated_batches(mesh, seed=args.seed, batch=args.batch, steps=args.steps):
                info["colocated_calls"] += 1
                yield made

        return counted(), info
    workers = runtime.data_workers()
    path = write_records(args.data_dir, args.seed)
    loaded, buffer = grain_batches(path, batch=args.batch, steps=args.steps, workers=workers)
    return loaded, {"loader": "grain", "data_workers": workers, "prefetch_buffer": buffer}


def train(args: argparse.Namespace) -> dict[str, Any]:
    runtime.initialize()  # Pathways: connect to the proxy; locally: nothing
    import jax
    import numpy as np
    from jax.sharding import Mesh

    devices = jax.device_count()
    if args.batch % devices:
        raise SystemExit(f"error: --batch {args.batch} is not divisible by the {devices} devices")
    params = init_params(args.seed)
    if args.strategy == "pmap":
        step_fn, params, per_device = pmap_trainer(params, args.lr)
        mesh = Mesh(np.array(jax.devices()), ("data",))
        shard = args.batch // devices
        specs = [jax.ShapeDtypeStruct((devices, shard, n), np.float32) for n in (FEATURES, 1)]

        def place(x: Any, y: Any) -> tuple[Any, Any]:
            return per_device(x), per_device(y)

    else:
        step_fn, params, by_example, mesh = jit_trainer(params, args.lr, slices=runtime.slice_count(jax.devices()) > 1)
        specs = [jax.ShapeDtypeStruct((args.batch, n), np.float32, sharding=by_example) for n in (FEATURES, 1)]

        def place(x: Any, y: Any) -> tuple[Any, Any]:
            return jax.device_put(x, by_example), jax.device_put(y, by_example)

    start = time.perf_counter()
    step = step_fn.lower(params, *specs).compile()  # compiled once, ahead of the loop, to time it
    compile_seconds = time.perf_counter() - start

    loaded, loader_info = batches(args, mesh)
    profile_dir = os.environ.get("PWDEPLOY_PROFILE_DIR")
    with jax.profiler.trace(profile_dir) if profile_dir else contextlib.nullcontext():
        params, final_loss, seconds = train_loop(step, params, (place(x, y) for x, y in loaded), args)

    checkpoint_dir = os.environ.get("PWDEPLOY_CHECKPOINT_DIR")
    if checkpoint_dir:
        save_checkpoint(checkpoint_dir, args.steps, params if args.strategy == "jit" else _first_tree(params))
    return {
        "devices": devices,
        "steps": args.steps,
        "final_loss": final_loss,
        "examples_per_second": args.steps * args.batch / seconds,
        "strategy": args.strategy,
        "compile_seconds": compile_seconds,
        "batch": args.batch,
        "seed": args.seed,
        "mesh": dict(mesh.shape),
        **loader_info,
    }


def train_loop(step: Any, params: Any, placed: Iterator[Any], args: argparse.Namespace) -> tuple[Any, float, float]:
    """(final params, final loss, seconds): steps dispatched back to back, blocking only on the last loss."""
    import jax

    start = time.perf_counter()
    loss = None
    for i, batch in enumerate(placed):
        params, loss = step(params, *batch)
        if args.log_every and (i + 1) % args.log_every == 0:
            print(f"step {i + 1}: loss {float(_first(loss)):.6f}", flush=True)
    final_loss = float(_first(jax.block_until_ready(loss)))
    return params, final_loss, time.perf_counter() - start


def save_checkpoint(directory: str, step: int, params: dict[str, Any]) -> None:
    import orbax.checkpoint as ocp

    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(os.path.join(directory, f"step_{step}"), params)


def _first(value: Any) -> Any:
    return value[0] if getattr(value, "ndim", 0) else value


def _first_tree(tree: Any) -> Any:
    import jax

    return jax.tree.map(lambda a: a[0], tree)


def main(argv: list[str] | None = None) -> int:
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
    except KeyboardInterrupt:
        print("train.py: interrupted", file=sys.stderr, flush=True)
        return 130
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
