"""Variants of the two pods, each one step over the built pod specs: the colocated-Python sidecar, the
client-proxy transfer memory, the HLO uploader and the user's volumes. A step that does not apply returns the
pods unchanged.

The base builders (head.py, worker.py) know nothing of these; `apply_variants` chains them, optax-style.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import NamedTuple

from pwdeploy import envcontract
from pwdeploy import identifiers as ids
from pwdeploy.config import JobConfig
from pwdeploy.manifests import common as c
from pwdeploy.manifests.common import Manifest
from pwdeploy.manifests.head import raise_unpushed, transfer_memory_on
from pwdeploy.manifests.user_volumes import MAIN, WORKERS, add_user_volumes

HLO_UPLOAD_INTERVAL_S = 60


class Pods(NamedTuple):
    head: Manifest
    worker: Manifest


Step = Callable[[JobConfig, Pods], Pods]


# ------------------------------------------------------------------------- colocated-Python sidecar


def sidecar_container(job: JobConfig) -> Manifest:
    image = job.sidecar.image
    if image is None:
        raise_unpushed(job)
    return c.drop_none(
        name=ids.SIDECAR_CONTAINER,
        image=image,
        imagePullPolicy="IfNotPresent",
        env=[
            c.env_value("GRPC_SERVER_ADDRESS", f"0.0.0.0:{ids.SIDECAR_PORT}"),
            c.env_value("CLOUD_PATHWAYS_SIDECAR_SHM_DIRECTORY", ids.SIDECAR_SHM_DIR),
        ],
        ports=c.ports(ids.SIDECAR_PORT),
        resources=sidecar_resources(job),
    )


def sidecar_resources(job: JobConfig) -> Manifest | None:
    """Requests only, as Google's recipes give the sidecar (cpu 4, memory 16Gi: AI-Hypercomputer/maxtext's
    Pathways recipe generator): the node's TPU VM has far more, and a memory limit would kill the sidecar while it
    stages a checkpoint."""
    requests = {"cpu": job.sidecar.cpu, "memory": job.sidecar.memory}
    found = {key: str(value) for key, value in requests.items() if value is not None}
    return {"requests": found} if found else None


def colocated_python(job: JobConfig, pods: Pods) -> Pods:
    """Workers run the user's sidecar beside pathways-worker, sharing a memory directory; the proxy uses it."""
    if not job.sidecar.enabled:
        return pods
    worker = c.add_native_sidecar(pods.worker, sidecar_container(job))
    worker = c.add_volume(
        worker,
        c.memory_volume(ids.SIDECAR_SHM_VOLUME, job.sidecar.shm_size),
        ids.SIDECAR_SHM_DIR,
        ids.WORKER_CONTAINER,
        ids.SIDECAR_CONTAINER,
    )
    worker = c.add_args(worker, ids.WORKER_CONTAINER, [f"--cloud_pathways_sidecar_shm_directory={ids.SIDECAR_SHM_DIR}"])
    head = c.add_args(pods.head, ids.PROXY_CONTAINER, ["--sidecar_name=external"])
    return Pods(head, worker)


# ------------------------------------------------------------------------- multi-tier checkpointing


def multi_tier_checkpointing(job: JobConfig, pods: Pods) -> Pods:
    """The MTC driver's inline CSI volume at mtc.ramdisk_dir on the workers, as Cluster Toolkit renders a Pathways
    job with --gke-mtc-enabled (its TestGeneratePathwaysManifest_MTC: the sidecar on workers only, the CSI volume,
    the mount). Mounted in the sidecar, where Orbax's colocated-Python functions write replicator.yaml and the
    local checkpoints, and in pathways-worker, as Cluster Toolkit's MTC template mounts it in both (the sidecar by
    name, the worker through the job's mount list). Never on the head: its CPU node runs no MTC driver (the
    CheckpointConfiguration's node selector names the TPU machine type), so the volume could not be set up there.
    The directory reaches main through its env (envcontract.mtc_env); the config requires the sidecar."""
    if not job.mtc.enabled:
        return pods
    volume = {"name": ids.MTC_VOLUME, "csi": {"driver": ids.MTC_CSI_DRIVER}}
    worker = c.add_volume(pods.worker, volume, job.mtc.ramdisk_dir, ids.SIDECAR_CONTAINER, ids.WORKER_CONTAINER)
    return Pods(pods.head, worker)


