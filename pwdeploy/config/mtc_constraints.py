"""Multi-tier checkpointing's config constraints: it needs the colocated-Python sidecar, its ramdisk directory is
checked as Cluster Toolkit checks ``--gke-mtc-ramdisk-dir``, and exactly one backup interval reaches Orbax.

Sources: Cluster Toolkit ``pkg/orchestrator/gke/storage.go`` (``ValidateRamdiskDir``, ``checkReservedSystemPath``,
``normalizeMountPath``: absolute, not ``/``, not one of or under the reserved system folders, not another mount's
destination) and orbax-checkpoint 0.12.8 ``experimental/emergency/multi_tier_checkpointing/initialization.py``
(``_create_replicator_file`` refuses both intervals; ``initialize_multi_tier_checkpointing`` takes 30 minutes when
neither is given). Orbax's Pathways path runs the replicator handshake and the local saves in colocated-Python
functions (``use_colocated_python=True``), which run in the workers' sidecar: without it there is nothing to run
them.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from pwdeploy import identifiers as ids
from pwdeploy.config.model import MtcConfig
from pwdeploy.errors import ConfigError

NEEDS_SIDECAR_FIELDS = ("mtc.enabled", "sidecar.image", "sidecar.repository")
RAMDISK_FIELDS = ("mtc.enabled", "mtc.ramdisk_dir")
INTERVAL_FIELDS = ("mtc.enabled", "mtc.backup_interval_minutes", "mtc.backup_interval_steps")
BUCKET_FIELDS = ("mtc.enabled", "mtc.backup_bucket")
DEFAULT_BACKUP_MINUTES = 30  # Orbax's, when neither interval is given
RESERVED = ("/dev", "/proc", "/sys", "/etc", "/bin", "/sbin", "/usr", "/lib", "/lib64")  # Cluster Toolkit's list
# What else the worker pod mounts, by where (pwdeploy.manifests.worker and .variants).
WORKER_MOUNTS = {ids.SHM_DIR: "the workers' /dev/shm", ids.SIDECAR_SHM_DIR: "the sidecar's shared memory"}


def needs_sidecar(parsed: Mapping[str, Any]) -> None:
    if parsed["mtc.enabled"] and parsed["sidecar.image"] is None and parsed["sidecar.repository"] is None:
        raise ConfigError(
            "mtc.enabled",
            "needs the colocated-Python sidecar: on Pathways, Orbax's multi-tier checkpointing writes the MTC "
            "driver's replicator.yaml and the local checkpoints from colocated-Python functions, which run in the "
            "workers' sidecar",
            hint="set sidecar.image (--sidecar-image) or sidecar.repository to build one (pwdeploy sidecar build; "
            "docs/checkpoints.md)",
        )


def ramdisk_problem(directory: str) -> str | None:
    """Why ``directory`` cannot hold the MTC volume in a worker pod; None when it can."""
    if not directory.startswith("/"):
        return f"{directory!r} must be an absolute path (e.g. /tmp/mtc_checkpoints)"
    clean = posixpath.normpath(directory.replace("\\", "/"))
    clean = "/" + clean.lstrip("/")  # normpath keeps a leading //, which names the same folder
    if clean == "/":
        return "cannot be the root directory '/'"
    for reserved in RESERVED:
        if clean == reserved or clean.startswith(reserved + "/"):
            return f"{directory!r} is a system directory or inside one ({reserved})"
    if clean in WORKER_MOUNTS:
        return f"{directory!r} is already where the workers mount {WORKER_MOUNTS[clean]}"
    return None


def ramdisk_dir(parsed: Mapping[str, Any]) -> None:
    if not parsed["mtc.enabled"]:
        return
    problem = ramdisk_problem(parsed["mtc.ramdisk_dir"])
    if problem is not None:
        raise ConfigError("mtc.ramdisk_dir", problem, hint="use a folder of its own, e.g. /tmp/mtc_checkpoints")


def backup_interval(parsed: Mapping[str, Any]) -> dict[str, Any] | None:
    """Exactly one interval: both is an error (Orbax raises it at start-up, on every worker), neither is Orbax's
    default of 30 minutes written out, so the program and the docs read the same number."""
    if not parsed["mtc.enabled"]:
        return None
    minutes, steps = parsed["mtc.backup_interval_minutes"], parsed["mtc.backup_interval_steps"]
    if minutes is not None and steps is not None:
        raise ConfigError(
            "mtc.backup_interval_steps",
            f"is set ({steps}) together with mtc.backup_interval_minutes ({minutes}); Orbax refuses both "
            '("Exactly one of backup_interval_minutes or backup_interval_steps must be specified.")',
            hint="keep one of them",
        )
    if minutes is None and steps is None:
        return {"mtc.backup_interval_minutes": DEFAULT_BACKUP_MINUTES}
    return None


def backup_bucket(parsed: Mapping[str, Any]) -> None:
    """A bucket, as the CheckpointConfiguration names one (cloudStorageBucketName), for a job with MTC."""
    bucket = parsed["mtc.backup_bucket"]
    if bucket is None:
        return
    if not parsed["mtc.enabled"]:
        raise ConfigError("mtc.backup_bucket", "is checked only for a job with mtc.enabled (--mtc); remove it")
    if bucket.prefix:
        raise ConfigError(
            "mtc.backup_bucket",
            f"{bucket.uri!r} names a folder; the CheckpointConfiguration names a bucket",
            hint=f"gs://{bucket.bucket}",
        )


def unused_without_mtc(mtc: MtcConfig) -> str | None:
    """A warning for MTC settings of a job without ``mtc.enabled``: they render nothing (no MTC volume, no
    ``PWDEPLOY_MTC_DIR``), so a config that forgot ``enabled: true`` would run without multi-tier checkpointing and
    say nothing; ``mtc.enabled: false`` keeps them for later, so they are not an error."""
    if mtc.enabled:
        return None
    set_fields = [
        f"mtc.{name}"
        for name, value in (
            ("ramdisk_dir", None if mtc.ramdisk_dir == MtcConfig().ramdisk_dir else mtc.ramdisk_dir),
            ("backup_interval_minutes", mtc.backup_interval_minutes),
            ("backup_interval_steps", mtc.backup_interval_steps),
        )
        if value is not None
    ]
    if not set_fields:
        return None
    return (
        f"{', '.join(set_fields)} {'is' if len(set_fields) == 1 else 'are'} set but mtc.enabled is false: the job has "
        "no multi-tier checkpointing (no MTC volume on the workers, no PWDEPLOY_MTC_DIR); set mtc.enabled (--mtc) to "
        "use it"
    )
