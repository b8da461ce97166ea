"""Host-side data for the data-parallel example, run next to the TPUs by JAX colocated Python.

Colocated Python pickles functions by reference (module and name), so this package must be importable in the
sidecar: `pwdeploy sidecar build` copies this directory to /app, which is on the sidecar's PYTHONPATH.
"""

from __future__ import annotations

import numpy as np

FEATURES = 16


def synthetic_batch(seed: int, step: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """One batch of (inputs, targets) for ``step``: the same for a given seed wherever it is computed."""
    rng = np.random.default_rng([seed, step])
    x = rng.standard_normal((batch, FEATURES), dtype=np.float32)
    teacher = np.random.default_rng(seed).standard_normal((FEATURES, 1), dtype=np.float32) / np.sqrt(FEATURES)
    y = np.tanh(x @ teacher).astype(np.float32)
    return x, y
