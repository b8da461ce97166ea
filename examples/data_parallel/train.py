"""Data-parallel training of a small MLP on synthetic regression data: the pwdeploy example job.

The same file runs locally (`pwdeploy local run -f job.yaml`) and on Pathways (`pwdeploy submit -f job.yaml`).
Two strategies give the same result:

- ``jit`` (default): ``jax.jit`` over a ``Mesh`` of every device; the batch is sharded on the ``data`` axis,
  parameters are replicated, and the compiler inserts the gradient all-reduce.
- ``pmap``: the classic form, ``jax.pmap`` with an explicit ``jax.lax.pmean`` of the gradients.

Training depends only on the seed and the global batch, never on the device count. The last line of stdout
is one JSON object: devices, steps, final_loss, examples_per_second, strategy, compile_seconds, ...
Optional: ``PWDEPLOY_CHECKPOINT_DIR`` saves the final parameters with Orbax, ``PWDEPLOY_PROFILE_DIR`` writes a
profiler trace of the training loop.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from typing import Any

from pwdeploy import runtime

FEATURES = 16
HIDDEN = 32
EXAMPLES = 512  # the synthetic data set; steps cycle through it batch by batch


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64, help="global batch size (divisible by the devices)")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("TRAIN_SEED", "0")))
    parser.add_argument("--strategy", choices=("jit", "pmap"), default="jit")
    parser.add_argument("--log-every", type=int, default=0, help="print the loss every N steps (0: never)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch < 1 or EXAMPLES % args.batch:
        parser.error(f"--steps must be >= 1 and --batch must divide {EXAMPLES}")
    return args


def synthetic_data(seed: int) -> tuple[Any, Any]:
    """Inputs and targets of a fixed random two-layer teacher network (numpy, on the host)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((EXAMPLES, FEATURES), dtype=np.float32)
    teacher = rng.standard_normal((FEATURES, 1), dtype=np.float32) / np.sqrt(FEATURES)
    y = np.tanh(x @ teacher) + 0.05 * rng.standard_normal((EXAMPLES, 1), dtype=np.float32)
    return x, y.astype(np.float32)


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

    return jax.tree.map(lambda p, g: p - lr * g, params, grads)


def jit_trainer(params: dict[str, Any], batches: list[tuple[Any, Any]], lr: float) -> tuple[Any, Any, list[Any]]:
    """(jitted step, replicated params, batches sharded on ``data``)."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = runtime.data_mesh("data")
    replicated, by_example = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))

    def step(params: dict[str, Any], x: Any, y: Any) -> tuple[dict[str, Any], Any]:
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)  # a global mean: the compiler all-reduces
        return sgd(params, grads, lr), loss

    params = jax.device_put(params, replicated)
    sharded = [(jax.device_put(x, by_example), jax.device_put(y, by_example)) for x, y in batches]
    jitted = jax.jit(step, in_shardings=(replicated, by_example, by_example), out_shardings=(replicated, replicated))
    return jitted, params, sharded


def pmap_trainer(params: dict[str, Any], batches: list[tuple[Any, Any]], lr: float) -> tuple[Any, Any, list[Any]]:
    """(pmapped step, params stacked per device, batches split into one shard per device)."""
    import jax
    import numpy as np

    n = jax.local_device_count()

    def step(params: dict[str, Any], x: Any, y: Any) -> tuple[dict[str, Any], Any]:
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)  # the mean over this device's shard
        grads = jax.lax.pmean(grads, "data")
        return sgd(params, grads, lr), jax.lax.pmean(loss, "data")

    def per_device(a: Any) -> Any:
        return np.asarray(a).reshape(n, a.shape[0] // n, *a.shape[1:])

    put = jax.pmap(lambda a: a)  # one shard per device, transferred once
    params = jax.tree.map(lambda p: put(np.broadcast_to(np.asarray(p), (n, *p.shape))), params)
    sharded = [(put(per_device(x)), put(per_device(y))) for x, y in batches]
    pmapped = jax.pmap(step, axis_name="data")
    return pmapped, params, sharded


def train(args: argparse.Namespace) -> dict[str, Any]:
    runtime.initialize()  # Pathways: connect to the proxy; locally: nothing
    import jax

    devices = jax.device_count()
    if args.batch % devices:
        raise SystemExit(f"error: --batch {args.batch} is not divisible by the {devices} devices")
    x, y = synthetic_data(args.seed)
    batches = [(x[i : i + args.batch], y[i : i + args.batch]) for i in range(0, EXAMPLES, args.batch)]

    trainer = pmap_trainer if args.strategy == "pmap" else jit_trainer
    traced, params, sharded = trainer(init_params(args.seed), batches, args.lr)
    start = time.perf_counter()
    step = traced.lower(params, *sharded[0]).compile()  # compiled once, ahead of the loop, to time it
    compile_seconds = time.perf_counter() - start

    profile_dir = os.environ.get("PWDEPLOY_PROFILE_DIR")
    with jax.profiler.trace(profile_dir) if profile_dir else contextlib.nullcontext():
        params, final_loss, seconds = train_loop(step, params, sharded, args)

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
    }


def train_loop(step: Any, params: Any, sharded: list[Any], args: argparse.Namespace) -> tuple[Any, float, float]:
    """(final params, final loss, seconds): steps dispatched back to back, blocking only on the last loss."""
    import jax

    start = time.perf_counter()
    loss = None
    for i in range(args.steps):
        params, loss = step(params, *sharded[i % len(sharded)])
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
    try:
        result = train(args)
    except KeyboardInterrupt:
        print("train.py: interrupted", file=sys.stderr, flush=True)
        return 130
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