# ------------------------------------------------------------------------- client-proxy transfer memory


def transfer_memory(job: JobConfig, pods: Pods) -> Pods:
    """The JAX client and the proxy pass large buffers through files in one memory-backed directory instead
    of gRPC. Headless pods have no client; size 0 turns it off. The client's variables come with its proxy
    connection (envcontract.proxy_env); this step adds the volume and the proxy's side.

    The volume has no sizeLimit unless head.transfer_shm_size caps it: the proxy client writes each transfer file
    under a CHECK (xla ifrt_proxy/client/grpc_host_buffer.cc), so a full volume aborts the client; the one
    producer that enables these transfers (axlearn) leaves the volume unsized. Memory-backed pages are charged to
    the container that writes them, so main.memory already bounds it."""
    if not transfer_memory_on(job):
        return pods
    volume = c.memory_volume(ids.TRANSFER_VOLUME, job.head.transfer_shm_size)
    head = c.add_volume(pods.head, volume, ids.TRANSFER_DIR, ids.PROXY_CONTAINER, ids.MAIN_CONTAINER)
    head = c.add_env(head, ids.PROXY_CONTAINER, [c.env_value(envcontract.TRANSFER_DIRECTORY_ENV, ids.TRANSFER_DIR)])
    return Pods(head, pods.worker)


# ------------------------------------------------------------------------- HLO dumps through an uploader


def hlo_upload_script(destination: str) -> str:
    """Copy the dump directory to GCS every interval, and once more when the container is told to stop."""
    copy = f"gcloud storage rsync --recursive {ids.HLO_DIR} {shlex.quote(destination)}"
    return (
        f"upload() {{ {copy}; }}\n"
        'trap "upload; exit 0" TERM INT\n'
        f"while true; do sleep {HLO_UPLOAD_INTERVAL_S} & wait $!; upload; done\n"
    )


def hlo_uploader_container(job: JobConfig, destination: str) -> Manifest:
    return {
        "name": ids.HLO_UPLOADER_CONTAINER,
        "image": job.storage.hlo_uploader_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", hlo_upload_script(destination)],
        "resources": c.limits({"cpu": "1", "memory": "1Gi"}),
        "securityContext": c.hardened(),
    }


def hlo_uploader(job: JobConfig, pods: Pods) -> Pods:
    """The proxy dumps HLO to a local volume (jaxlib skips a gs:// dump directory without a word); an
    uploader in the head pod copies it to storage.hlo_dump. As a native sidecar listed first it stops last,
    after the proxy, so its final copy sees every file."""
    if job.storage.hlo_dump is None:
        return pods
    uploader = hlo_uploader_container(job, job.storage.hlo_dump.uri)
    if job.headless:  # no workload to outlive: the uploader runs as long as the servers do
        head = c.extend(pods.head, "containers", [uploader])
    else:
        head = c.add_native_sidecar(pods.head, uploader, first=True)
    volume = {"name": ids.HLO_VOLUME, "emptyDir": {}}
    head = c.add_volume(head, volume, ids.HLO_DIR, ids.PROXY_CONTAINER, ids.HLO_UPLOADER_CONTAINER)
    return Pods(head, pods.worker)


# ------------------------------------------------------------------------- the user's volumes


def user_volumes(job: JobConfig, pods: Pods) -> Pods:
    """``volumes``: after the sidecar's step, so that a volume on the workers is mounted in the sidecar too."""
    if not job.volumes:
        return pods
    head = add_user_volumes(job, pods.head, "main", MAIN)
    return Pods(head, add_user_volumes(job, pods.worker, "workers", WORKERS))


STEPS: tuple[Step, ...] = (colocated_python, multi_tier_checkpointing, transfer_memory, hlo_uploader, user_volumes)


def apply_variants(job: JobConfig, pods: Pods) -> Pods:
    """Every variant step in turn, then one key order for the pod specs and their containers."""
    for step in STEPS:
        pods = step(job, pods)
    return Pods(tidy(pods.head), tidy(pods.worker))


def tidy(pod: Manifest) -> Manifest:
    sections: Manifest = {
        section: [c.ordered(container, c.CONTAINER_KEYS) for container in pod[section]]
        for section in ("initContainers", "containers")
        if section in pod
    }
    return c.ordered({**pod, **sections}, c.POD_KEYS)
