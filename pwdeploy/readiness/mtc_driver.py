"""``mtc-driver``: with ``mtc.enabled``, the HighScaleCheckpointing add-on's CSIDriver
``multitier-checkpoint.csi.storage.gke.io``, which must list the ``Ephemeral`` mode (the kubelet refuses an inline
volume of a driver without a CSIDriver object that does: kubernetes pkg/volume/csi/csi_plugin.go), the GCS FUSE
add-on's CSIDriver ``gcsfuse.csi.storage.gke.io`` (GoogleCloudPlatform/gcs-fuse-csi-driver
deploy/base/setup/csi_driver.yaml), which the driver's backups use, and the driver's node plugin DaemonSet
(``multitier-driver*`` or label ``k8s-app=high-scale-checkpointing`` in ``gke-managed-checkpointing``, as Cluster
Toolkit finds it). docs/checkpoints.md says what to create once."""

from __future__ import annotations

from pwdeploy.cluster.jobsets import Object
from pwdeploy.config import JobConfig
from pwdeploy.identifiers import MTC_CSI_DRIVER
from pwdeploy.kube.seam import Action, ApiError, Resource
from pwdeploy.readiness.target import Check, Row, Target
from pwdeploy.report import PreflightRow, Status

# What this check's verdict rests on (its rows' ``source``).
SOURCE = (
    "kubernetes/kubernetes: pkg/volume/csi/csi_plugin.go (an inline volume needs its CSIDriver); "
    "https://cloud.google.com/kubernetes-engine/docs/how-to/machine-learning/training/multi-tier-checkpointing"
)

FIELDS = ("mtc.enabled",)
GCSFUSE_DRIVER = "gcsfuse.csi.storage.gke.io"
NAMESPACE = "gke-managed-checkpointing"
CSIDRIVERS = Resource("storage.k8s.io", "v1", "csidrivers", "CSIDriver", namespaced=False)
DAEMONSETS = Resource("apps", "v1", "daemonsets", "DaemonSet")
SETUP = "set it up once per cluster: docs/checkpoints.md"


def checks(job: JobConfig) -> list[Check]:
    return [Check("mtc-driver", _driver, SOURCE)] if job.mtc.enabled else []


def get_or_none(target: Target, resource: Resource, name: str, namespace: str | None = None) -> Object | None:
    """The object, or None when it does not exist."""
    try:
        found: Object = target.kube.request(
            Action("get", resource, namespace, name), "GET", resource.path(namespace, name)
        )
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    return found


def _driver(target: Target, row: Row) -> PreflightRow:
    enable = "enable the add-ons: gcloud container clusters update CLUSTER --update-addons="
    mtc = get_or_none(target, CSIDRIVERS, MTC_CSI_DRIVER)
    if mtc is None:
        fix = enable + "HighScaleCheckpointing=ENABLED,GcsFuseCsiDriver=ENABLED; " + SETUP
        return row(
            Status.FAILED, f"no CSIDriver {MTC_CSI_DRIVER}: the HighScaleCheckpointing add-on is off", fix, FIELDS
        )
    modes = (mtc.get("spec") or {}).get("volumeLifecycleModes") or []
    if "Ephemeral" not in modes:
        detail = f"CSIDriver {MTC_CSI_DRIVER} takes no inline volumes (volumeLifecycleModes {modes or 'unset'})"
        return row(Status.FAILED, detail, "upgrade the cluster (GKE 1.32.4-gke.1415000 or later); " + SETUP, FIELDS)
    if get_or_none(target, CSIDRIVERS, GCSFUSE_DRIVER) is None:
        detail = f"no CSIDriver {GCSFUSE_DRIVER}: the GcsFuseCsiDriver add-on, which MTC's backups use, is off"
        return row(Status.FAILED, detail, enable + "GcsFuseCsiDriver=ENABLED; " + SETUP, FIELDS)
    return row(*_daemonset(target), FIELDS)


def _daemonset(target: Target) -> tuple[Status, str, str | None]:
    both = f"CSIDrivers {MTC_CSI_DRIVER} (Ephemeral) and {GCSFUSE_DRIVER} exist"
    try:
        listed = target.kube.list_items(Action("list", DAEMONSETS, NAMESPACE), DAEMONSETS.path(NAMESPACE))
    except ApiError as exc:
        if exc.status not in (403, 404):
            raise
        return Status.OK, f"{both}; the MTC driver's DaemonSet in {NAMESPACE} not read ({exc.message})", None
    found = [
        ds
        for ds in listed
        if str(ds["metadata"].get("name", "")).startswith("multitier-driver")
        or (ds["metadata"].get("labels") or {}).get("k8s-app") == "high-scale-checkpointing"
    ]
    if not found:
        fix = "create a CheckpointConfiguration for the slices' machine type (it starts the driver); " + SETUP
        return Status.WARN, f"{both}, but no MTC driver DaemonSet runs in {NAMESPACE}", fix
    status = found[0].get("status") or {}
    ready, wanted = int(status.get("numberReady") or 0), int(status.get("desiredNumberScheduled") or 0)
    return Status.OK, f"{both}; DaemonSet {found[0]['metadata']['name']}: {ready} of {wanted} driver pods ready", None
