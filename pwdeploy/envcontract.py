"""The environment a job's program gets: one source of truth for the cluster and for `local run`.

``job_env`` is what pwdeploy promises the user's program on both sides (data-loader worker count, slice
shape, storage locations, user env). One more variable of the contract is not a fixed value:
``PWDEPLOY_RESTART_ATTEMPT``, which run of the job this is, comes from the pod's JobSet label on the cluster
(the manifests read it through the downward API) and from each restart of `local run`.
``proxy_env`` is what makes JAX talk to Pathways, including the client-proxy transfer directory; local runs
leave it out (there is no proxy to share memory with).
"""

from __future__ import annotations

from pwdeploy import identifiers as ids
from pwdeploy.config import JobConfig
from pwdeploy.identifiers import PROXY_PORT, TRANSFER_DIR

DATA_WORKERS = ids.DATA_WORKERS_ENV


def job_env(job: JobConfig, *, hlo_dump: str | None = None, mtc_dir: str | None = None) -> dict[str, str]:
    """pwdeploy's env contract, in a stable order. ``hlo_dump`` replaces the GCS HLO location and ``mtc_dir`` the
    workers' MTC ramdisk (local runs)."""
    tpu = job.tpu
    env = {
        ids.JOB_NAME_ENV: job.name,
        DATA_WORKERS: str(job.main.data_workers),
        ids.TPU_TYPE_ENV: tpu.slice.type_name,
        ids.TPU_TOPOLOGY_ENV: tpu.slice.topology,
        ids.NUM_SLICES_ENV: str(tpu.slices),
        ids.CHIPS_PER_SLICE_ENV: str(tpu.slice.chips),
        ids.NUM_DEVICES_ENV: str(tpu.total_chips),
        ids.PATHWAYS_VERSION_ENV: job.pathways_version,
        ids.TERMINATION_GRACE_ENV: str(grace_seconds(job)),
    }
    if tpu.elastic_slices:  # the program wraps its loop in the elastic manager's retry (pwdeploy.runtime)
        env[ids.ELASTIC_SLICES_ENV] = str(tpu.elastic_slices)
    storage = job.storage
    optional = {
        ids.HLO_DUMP_DIR_ENV: hlo_dump or (storage.hlo_dump.uri if storage.hlo_dump else None),
        ids.PROFILE_DIR_ENV: storage.profiles.uri if storage.profiles else None,
        ids.CHECKPOINT_DIR_ENV: storage.checkpoints.uri if storage.checkpoints else None,
    }
    env.update({k: v for k, v in optional.items() if v is not None})
    env.update(mtc_env(job, mtc_dir))
    env.update(dict(job.main.env))
    return env


def mtc_env(job: JobConfig, directory: str | None = None) -> dict[str, str]:
    """With mtc.enabled: what a program passes to Orbax's ``initialize_multi_tier_checkpointing`` (the local
    directory, the backup interval); its ``run_name`` defaults to ``JOBSET_NAME``, which main's env holds."""
    mtc = job.mtc
    if not mtc.enabled:
        return {}
    optional = {
        ids.MTC_BACKUP_MINUTES_ENV: mtc.backup_interval_minutes,
        ids.MTC_BACKUP_STEPS_ENV: mtc.backup_interval_steps,
    }
    return {ids.MTC_DIR_ENV: directory or mtc.ramdisk_dir, **{k: str(v) for k, v in optional.items() if v is not None}}


def grpc_credentials_env(job: JobConfig) -> dict[str, str]:
    """With head.insecure_grpc: what turns ALTS off on the IFRT proxy and on its client (the two must agree)."""
    return {ids.INSECURE_GRPC_ENV: "true"} if job.head.insecure_grpc else {}


DEFAULT_GRACE_SECONDS = 30  # Kubernetes' terminationGracePeriodSeconds when a pod sets none


def grace_seconds(job: JobConfig) -> int:
    """The pods' terminationGracePeriodSeconds: scheduling.termination_grace_seconds, else Kubernetes' default."""
    seconds = job.scheduling.termination_grace_seconds
    return seconds if seconds is not None else DEFAULT_GRACE_SECONDS


TRANSFER_DIRECTORY_ENV = "IFRT_PROXY_LARGE_TRANSFER_OPTIMIZATION_DIRECTORY"  # read by client and proxy
TRANSFER_THRESHOLD_ENV = "IFRT_PROXY_LARGE_TRANSFER_THRESHOLD"  # bytes; read by the client
TRANSFER_THRESHOLD_BYTES = "1"  # every host-to-device transfer goes through the shared directory


# pathwaysutils' profiler server (``jax.profiler.start_server`` once pathwaysutils is initialised) binds this
# address, 0.0.0.0 when unset, and takes requests without a token unless PATHWAYS_PROFILING_AUTH_TOKEN is set
# (pathwaysutils/profiling.py ``start_server``). The head pod runs on the host network, so 0.0.0.0 would be the
# node's address: the default keeps it on the loopback, which the API server's port-forward still reaches.
PROFILING_HOST_ENV = "PATHWAYS_PROFILING_SERVER_HOST"


def profiler_env(host: str) -> dict[str, str]:
    return {PROFILING_HOST_ENV: host}


def proxy_env(head_address: str = "$(PATHWAYS_HEAD)", transfer_dir: str | None = TRANSFER_DIR) -> dict[str, str]:
    """What points JAX at the IFRT proxy (cluster only); ``transfer_dir``: the memory-backed directory the
    client shares with the proxy for large transfers (None: every transfer goes through gRPC)."""
    env = {
        "JAX_PLATFORMS": "proxy",
        "JAX_BACKEND_TARGET": f"grpc://{head_address}:{PROXY_PORT}",
        "XCLOUD_ENVIRONMENT": "GCP",
        "ENABLE_PATHWAYS_PERSISTENCE": "1",
    }
    if transfer_dir is not None:
        env |= {TRANSFER_DIRECTORY_ENV: transfer_dir, TRANSFER_THRESHOLD_ENV: TRANSFER_THRESHOLD_BYTES}
    return env
