"""The data of the data-parallel example: one definition, used by the Grain loader and by colocated Python.

The training program writes these examples to ArrayRecord files and reads them back through Grain; with
``--loader colocated_python`` a colocated-Python function computes each batch next to the TPUs
instead (``make_batch``). Both give the same batches for the same seed, so both train to the same loss.

Colocated Python pickles functions by reference (module and name), so this package must be importable in the
sidecar: `pwdeploy sidecar build` copies this directory to /app, which is on the sidecar's PYTHONPATH
(`pwdeploy local run` puts sidecar.source_dir on PYTHONPATH the same way).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jax
import numpy as np
from jax.experimental import colocated_python
from jax.sharding import NamedSharding, PartitionSpec

FEATURES = 16
EXAMPLES = 512  # the data set; training steps cycle through it batch by batch


@lru_cache(maxsize=4)
def examples(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and targets of a fixed random two-layer teacher network: the same for a seed wherever computed."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((EXAMPLES, FEATURES), dtype=np.float32)
    teacher = rng.standard_normal((FEATURES, 1), dtype=np.float32) / np.sqrt(FEATURES)
    y = np.tanh(x @ teacher) + 0.05 * rng.standard_normal((EXAMPLES, 1), dtype=np.float32)
    return x, y.astype(np.float32)


def batch_start(step: int, batch: int) -> int:
    """Index of the first example of ``step``'s batch (steps cycle through the examples in order)."""
    return (step % (EXAMPLES // batch)) * batch


def synthetic_batch(seed: int, step: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """The whole global batch of ``step``."""
    return batch_rows(seed, step, batch, slice(None))


def batch_rows(seed: int, step: int, batch: int, rows: slice) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` of the global batch of ``step``: what one device's shard holds."""
    x, y = examples(seed)
    start = batch_start(step, batch)
    selected = range(EXAMPLES)[start : start + batch][rows]
    return x[selected.start : selected.stop], y[selected.start : selected.stop]


@colocated_python.colocated_python
def make_batch(request: Any) -> tuple[Any, Any]:
    """The global batch of one step, as (inputs, targets) jax.Arrays sharded like ``request``'s first axis.

    Colocated functions take and return jax.Arrays only, so the request is an int32 array of shape
    (devices, 3): every row is (seed, step, global batch), one row per device. Each device's shard is computed
    on the host that holds the device; nothing crosses hosts.
    """
    devices = request.shape[0]
    xs, ys = [], []
    for shard in request.addressable_shards:
        seed, step, batch = (int(v) for v in np.asarray(shard.data)[0])
        index = shard.index[0].start or 0
        per_device = batch // devices
        x, y = batch_rows(seed, step, batch, slice(index * per_device, (index + 1) * per_device))
        xs.append(jax.device_put(x, shard.device))
        ys.append(jax.device_put(y, shard.device))
    sharding = NamedSharding(request.sharding.mesh, PartitionSpec(request.sharding.spec[0]))
    batch = devices * xs[0].shape[0]
    return (
        jax.make_array_from_single_device_arrays((batch, FEATURES), sharding, xs),
        jax.make_array_from_single_device_arrays((batch, 1), sharding, ys),
    )
