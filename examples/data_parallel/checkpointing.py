"""Checkpoints of the example: saved every N steps with Orbax, the latest complete one restored on start.

A checkpoint is one Orbax step directory, ``<PWDEPLOY_CHECKPOINT_DIR>/<step>/``, with two items:

- ``params``: the parameters, replicated over every device;
- ``progress``: JSON: the step, that step's loss, and the data loader's state (the Grain iterator's
  ``get_state()``; None for the colocated-Python loader, whose batches are a function of the step).

Why a restarted job never reads half a checkpoint: Orbax writes a step into a temporary directory and makes it
visible only when every item is written (a rename on a file system, a commit file on GCS, where renames are not
atomic); ``all_steps()`` lists only finished steps, and ``cleanup_tmp_directories`` removes what a killed save
left behind. Saves are asynchronous: ``save`` returns once the arrays are copied off the devices and the files are
written on a background thread, overlapping the next steps.

When to save is Orbax's save-decision policy, by time unless a step interval is asked for: at least ``seconds``
after the last save and never while a save is still being written (``ContinuousCheckpointingPolicy``), and always
the last step (``SpecificStepsPolicy``). A save stalls training for a while (the device-to-host copy, Orbax's
bookkeeping, the writer competing for the host): an interval of at least ten times that keeps the overhead under
10% whatever a step costs, where a step interval tuned on one model is wrong on the next (README: docs/checkpoints.md).

A checkpoint that is listed but unreadable (a truncated or missing file) is skipped with a warning and the one
before it is used: up to ``KEEP`` are kept for that reason.

On Pathways (``ENABLE_PATHWAYS_PERSISTENCE=1``, which pwdeploy sets), pathwaysutils.initialize() makes Orbax write
jax.Arrays through the Pathways persistence handler, which refuses OCDBT ("OCDBT not supported for Pathways."),
writes zarr2 (``use_zarr3=False``) and restores only NamedSharding targets (orbax-checkpoint
``orbax/checkpoint/_src/serialization/cloud_pathways_array_handler.py``); MaxText asks for the same two settings
on Pathways (``checkpoint_storage_use_ocdbt=False checkpoint_storage_use_zarr3=False``,
AI-Hypercomputer/maxtext ``docs/tutorials/posttraining/sft_on_multi_host.md``). This module uses them everywhere,
so a checkpoint written by a local run has the layout the cluster reads and writes.
"""

from __future__ import annotations

import datetime
import logging
import sys
from typing import Any, NamedTuple

KEEP = 3  # finished checkpoints kept: the latest, and earlier ones to fall back on if it is unreadable
DEFAULT_SECONDS = 5  # between saves: more than 10 x the ~0.1-0.4 s a save of the example stalls its steps


