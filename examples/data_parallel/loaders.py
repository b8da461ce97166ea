"""The example's two data loaders: a Grain pipeline over an ArrayRecord file, and colocated Python.

Both give the batches of steps ``start + 1 .. steps`` (``dp_data`` defines the examples, one for every seed), so
both train alike and both resume: the Grain iterator from its saved position (``get_state``/``set_state``), the
colocated loader from the step number alone.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import dp_data

from pwdeploy import runtime

FEATURES = dp_data.FEATURES
EXAMPLES = dp_data.EXAMPLES
RECORD_BYTES = 4 * (FEATURES + 1)  # one example: its float32 inputs, then its target


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
    path: Path,
    *,
    batch: int,
    steps: int,
    workers: int,
    state: Any = None,
    start: int = 0,
    decode: Any = decode_record,
) -> tuple[Generator[Any, None, None], int, Any]:
    """(the first ``steps`` batches of the records at ``path``, in order and cycling; the prefetch buffer;
    the Grain iterator, whose ``get_state()`` is its position).

    ``workers`` Grain worker processes decode and batch; 0 does it in this process. Each batch passes through
    /dev/shm on its way from a worker, so the per-worker prefetch buffer is sized to what /dev/shm holds.
    ``state``: a position from ``get_state()`` (a checkpoint): the batches go on from there, none repeated or
    skipped. Resume with the same worker count: a state records how the batches were spread over the workers.
    ``start``: without a state, begin at that batch (the batches are indexed in order, so the same ones follow).
    """
    import grain

    runtime.prepare_data_workers(workers)
    source = grain.sources.ArrayRecordDataSource([str(path)])
    per_epoch = len(source) // batch
    dataset = grain.MapDataset.source(source).map(decode).batch(batch, drop_remainder=True)
    dataset = dataset.repeat(-(-steps // per_epoch))[start:steps]  # exactly ``steps``: no batch left in /dev/shm
    # In-memory records: grain's reader threads only add overhead (measured 6x slower than none).
    iterable = dataset.to_iter_dataset(grain.ReadOptions(num_threads=0))
    buffer = 0
    if workers:
        batch_bytes = batch * os.path.getsize(path) // len(source)
        buffer = runtime.prefetch_buffer(batch_bytes, workers)
        iterable = iterable.mp_prefetch(
            grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=buffer)
        )
    iterator = iter(iterable)
    if state is not None:
        iterator.set_state(state)  # before the first batch: workers start from there
    return _closing(iterator), buffer, iterator


def _closing(iterator: Any) -> Generator[Any, None, None]:
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


def colocated_batches(mesh: Any, *, seed: int, batch: int, steps: int, start: int = 0) -> Iterator[tuple[Any, Any]]:
    """Each step's batch from step ``start`` on (a batch is a function of its step: that is how this loader
    resumes), made by ``dp_data.make_batch`` on the CPU devices colocated with ``mesh``'s."""
    import jax
    import numpy as np
    from jax.experimental.colocated_python import colocated_cpu_devices
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    cpu_devices = colocated_cpu_devices(list(mesh.devices.flat))
    cpu_mesh = Mesh(np.array(cpu_devices).reshape(mesh.devices.shape), mesh.axis_names)
    requests = NamedSharding(cpu_mesh, P(mesh.axis_names))
    for step in range(start, steps):
        request = np.tile(np.array([[seed, step, batch]], dtype=np.int32), (cpu_mesh.size, 1))
        yield dp_data.make_batch(jax.device_put(request, requests))
