"""Multi-tier checkpoints of the example (``train.py --mtc``, a job with ``mtc.enabled``): frequent saves to the TPU
nodes' ramdisk, which GKE's MTC driver replicates to peer nodes and backs up to Cloud Storage, and a restart that
restores from the ramdisk instead of the bucket.

The set-up is Orbax's own, on Pathways as MaxText does it on a single controller:
``initialize_multi_tier_checkpointing`` with ``use_colocated_python=True`` (``pwdeploy.runtime.mtc_options()`` gives
the job's directory and backup interval) writes ``replicator.yaml`` for the MTC driver from a colocated-Python
function on each worker and waits for the driver to hand back the newest step it holds, renamed to
``<directory>/<step>``; the saves go through ``ReplicatorCheckpointManager(..., use_colocated_python=True)``, which
writes on the workers' sidecars. It keeps one item, ``state`` (the manager accepts only ``state`` and ``dataset`` in
colocated mode): the parameters and the step's loss. The Grain loader resumes at the restored step by index (the
same batches follow from the step alone).

In `local run` the set-up is the same call, for real: the colocated-Python function runs in the job's process on the
emulated CPU devices, against pwdeploy's stand-in of the MTC driver over a tmpfs (docs/local.md). Orbax refuses the
ReplicatorCheckpointManager's colocated mode without a Pathways backend ("Pathways colocated Python MTC requires a
Pathways backend"), so locally the saves go through Orbax's CheckpointManager into the same directory, in the same
layout (zarr2, no OCDBT), and without garbage collection: the driver (here, the stand-in) keeps what it keeps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpointing import Restored, WithoutOcdbtMergeNotice

from pwdeploy import runtime

DEFAULT_EVERY = 10  # steps between local saves: cheap in a ramdisk, so far more often than to a bucket


class MtcCheckpoints:
    """Saves every ``every`` steps (and the last) to the MTC directory; the restore of the step the driver handed
    back. Same interface as checkpointing.Checkpoints."""

    def __init__(self, options: dict[str, Any], steps: int, *, every: int, mesh: Any) -> None:
        import logging

        from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import initialization

        logging.getLogger("absl").addFilter(WithoutOcdbtMergeNotice())  # Orbax logs through absl
        initialization.initialize_multi_tier_checkpointing(**options)  # the driver hands back its newest step
        self.directory: Path = options["local_checkpoint_directory"]
        self.steps, self.every = steps, every
        self._manager = _manager(self.directory, every, mesh)

    def restore(self, like: Any) -> Restored | None:
        """The newest step in the directory (the one the driver handed back), placed like ``like``; None if none."""
        import jax
        import jax.numpy as jnp
        import orbax.checkpoint as ocp

        step = self._manager.latest_step()
        if step is None:
            return None
        replicated = jax.tree.leaves(like)[0].sharding
        state = {"params": like, "loss": jax.device_put(jnp.float32(0), replicated)}
        abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), state)
        restore_args = ocp.checkpoint_utils.construct_restore_args(abstract)
        found = self._manager.restore(
            step, args=ocp.args.Composite(state=ocp.args.PyTreeRestore(item=abstract, restore_args=restore_args))
        )["state"]
        return Restored(step, found["params"], float(found["loss"]), None)

    def due(self, step: int) -> bool:
        return step == self.steps or step % self.every == 0

    def save(self, step: int, params: Any, loss: float, data_state: Any) -> None:
        import jax
        import jax.numpy as jnp
        import orbax.checkpoint as ocp

        del data_state  # the loader resumes from the step
        replicated = jax.tree.leaves(params)[0].sharding
        state = {"params": params, "loss": jax.device_put(jnp.float32(loss), replicated)}
        self._manager.save(step, args=ocp.args.Composite(state=ocp.args.PyTreeSave(state)), force=True)

    def close(self) -> None:
        self._manager.wait_until_finished()
        self._manager.close()


def _manager(directory: Path, every: int, mesh: Any) -> Any:
    """On Pathways the ReplicatorCheckpointManager in colocated mode; locally Orbax's CheckpointManager (above)."""
    if runtime.on_pathways():
        from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import (
            replicator_checkpoint_manager as rcm,
        )

        options = rcm.ReplicatorCheckpointManagerOptions(save_interval_steps=every, use_colocated_python=True)
        return rcm.ReplicatorCheckpointManager(directory, options, global_mesh=mesh)
    import orbax.checkpoint as ocp

    return ocp.CheckpointManager(
        directory,
        item_handlers={"state": ocp.PyTreeCheckpointHandler(use_ocdbt=False, use_zarr3=False)},
        options=ocp.CheckpointManagerOptions(save_interval_steps=every, max_to_keep=None),
    )
