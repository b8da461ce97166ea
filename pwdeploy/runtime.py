"""Helpers for job code, the same locally and on Pathways.

Import cost matters here: this module imports only the standard library (and pwdeploy.identifiers, which imports
nothing) at import time; jax is imported by the functions that build device meshes, pathwaysutils only when the
job runs on Pathways.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pwdeploy import identifiers as ids  # names only, no imports of its own

# The data loader's helpers (pwdeploy.loader_workers), which job code reaches through this module.
from pwdeploy.loader_workers import DATA_WORKERS as DATA_WORKERS
from pwdeploy.loader_workers import MAX_PREFETCH_BUFFER as MAX_PREFETCH_BUFFER
from pwdeploy.loader_workers import SHM_HEADROOM as SHM_HEADROOM
from pwdeploy.loader_workers import SHM_PATH as SHM_PATH
from pwdeploy.loader_workers import SharedMemoryTooSmall as SharedMemoryTooSmall
from pwdeploy.loader_workers import cgroup_cpus as cgroup_cpus
from pwdeploy.loader_workers import close_data_loader as close_data_loader
from pwdeploy.loader_workers import data_workers as data_workers
from pwdeploy.loader_workers import prefetch_buffer as prefetch_buffer
from pwdeploy.loader_workers import prepare_data_workers as prepare_data_workers
from pwdeploy.loader_workers import shm_free_bytes as shm_free_bytes
from pwdeploy.loader_workers import shm_peak_bytes as shm_peak_bytes

if TYPE_CHECKING:
    from pwdeploy.stopping import Stop

T = TypeVar("T")

NUM_SLICES = ids.NUM_SLICES_ENV
RESTART_ATTEMPT = ids.RESTART_ATTEMPT_ENV
FAIL_AT_STEP = ids.FAIL_AT_STEP_ENV
RETRY_EXIT_CODE = ids.RETRY_EXIT_CODE
CHECKPOINT_DIR = ids.CHECKPOINT_DIR_ENV
PROFILE_DIR = ids.PROFILE_DIR_ENV


def restart_attempt(environ: Mapping[str, str] | None = None) -> int:
    """Which run of the job this is: 0 the first, 1 after the first restart, ... (``PWDEPLOY_RESTART_ATTEMPT``,
    set by `local run` and, on the cluster, from the JobSet's restart attempt; 0 when unset)."""
    env = os.environ if environ is None else environ
    value = env.get(RESTART_ATTEMPT, "").strip()
    try:
        return max(0, int(value)) if value else 0
    except ValueError:
        raise ValueError(f"{RESTART_ATTEMPT}={value!r} is not a whole number") from None


def step_done(step: int, environ: Mapping[str, str] | None = None) -> None:
    """Call once per training step, after step ``step`` (counted from 1) is done. A fault injector for proving
    restarts: with ``PWDEPLOY_FAIL_AT_STEP=N`` (`local run --fail-at-step N`) and on the first attempt only, the
    whole job process group is killed with SIGKILL when ``step`` reaches N, as a lost slice would end it: no
    clean-up runs, nothing but the one line on stderr that says so is flushed. `local run` starts the job in a
    process group of its own, so that pwdeploy survives to restart it. With ``PWDEPLOY_EVICT_AT_STEP=N``
    (`--evict-at-step N`) local run evicts the job from outside once step N is done. Otherwise this does nothing."""
    env = os.environ if environ is None else environ
    if ids.LOSE_SLICE_ENV in env or ids.RESTORE_SLICE_ENV in env:
        from pwdeploy import slices as emulated  # a local run's slice losses (--lose-slice), applied at their step

        emulated.step_done(step)
    if FAIL_AT_STEP in env or ids.EVICT_AT_STEP_ENV in env:
        from pwdeploy import stopping  # local run's faults at a step: --fail-at-step, --evict-at-step

        stopping.step_faults(step, env, first_attempt=restart_attempt(env) == 0)


def retry_on_slice_loss(main: Callable[[], T], *, slice_down: Callable[[Exception], bool] | None = None) -> T:
    """Run the training entry point ``main``; when it raises because a slice is gone, exit with
    ``RETRY_EXIT_CODE`` (75) instead, so that the JobSet restarts the job rather than fails it (docs/restarts.md).

    The program on the head usually dies of a lost slice before the slice's worker Job has failed, and the head's
    podFailurePolicy fails the JobSet on any other non-zero exit. Whether an error means a lost slice is
    pathwaysutils' judgement (``pathwaysutils.elastic.elastic.is_error_due_to_slice_down``: a JaxRuntimeError with
    DATA_LOSS, or DEADLINE_EXCEEDED, NOT_FOUND or INTERNAL), imported only once ``main`` has raised; ``slice_down``
    replaces it (tests, or a program's own rule). Any other error propagates: a bug fails the JobSet.
    """
    try:
        return main()
    except Exception as exc:
        if not (slice_down or _pathways_slice_down)(exc):
            raise
        import sys

        first_line = (str(exc).strip().splitlines() or [""])[0][:200]
        print(
            f"pwdeploy.runtime: a slice is down ({type(exc).__name__}: {first_line}); exiting with "
            f"{RETRY_EXIT_CODE} so that the JobSet restarts the job",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(RETRY_EXIT_CODE) from exc


def stop_on_sigterm(exit_code: int = ids.STOPPED_EXIT_CODE, *, margin: float | None = None) -> Stop:
    """Handle SIGTERM, the kubelet's stop (a Kueue eviction, a deleted pod): check ``stop.requested`` at each step
    boundary, save, then ``stop.exit()`` (143: requeued or restarted, never failed); a loop that does not get there
    exits by itself ``margin`` seconds (default: a tenth of the grace period, at most 3 s) before the grace period
    ends in SIGKILL (``pwdeploy.stopping``,
    docs/restarts.md "Saving on SIGTERM"). Call it from the main thread."""
    from pwdeploy import stopping

    return stopping.install(exit_code, margin=margin)


def _pathways_slice_down(error: Exception) -> bool:
    try:
        from pathwaysutils.elastic import elastic
    except ImportError:  # no pathwaysutils (or no jax): nothing here can tell a lost slice
        return False
    return bool(elastic.is_error_due_to_slice_down(error, log_traceback=False))


def checkpoint_dir(environ: Mapping[str, str] | None = None) -> str | None:
    """Where the job keeps its checkpoints: ``PWDEPLOY_CHECKPOINT_DIR``, from ``storage.checkpoints`` (a
    ``gs://`` location on the cluster, a folder beside the config in `local run`); None when the job has none."""
    return _location(CHECKPOINT_DIR, environ)


def profile_dir(environ: Mapping[str, str] | None = None) -> str | None:
    """Where the job writes profiler traces: ``PWDEPLOY_PROFILE_DIR``, from ``storage.profiles`` (a ``gs://``
    location on the cluster, a folder beside the config in `local run`); None when the job has none."""
    return _location(PROFILE_DIR, environ)


def mtc_options(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The arguments of Orbax's ``initialize_multi_tier_checkpointing`` for this job; None without MTC.

    With ``mtc.enabled``: the local directory (``PWDEPLOY_MTC_DIR``: the workers' MTC ramdisk on the cluster, a
    tmpfs folder beside a stand-in of the MTC driver in `local run`), the job's one backup interval, colocated
    Python (the Pathways path), and the run's name: ``JOBSET_NAME``, Orbax's own default, else the job's name (the
    JobSet's), the name the MTC driver keeps the job's checkpoints under across restarts; in `local run`, one node
    (``num_slices=1`` and one device: ``_one_local_node``)::

        initialization.initialize_multi_tier_checkpointing(**runtime.mtc_options())
    """
    env = os.environ if environ is None else environ
    directory = env.get(ids.MTC_DIR_ENV, "").strip()
    if not directory:
        return None
    options: dict[str, Any] = {"local_checkpoint_directory": Path(directory), "use_colocated_python": True}
    run_name = env.get("JOBSET_NAME") or env.get(ids.JOB_NAME_ENV)  # the JobSet's name, which Orbax's default reads
    if run_name:
        options["run_name"] = run_name
    for key, name in (
        ("backup_interval_minutes", ids.MTC_BACKUP_MINUTES_ENV),
        ("backup_interval_steps", ids.MTC_BACKUP_STEPS_ENV),
    ):
        value = env.get(name, "").strip()
        if value:
            options[key] = int(value)
    if env.get(ids.LOCAL_DEVICES_ENV) and not on_pathways(env):
        options.update(_one_local_node())
    return options


def _one_local_node() -> dict[str, Any]:
    """In `local run`, Orbax's MTC set-up for one node. JAX's CPU backend runs a colocated-Python function once, in
    the job's process, over every emulated device (jax ``colocated_python/func.py`` ``fallback_call``), where
    Pathways runs it on each worker's sidecar with that worker's shard; Orbax 0.12.8 groups the devices into workers
    by their ``slice_index`` (which the emulated devices report) and expects one shard of its worker-rank array per
    call (``pathways_topology.worker_rank_from_array``: "Expected exactly one addressable logical worker rank
    shard"). One device and one slice make the one call one worker's, and its ``replicator.yaml`` one node's, that of
    the one tmpfs the stand-in of the MTC driver serves (the replication to peers is not emulated: docs/local.md)."""
    import jax

    return {"num_slices": 1, "devices": jax.devices()[:1]}


def _location(name: str, environ: Mapping[str, str] | None) -> str | None:
    value = (os.environ if environ is None else environ).get(name, "").strip()
    return value or None


def on_pathways(environ: Mapping[str, str] | None = None) -> bool:
    """Whether JAX is pointed at the Pathways IFRT proxy (``JAX_PLATFORMS`` names ``proxy``)."""
    env = os.environ if environ is None else environ
    return "proxy" in env.get("JAX_PLATFORMS", "").split(",")


def initialize() -> bool:
    """Call ``pathwaysutils.initialize()`` on Pathways; locally do nothing (its import alone costs ~1.5 s).

    Call it before the first use of jax devices. Returns whether Pathways was initialised.
    """
    if not on_pathways():
        return False
    import pathwaysutils

    pathwaysutils.initialize()
    return True


def elastic_slices(environ: Mapping[str, str] | None = None) -> int:
    """Slices the job may lose and go on training (``PWDEPLOY_ELASTIC_SLICES``, from ``tpu.elastic_slices``; 0 when
    unset): with more than 0, wrap the training loop in the elastic manager's ``elastic_retry``."""
    env = os.environ if environ is None else environ
    value = env.get(ids.ELASTIC_SLICES_ENV, "").strip()
    try:
        return max(0, int(value)) if value else 0
    except ValueError:
        raise ValueError(f"{ids.ELASTIC_SLICES_ENV}={value!r} is not a whole number") from None


def elastic_manager() -> Any:
    """pathwaysutils' elastic ``Manager`` over every device grouped into slices: by ``device.slice_index`` on
    Pathways, by the layout a local run supplies on emulated devices (which have none). In a local run with
    ``--lose-slice``, the emulation of the loss starts here: build the manager before jitting the step."""
    from pwdeploy import slices as emulated

    return emulated.elastic_manager()


def active_mesh(manager: Any, axis: str = "data", slice_axis: str = "slice") -> Any:
    """The (active slices x devices per slice) ``Mesh`` of an elastic ``manager``, axes ``(slice_axis, axis)``:
    the mesh to rebuild at the start of every elastic attempt, over the slices active then."""
    import numpy as np
    from jax.sharding import Mesh

    active = sorted(manager.active_slice_indices)
    devices = [device for index in active for device in manager.slice_to_devices[index]]
    return Mesh(np.array(devices).reshape(len(active), len(devices) // len(active)), (slice_axis, axis))


def data_mesh(axis: str = "data", *, slices: bool = False, slice_axis: str = "slice") -> Any:
    """A ``jax.sharding.Mesh`` over every device for data parallelism.

    With ``slices=True`` the mesh is (slices x devices per slice) with axes ``(slice_axis, axis)``: the slice
    count comes from the devices' ``slice_index`` on multi-slice TPUs, else from ``PWDEPLOY_NUM_SLICES``
    (locally; when the emulated devices do not split into that many slices, into as many as they do, so one
    device gives a 1 x 1 mesh).
    """
    import jax
    import numpy as np
    from jax.sharding import Mesh

    devices = sorted(jax.devices(), key=lambda d: (getattr(d, "slice_index", 0) or 0, d.id))
    if not slices:
        return Mesh(np.array(devices), (axis,))
    count = slice_count(devices)
    if len(devices) % count and None in {getattr(d, "slice_index", None) for d in devices}:
        # A local run emulating fewer devices than the target (``--devices 1``): as many whole slices as fit.
        count = math.gcd(len(devices), count)
    if len(devices) % count:
        raise ValueError(f"{len(devices)} devices do not split into {count} slices of equal size")
    return Mesh(np.array(devices).reshape(count, len(devices) // count), (slice_axis, axis))


def slice_count(devices: list[Any], environ: Mapping[str, str] | None = None) -> int:
    """Slices among ``devices``: distinct ``slice_index`` values where devices have one, else the env."""
    indices = {getattr(d, "slice_index", None) for d in devices}
    if None not in indices:
        return len(indices)
    env = os.environ if environ is None else environ
    value = env.get(NUM_SLICES, "1")
    try:
        count = int(value)
    except ValueError:
        raise ValueError(f"{NUM_SLICES}={value!r} is not a whole number") from None
    return max(1, count)