class WithoutOcdbtMergeNotice(logging.Filter):
    """Orbax warns after every save that it found no OCDBT files to merge: true, since OCDBT is off on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Skipping merge of OCDBT checkpoints" not in record.getMessage()


class Restored(NamedTuple):
    step: int
    params: Any
    loss: float
    data_state: Any  # the loader's state at ``step`` (None: the loader resumes from the step alone)


class Checkpoints:
    """Periodic asynchronous saves and the restore of the latest readable checkpoint under ``directory``."""

    def __init__(self, directory: str, steps: int, *, every: int | None = None, seconds: int = DEFAULT_SECONDS) -> None:
        """Saves under ``directory``: every ``every`` steps when given (0: only the last), else every ``seconds``
        at least; always step ``steps``, the last."""
        import orbax.checkpoint as ocp

        self.directory, self.steps = directory, steps
        self._ocp = ocp
        logging.getLogger("absl").addFilter(WithoutOcdbtMergeNotice())  # Orbax logs through absl
        self._unreadable: set[int] = set()
        self._manager = ocp.CheckpointManager(
            directory,
            item_handlers={
                "params": ocp.PyTreeCheckpointHandler(use_ocdbt=False, use_zarr3=False),
                "progress": ocp.JsonCheckpointHandler(),
            },
            options=ocp.CheckpointManagerOptions(
                max_to_keep=KEEP,
                cleanup_tmp_directories=True,
                enable_async_checkpointing=True,
                save_decision_policy=save_policy(steps, every, seconds),
            ),
        )

    def restore(self, like: Any) -> Restored | None:
        """The latest readable checkpoint, its arrays placed like ``like`` (a tree of jax.Arrays); None if
        there is none. Unreadable ones are skipped, newest first, each with a warning on stderr."""
        import jax

        abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), like)
        for step in sorted(self._manager.all_steps(), reverse=True):
            try:
                return self._read(step, abstract)
            except Exception as error:  # any unreadable checkpoint: fall back to the one before
                # (Orbax then abandons the other arrays' reads: Python may report those at exit, harmlessly.)
                self._unreadable.add(step)
                first_line = (str(error).strip().splitlines() or [""])[0][:200]
                print(
                    f"train.py: warning: checkpoint {step} in {self.directory} is unreadable "
                    f"({type(error).__name__}: {first_line}); trying the one before it (this one is "
                    "replaced when training saves that step again)",
                    file=sys.stderr,
                    flush=True,
                )
        return None

    def _read(self, step: int, abstract: Any) -> Restored:
        ocp = self._ocp
        restore_args = ocp.checkpoint_utils.construct_restore_args(abstract)
        found = self._manager.restore(
            step,
            args=ocp.args.Composite(
                params=ocp.args.PyTreeRestore(item=abstract, restore_args=restore_args),
                progress=ocp.args.JsonRestore(),
            ),
        )
        progress = found["progress"]
        if progress.get("step") != step:
            raise ValueError(f"its progress record says step {progress.get('step')!r}")
        return Restored(step, found["params"], float(progress["loss"]), progress.get("data"))

    def due(self, step: int) -> bool:
        """Whether ``step`` is to be saved, as the save-decision policy says (ask once per step); an unreadable
        checkpoint's step is saved again (Orbax alone would not save a step it lists)."""
        return step in self._unreadable or bool(self._manager.should_save(step))

    def save(self, step: int, params: Any, loss: float, data_state: Any) -> None:
        """Start saving ``step`` (returns once the arrays are off the devices; the files are written behind)."""
        ocp = self._ocp
        if step in self._unreadable:  # replaced only now, when a good checkpoint of that step is on its way
            self._manager.delete(step)
            self._unreadable.discard(step)
        progress = {"step": step, "loss": loss, "data": data_state}
        self._manager.save(
            step,
            args=ocp.args.Composite(params=ocp.args.PyTreeSave(params), progress=ocp.args.JsonSave(progress)),
            force=True,  # ``due`` decided
        )

    def close(self) -> None:
        """Wait for the save in flight to be finished (committed), then release the manager."""
        self._manager.wait_until_finished()
        self._manager.close()


def save_policy(steps: int, every: int | None, seconds: int) -> Any:
    """Orbax's decision of which steps to save: the last step, and every ``every`` steps (0: no other) or, with
    ``every`` None, the first step at least ``seconds`` after the last save (none while one is being written)."""
    from orbax.checkpoint import checkpoint_managers as policies

    last = policies.SpecificStepsPolicy(steps=(steps,))
    if every == 0:
        return last
    if every is not None:
        return policies.AnySavePolicy([policies.FixedIntervalPolicy(every), last])
    continuous = policies.ContinuousCheckpointingPolicy(minimum_interval_secs=seconds)
    return policies.AnySavePolicy([NotBefore(continuous, seconds), last])


class NotBefore:
    """An Orbax save-decision policy: ``policy``'s decision, but no save in the first ``seconds`` of this run.

    The continuous policy saves at once when the last checkpoint is older than its interval, i.e. at the first step
    of every start (a fresh one, or a restart that just restored that state): a save that holds nothing new.
    """

    def __init__(self, policy: Any, seconds: int) -> None:
        self.policy, self.interval = policy, datetime.timedelta(seconds=seconds)
        self.started: datetime.datetime | None = None  # the time of this run's first step, as Orbax reports it

    def should_save(self, step: Any, previous_steps: Any, *, context: Any) -> bool:
        self.started = self.started or step.time
        if step.time - self.started < self.interval:
            return False
        return bool(self.policy.should_save(step, previous_steps, context=context))
