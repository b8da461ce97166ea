"""The data of the data-parallel example: one definition, used by the Grain loader and by colocated Python.

The training program writes these examples to ArrayRecord files and reads them back through Grain; with
``--loader colocated_python`` the function in ``dp_data.colocated`` computes each batch next to the TPUs
instead. Both give the same batches for the same seed, so both train to the same loss.

Colocated Python pickles functions by reference (module and name), so this package must be importable in the
sidecar: `pwdeploy sidecar build` copies this directory to /app, which is on the sidecar's PYTHONPATH
(`pwdeploy local run` puts sidecar.source_dir on PYTHONPATH the same way).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

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


def batch_rows(seed: int, step: int, batch: int, rows: slice) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` of the global batch of ``step``: what one device's shard holds."""
    x, y = examples(seed)
    start = batch_start(step, batch)
    selected = range(EXAMPLES)[start : start + batch][rows]
    return x[selected.start : selected.stop], y[selected.start : selected.stop]
