"""Multi-tier checkpointing: what GKE's MTC driver's failures look like from the job's pods.

Texts matched:
- the kubelet's ``FailedMount`` Warning event of a worker pod whose MTC volume (CSI driver
  ``multitier-checkpoint.csi.storage.gke.io``) cannot be set up: ``MountVolume.SetUp failed for volume "<v>" :
  kubernetes.io/csi: mounter.SetUpAt failed to get CSI client: driver name <driver> not found in the list of
  registered CSI drivers`` (kubernetes pkg/volume/csi/csi_client.go: no node plugin of the driver on that node: no
  CheckpointConfiguration selects the node's machine type, or the HighScaleCheckpointing add-on is off) and
  ``volume mode "Ephemeral" not supported by driver <driver> (no CSIDriver object)`` or ``(only supports ...)``
  (pkg/volume/csi/csi_plugin.go: an inline volume needs a CSIDriver object listing the Ephemeral mode); the pod
  stays in ContainerCreating.
- Orbax's errors in a container log (orbax-checkpoint 0.12.8 ``multi_tier_checkpointing/initialization.py``):
  ``Replicator fatal errors: <the driver's replicator.failed>`` (a RuntimeError: the driver refused the job) and
  ``Timeout reached (600 seconds) while waiting for replicator.yaml to disappear`` (a TimeoutError: no driver read
  the request Orbax wrote; on Pathways raised in the sidecar, and in main's log as the colocated call's error).
"""

from __future__ import annotations

from pwdeploy import identifiers as ids
from pwdeploy.cluster.diagnose import pods as p
from pwdeploy.cluster.diagnose.findings import Cause, Observation, quote
from pwdeploy.cluster.diagnose.read import Snapshot

NOT_REGISTERED = "not found in the list of registered CSI drivers"
NOT_EPHEMERAL = 'volume mode "Ephemeral" not supported'
CLUSTER_ONCE = "set up once per cluster: docs/checkpoints.md; check: pwdeploy preflight -f job.yaml --cluster"
# What each cause's rule rests on (its findings' ``source``).
CSI_MOUNT = "kubernetes/kubernetes: pkg/volume/csi/csi_client.go, pkg/volume/csi/csi_plugin.go (FailedMount)"
ORBAX_MTC = (
    "google/orbax: checkpoint/orbax/checkpoint/experimental/emergency/multi_tier_checkpointing/initialization.py"
)

MTC_VOLUME = Cause(
    "mtc-volume",
    "start",
    "a worker's MTC volume cannot be mounted (`FailedMount` naming multitier-checkpoint.csi.storage.gke.io): the "
    "node runs no MTC driver",
    severity="error",
    source=CSI_MOUNT,
)
MTC_REPLICATOR_FAILED = Cause(
    "mtc-replicator-failed",
    "run",
    "`Replicator fatal errors:` in a log: the MTC driver refused the job's replicator.yaml",
    severity="error",
    fix="the MTC driver refused the job (its message is quoted): most often its access to the "
    "CheckpointConfiguration's bucket (roles/storage.objectUser for the gke-checkpointing-multitier-node "
    "service account, a bucket with hierarchical namespace); " + CLUSTER_ONCE,
    source=ORBAX_MTC,
)
MTC_NO_DRIVER = Cause(
    "mtc-no-driver",
    "run",
    "`waiting for replicator.yaml to disappear` timed out: no MTC driver read the job's request",
    severity="error",
    fix="no MTC driver read the replicator.yaml Orbax wrote within 600 s: the workers' nodes need the MTC driver (a "
    "CheckpointConfiguration whose nodeSelector names their machine type) and the job mtc.enabled, so that "
    "mtc.ramdisk_dir is the driver's volume; " + CLUSTER_ONCE,
    source=ORBAX_MTC,
)


def log_rules() -> tuple[tuple[Cause, str], ...]:
    """(cause, the text that names it) of Orbax's MTC errors, for the log rules of pathways.py."""
    return ((MTC_REPLICATOR_FAILED, "Replicator fatal errors"), (MTC_NO_DRIVER, "replicator.yaml to disappear"))


def observations(snap: Snapshot) -> list[Observation]:
    by_name = {p.name(pod): pod for pod in snap.pods}
    found = []
    for event in snap.events:
        message = str(event.get("message", ""))
        if event.get("reason") != "FailedMount" or ids.MTC_CSI_DRIVER not in message:
            continue
        pod = by_name.get(str((event.get("involvedObject") or {}).get("name", "")))
        if pod is None:
            continue
        found.append(_volume(pod, message))
    return found


def _volume(pod: p.Object, message: str) -> Observation:
    node = str((pod.get("spec") or {}).get("nodeName") or "its node")
    if NOT_REGISTERED in message:
        fix = (
            f"no MTC driver runs on {node}: enable the HighScaleCheckpointing add-on and create a "
            "CheckpointConfiguration whose spec.nodeSelector (node.kubernetes.io/instance-type) names that node's "
            f"machine type; {CLUSTER_ONCE}"
        )
        key = "not-registered"
    elif NOT_EPHEMERAL in message:
        fix = (
            "the cluster has no CSIDriver object for the MTC driver that takes inline volumes: the "
            "HighScaleCheckpointing add-on is off or too old (GKE 1.32.4-gke.1415000 or later); " + CLUSTER_ONCE
        )
        key = "not-ephemeral"
    else:
        fix = f"the MTC driver could not set up the volume (its message is quoted); {CLUSTER_ONCE}"
        key = "other"
    evidence = f"FailedMount: {quote(message)}"
    return MTC_VOLUME.observe(p.role(pod), p.name(pod), key, evidence, fix=fix)
