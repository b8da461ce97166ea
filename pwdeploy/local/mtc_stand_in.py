"""A stand-in of GKE's multi-tier checkpointing (MTC) driver for `local run`, over a tmpfs standing in for the
node's ramdisk, so that a program's Orbax MTC set-up runs here as on the cluster instead of waiting 600 s for a
driver that is not there.

What the driver does that a program sees, from the side that talks to it (orbax-checkpoint 0.12.8
``experimental/emergency/multi_tier_checkpointing/initialization.py``; Google's resiliency library reads the same
files for PyTorch): Orbax writes ``replicator.yaml`` (``job-name``, ``framework``, ``assume-data-parallelism``,
``node-rank``, ``nodes``, ``peer-ranks``, ``backup-interval-minutes`` or ``-steps``) into the local directory and
waits for it to disappear (consumed), then reads ``replicator.errors`` (logged) and ``replicator.failed`` (fatal:
"Replicator fatal errors: ..."), then waits for a restore marker ``<job>-s<step>-n<node>-w<worker>.restore``: a
zero-sized file when there is no checkpoint (step 0), else a symlink to the step the driver hands back, which Orbax
renames to ``<step>``. The ReplicatorCheckpointManager never deletes steps (``max_to_keep=None``: "the period at
which [checkpoints] are garbage-collected, must be controlled by the replicator service").

So the stand-in watches the folder (every ``POLL_SECONDS``), checks a ``replicator.yaml`` as the driver would read
it (a missing key, two intervals or none, a rank out of range: ``replicator.failed`` with the reason), consumes it,
and hands back the newest complete step it holds (kept in ``RETAINED`` inside the same tmpfs, linked relatively so
the link resolves inside the job's namespace too) or says there is none; it keeps the newest ``KEEP`` steps. What it
does not do: replicate to peer nodes, back up to Cloud Storage (the CheckpointConfiguration's bucket), or restore
from either when a node's ramdisk is lost; its tmpfs is the machine's /dev/shm, not the CheckpointConfiguration's
``inMemoryVolumeSize``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pwdeploy.identifiers import MTC_DIR_ENV

if TYPE_CHECKING:
    from pwdeploy.config import JobConfig
    from pwdeploy.local.unshare import Private

SHM = Path("/dev/shm")
STATE = ".pwdeploy"  # beside the config, as local run's other stand-ins
REPLICATOR = "replicator.yaml"
FAILED = "replicator.failed"
RETAINED = ".pwdeploy-mtc-retained"
POLL_SECONDS = 0.05
KEEP = 2  # complete steps kept in the ramdisk
REQUIRED = ("job-name", "framework", "node-rank", "nodes")
INTERVALS = ("backup-interval-minutes", "backup-interval-steps")
_STEP = re.compile(r"[0-9]+")


def read_request(text: str) -> dict[str, Any] | str:
    """The replicator.yaml Orbax wrote, or why the driver would refuse it."""
    import yaml

    try:
        request = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return f"replicator.yaml is not YAML: {str(exc).splitlines()[0]}"
    if not isinstance(request, dict):
        return "replicator.yaml is not a mapping"
    missing = [key for key in REQUIRED if request.get(key) in (None, "")]
    if missing:
        return f"replicator.yaml lacks {', '.join(missing)}"
    given = [key for key in INTERVALS if request.get(key) is not None]
    if len(given) != 1:
        return f"replicator.yaml must give exactly one of {', '.join(INTERVALS)}, not {len(given)}"
    nodes, rank = request["nodes"], request["node-rank"]
    if not (isinstance(nodes, int) and isinstance(rank, int) and 0 <= rank < nodes):
        return f"replicator.yaml: node-rank {rank!r} is not a rank of {nodes!r} nodes"
    return request


def steps(directory: Path) -> list[int]:
    """The complete steps in ``directory``, oldest first (Orbax renames a step's folder to its number once it is
    written; a symlink is a step handed back earlier)."""
    with contextlib.suppress(OSError):
        return sorted(int(entry.name) for entry in os.scandir(directory) if _STEP.fullmatch(entry.name))
    return []


def _remove(step_dir: Path) -> None:
    if step_dir.is_symlink():
        target = step_dir.resolve()
        step_dir.unlink()
        shutil.rmtree(target, ignore_errors=True)
    else:
        shutil.rmtree(step_dir, ignore_errors=True)


def hand_back(directory: Path, request: dict[str, Any]) -> int:
    """Write the restore marker for ``request``: the newest step (moved into RETAINED and linked), or the
    zero-sized no-checkpoint marker; older steps are dropped. The step handed back (0: none)."""
    found = steps(directory)
    marker = f"{request['job-name']}-s{{step}}-n{request['node-rank']}-w0.restore"
    for old in found[:-1]:
        _remove(directory / str(old))
    if not found:
        (directory / marker.format(step=0)).write_bytes(b"")
        return 0
    step = found[-1]
    retained = directory / RETAINED
    retained.mkdir(exist_ok=True)
    kept = retained / str(step)
    current = directory / str(step)
    if current.is_symlink():
        current.unlink()  # handed back before: its data is already in RETAINED
    else:
        shutil.rmtree(kept, ignore_errors=True)
        os.replace(current, kept)
    os.symlink(os.path.join(RETAINED, str(step)), directory / marker.format(step=step))
    return step


def collect(directory: Path) -> None:
    """Keep the newest KEEP complete steps, as the driver garbage-collects for the ReplicatorCheckpointManager."""
    for old in steps(directory)[:-KEEP]:
        _remove(directory / str(old))


def serve_once(directory: Path) -> str | None:
    """One look at ``directory``: a replicator.yaml there is answered and consumed; what happened, or None."""
    request_file = directory / REPLICATOR
    try:
        text = request_file.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        collect(directory)
        return None
    request = read_request(text)
    if isinstance(request, str):
        (directory / FAILED).write_text(request + "\n", encoding="utf-8")
        said = f"refused replicator.yaml: {request}"
    else:
        step = hand_back(directory, request)
        said = f"handed back step {step}" if step else "found no checkpoint to hand back"
    request_file.unlink(missing_ok=True)  # consumed: Orbax reads the answer once the file is gone
    return said


@contextlib.contextmanager
def serving(directory: Path, say: Any) -> Iterator[None]:
    """Answer every replicator.yaml written into ``directory`` while the block runs (a daemon thread)."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(POLL_SECONDS):
            with contextlib.suppress(OSError):
                said = serve_once(directory)
                if said is not None:
                    say(f"pwdeploy local: MTC stand-in: {said}")

    thread = threading.Thread(target=loop, name="pwdeploy-mtc-stand-in", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextlib.contextmanager
def standing_in(job: JobConfig, env: dict[str, str], private: Private | None, say: Any) -> Iterator[None]:
    """With mtc.enabled: a tmpfs folder for the whole run (its attempts share it, as the pods of a restarted job
    find the node's ramdisk), where the job's PWDEPLOY_MTC_DIR is, and the stand-in serving it; removed at the end.
    In namespaces of its own the job sees it bound over a folder under .pwdeploy/ (its /dev/shm is private);
    without them it is that folder, on disk (the machine's /dev/shm counts against main.shm_size there)."""
    if not job.mtc.enabled:
        yield
        return
    import tempfile

    from pwdeploy.local.unshare import RAMDISK_SOURCE_ENV, RAMDISK_TARGET_ENV

    state = job.base_dir / STATE
    state.mkdir(parents=True, exist_ok=True)
    target = Path(tempfile.mkdtemp(prefix="mtc-ramdisk-", dir=state))
    source = Path(tempfile.mkdtemp(prefix="pwdeploy-mtc-", dir=SHM)) if private is not None else target
    env[MTC_DIR_ENV] = str(target)
    if private is not None:
        env |= {RAMDISK_SOURCE_ENV: str(source), RAMDISK_TARGET_ENV: str(target)}
    where = "a tmpfs (a folder of the machine's /dev/shm)" if private is not None else "a folder on disk, not a tmpfs"
    say(f"pwdeploy local: MTC ramdisk (mtc.ramdisk_dir) is {target}: {where}, served by a stand-in of the MTC driver")
    try:
        with serving(source, say):
            yield
    finally:
        shutil.rmtree(source, ignore_errors=True)
        shutil.rmtree(target, ignore_errors=True)
