"""The user's volumes (``volumes``): a bucket through the GKE Cloud Storage FUSE CSI driver, or a memory-backed
ramdisk, mounted in main (the head pod) and/or the workers (pathways-worker, and the colocated-Python sidecar where
there is one), as xpk's ``--storage`` and ``--ramdisk-directory`` give a Pathways recipe.

A bucket is a CSI ephemeral volume of ``gcsfuse.csi.storage.gke.io`` (``volumeAttributes.bucketName``), and the pod
that mounts one is annotated ``gke-gcsfuse/volumes: "true"``, which makes the driver's webhook inject its sidecar (GKE
docs, "Access Cloud Storage buckets with the Cloud Storage FUSE CSI driver"; a Pathways JobSet builder's
``add_gcsfuse`` annotates the Job and its pods alike). Every Pathways pod runs on the host network, where the GKE
metadata server cannot answer the FUSE sidecar's token requests: ``hostNetworkPodKSA: "true"`` has the driver
(v1.17.2 and later, GKE 1.29 and later) authenticate as the pod's Kubernetes service account instead
(GoogleCloudPlatform/gcs-fuse-csi-driver docs/troubleshooting.md), which then needs access to the bucket.

A ramdisk is an ``emptyDir`` of medium Memory with its size as ``sizeLimit``: its pages count against the memory
limit of the container that writes them. The MTC driver's volume (``mtc``) is rendered beside these by its own step.
"""

from __future__ import annotations

from collections.abc import Callable

from pwdeploy import identifiers as ids
from pwdeploy.config import JobConfig
from pwdeploy.config.model import Volume
from pwdeploy.manifests import common as c
from pwdeploy.manifests.common import Manifest

GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
GCSFUSE_ANNOTATION = "gke-gcsfuse/volumes"
DEFAULT_MOUNT_OPTIONS = "implicit-dirs"  # folders that exist only as object prefixes are seen as folders


def volume_name(job: JobConfig, volume: Volume) -> str:
    return f"user-{volume.kind}-{job.volumes.index(volume)}"


def volume_source(job: JobConfig, volume: Volume) -> Manifest:
    name = volume_name(job, volume)
    if volume.kind == "ramdisk":
        return c.memory_volume(name, volume.source)
    options = ",".join(filter(None, [DEFAULT_MOUNT_OPTIONS, volume.mount_options]))
    attributes = {"bucketName": volume.source, "mountOptions": options, "hostNetworkPodKSA": "true"}
    csi: Manifest = {"driver": GCSFUSE_DRIVER, "volumeAttributes": attributes}
    if volume.read_only:
        csi["readOnly"] = True
    return {"name": name, "csi": csi}


def mounted_in(job: JobConfig, where: str) -> tuple[Volume, ...]:
    return tuple(v for v in job.volumes if where in v.where and not (where == "main" and job.headless))


def add_user_volumes(job: JobConfig, pod: Manifest, where: str, containers: tuple[str, ...]) -> Manifest:
    """``pod`` with the volumes mounted ``where`` (main, workers) in each of ``containers`` present in it."""
    present = {x["name"] for section in ("initContainers", "containers") for x in pod.get(section, [])}
    for volume in mounted_in(job, where):
        pod = c.extend(pod, "volumes", [volume_source(job, volume)])
        mount = {**c.mount(volume_name(job, volume), volume.path), **({"readOnly": True} if volume.read_only else {})}
        for name in containers:
            if name in present:
                pod = c.edit_container(pod, name, _mounting(mount))
    return pod


def _mounting(mount: Manifest) -> Callable[[Manifest], Manifest]:
    return lambda container: c.extend(container, "volumeMounts", [mount])


def fuse_annotations(job: JobConfig, where: str) -> dict[str, str]:
    """The annotation that has the GCS FUSE driver serve a pod, where one of its volumes is a bucket."""
    return {GCSFUSE_ANNOTATION: "true"} if any(v.kind == "gcsfuse" for v in mounted_in(job, where)) else {}


MAIN = (ids.MAIN_CONTAINER,)
WORKERS = (ids.WORKER_CONTAINER, ids.SIDECAR_CONTAINER)
