"""The TPU worker slices: one Job per slice, one pod per TPU VM, optionally with a colocated-Python sidecar."""

from __future__ import annotations

from pwdeploy.config import JobConfig
from pwdeploy.errors import ConfigError
from pwdeploy.manifests import common as c
from pwdeploy.manifests.common import Manifest
from pwdeploy.manifests.head import as_native_sidecar, rm_client_args

BACKOFF_PER_VM = 4  # restarts of a worker pod before its slice's Job fails


def worker_args(job: JobConfig) -> list[str]:
    args = rm_client_args(job, c.WORKER_PORT)
    if job.sidecar.enabled:
        args.append(f"--cloud_pathways_sidecar_shm_directory={c.SIDECAR_SHM_DIR}")
    return args


def worker_env() -> list[Manifest]:
    return [
        c.env_label("PATHWAYS_HEAD", c.COORDINATOR_LABEL),
        c.env_value("TPU_MIN_LOG_LEVEL", "0"),
        c.env_value("XCLOUD_ENVIRONMENT", "GCP"),
        c.env_label("MEGASCALE_COORDINATOR_ADDRESS", c.COORDINATOR_LABEL),
        c.env_label("MEGASCALE_NUM_SLICES", "jobset.sigs.k8s.io/replicatedjob-replicas"),
        c.env_label("MEGASCALE_SLICE_ID", "jobset.sigs.k8s.io/job-index"),
        c.env_annotation("JOBSET_NAME", "jobset.sigs.k8s.io/jobset-name"),
        c.env_annotation("REPLICATED_JOB_NAME", "jobset.sigs.k8s.io/replicatedjob-name"),
    ]


def worker_container(job: JobConfig) -> Manifest:
    mounts = [c.mount(c.SHM_VOLUME, "/dev/shm")]
    if job.sidecar.enabled:
        mounts.append(c.mount(c.SIDECAR_SHM_VOLUME, c.SIDECAR_SHM_DIR))
    return {
        "name": c.WORKER_CONTAINER,
        "image": job.server_image,
        "imagePullPolicy": "IfNotPresent",
        "args": worker_args(job),
        "env": worker_env(),
        "ports": c.ports(c.WORKER_PORT, c.WORKER_PORT + 1, 8471, 8080),
        "resources": c.limits({"google.com/tpu": job.tpu.slice.chips_per_vm, "memory": job.tpu.worker_memory}),
        "volumeMounts": mounts,
    }


def sidecar_container(job: JobConfig) -> Manifest:
    image = job.sidecar.image
    if image is None:
        raise ConfigError(
            "sidecar.repository",
            f"{job.sidecar.repository} is set but no pushed sidecar image matches this job's current sidecar "
            "inputs (none was pushed yet, or its code or requirements changed since)",
            hint="run `pwdeploy sidecar build --push` with the same config, or set sidecar.image",
        )
    return as_native_sidecar(
        {
            "name": c.SIDECAR_CONTAINER,
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "env": [
                c.env_value("GRPC_SERVER_ADDRESS", f"0.0.0.0:{c.SIDECAR_PORT}"),
                c.env_value("CLOUD_PATHWAYS_SIDECAR_SHM_DIRECTORY", c.SIDECAR_SHM_DIR),
            ],
            "ports": c.ports(c.SIDECAR_PORT),
            "volumeMounts": [c.mount(c.SIDECAR_SHM_VOLUME, c.SIDECAR_SHM_DIR)],
        }
    )


def worker_pod_spec(job: JobConfig) -> Manifest:
    volumes = [c.memory_volume(c.SHM_VOLUME, job.tpu.shm_size)]
    if job.sidecar.enabled:
        volumes.append(c.memory_volume(c.SIDECAR_SHM_VOLUME, job.sidecar.shm_size))
    return c.drop_none(
        hostNetwork=True,
        dnsPolicy="ClusterFirstWithHostNet",
        restartPolicy="OnFailure",
        nodeSelector={
            "cloud.google.com/gke-tpu-accelerator": job.tpu.slice.accelerator,
            "cloud.google.com/gke-tpu-topology": job.tpu.slice.topology,
        },
        tolerations=[{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}],
        serviceAccountName=job.scheduling.service_account,
        priorityClassName=job.scheduling.priority_class,
        terminationGracePeriodSeconds=job.scheduling.termination_grace_seconds,
        initContainers=[sidecar_container(job)] if job.sidecar.enabled else None,
        containers=[worker_container(job)],
        volumes=volumes,
    )


def worker_backoff_limit(job: JobConfig) -> int:
    vms = job.tpu.slice.vms
    if job.tpu.elastic_slices:
        return job.tpu.max_slice_restarts * vms
    return BACKOFF_PER_VM * vms


def worker_replicated_job(job: JobConfig) -> Manifest:
    vms = job.tpu.slice.vms
    return {
        "name": c.WORKER,
        "replicas": job.tpu.slices,
        "template": {
            "metadata": {
                "annotations": {"alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"}
            },
            "spec": {
                "backoffLimit": worker_backoff_limit(job),
                "completionMode": "Indexed",
                "completions": vms,
                "parallelism": vms,
                "template": {"spec": worker_pod_spec(job)},
            },
        },
    }
