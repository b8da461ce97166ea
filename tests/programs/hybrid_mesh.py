"""A multislice trainer's mesh, built as MaxText and Pathways' own examples build it: the slices counted from the
devices' ``slice_index``, the ICI axes laid out inside each slice and the DCN axis across slices
(``jax.experimental.mesh_utils.create_hybrid_device_mesh``), then one sharded training step over it. Prints one
JSON line: the slice count, the mesh's axes, the slices each row of the DCN axis holds, and whether the step ran."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from pwdeploy import runtime


def loss(w: jax.Array, x: jax.Array) -> jax.Array:
    return ((x @ w.T) ** 2).mean()


@jax.jit
def step(w: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    value, grad = jax.value_and_grad(loss)(w, x)
    return w - 0.1 * grad, value


def main() -> None:
    runtime.initialize()  # pathwaysutils.initialize() on Pathways
    devices = jax.devices()
    slices = max(d.slice_index for d in devices) + 1
    per_slice = len(devices) // slices
    ici = (1, per_slice // 2, 2)  # (data, fsdp, tensor) inside a slice
    dcn = (slices, 1, 1)  # data parallel across slices
    grid = mesh_utils.create_hybrid_device_mesh(ici, dcn, devices)
    mesh = Mesh(grid, ("data", "fsdp", "tensor"))
    w = jax.device_put(jnp.ones((8, 4)), NamedSharding(mesh, P("fsdp", "tensor")))
    x = jax.device_put(jnp.arange(64.0).reshape(16, 4) / 64, NamedSharding(mesh, P(("data", "fsdp"), None)))
    w, value = step(w, x)
    runtime.step_done(1)
    rows = [sorted({int(d.slice_index) for d in grid[row].flat}) for row in range(grid.shape[0])]
    finite = bool(jnp.isfinite(w).all())
    print(
        json.dumps({"slices": slices, "mesh": dict(mesh.shape), "rows": rows, "loss": float(value), "finite": finite})
    )


if __name__ == "__main__":
    main()
