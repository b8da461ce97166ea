"""The colocated-Python batch producer: runs on the CPU hosts of the TPU slices (locally, in-process)."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.experimental import colocated_python
from jax.sharding import NamedSharding, PartitionSpec

from dp_data import FEATURES, batch_rows


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
