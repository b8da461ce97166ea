"""``mtc-configuration``: with ``mtc.enabled``, a ``CheckpointConfiguration`` (``checkpointing.gke.io/v1``, listed
across namespaces, as Cluster Toolkit lists it) whose ``spec.nodeSelector`` selects the slices' nodes (by every
label: ``node.kubernetes.io/instance-type``, the TPU machine type), with its bucket and ramdisk size, and the
Workload Identity of the driver's Kubernetes service account (``gke-managed-checkpointing/
gke-checkpointing-multitier-node``): annotated with a Google service account (Cluster Toolkit's way), or left to an
IAM binding on the bucket (xpk's way, which only Cloud Storage can show)."""

from __future__ import annotations

from pwdeploy.cluster.jobsets import Object
from pwdeploy.cluster.nodes import node_selector, replicated_job
from pwdeploy.config import JobConfig
from pwdeploy.identifiers import WORKER_JOB
from pwdeploy.kube.seam import Action, ApiError, Resource
from pwdeploy.readiness.mtc_driver import FIELDS, NAMESPACE, SETUP, get_or_none
from pwdeploy.readiness.target import Check, Row, Target, nodes_or_none
from pwdeploy.report import PreflightRow, Status

# What this check's verdict rests on (its rows' ``source``).
SOURCE = "https://cloud.google.com/kubernetes-engine/docs/how-to/machine-learning/training/multi-tier-checkpointing"

SERVICE_ACCOUNT = "gke-checkpointing-multitier-node"
WI_ANNOTATION = "iam.gke.io/gcp-service-account"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
CHECKPOINT_CONFIGURATIONS = Resource(
    "checkpointing.gke.io", "v1", "checkpointconfigurations", "CheckpointConfiguration"
)


def checks(job: JobConfig) -> list[Check]:
    return [Check("mtc-configuration", _configuration, SOURCE)] if job.mtc.enabled else []


def _configuration(target: Target, row: Row) -> PreflightRow:
    path = CHECKPOINT_CONFIGURATIONS.path()
    try:
        configurations = target.kube.list_items(Action("list", CHECKPOINT_CONFIGURATIONS), path)
    except ApiError as exc:
        if exc.status != 404:
            raise
        detail = "the API server does not serve checkpointing.gke.io/v1 CheckpointConfigurations: the add-on is off"
        return row(Status.FAILED, detail, SETUP, FIELDS)
    labels = _slice_node_labels(target)
    identity = _identity(target)
    if not configurations:
        return row(Status.FAILED, "no CheckpointConfiguration in the cluster" + identity, SETUP, FIELDS)
    if labels is None:
        selectors = "; ".join(f"{_name(c)} selects {_selector(c)}" for c in configurations)
        detail = f"no node of the slices' pools to compare with (scaled to zero, or not listable): {selectors}"
        return row(Status.NOT_VERIFIED, detail + identity, None, FIELDS)
    matching = [c for c in configurations if _selects(c, labels)]
    types = ", ".join(sorted({node.get(INSTANCE_TYPE, "?") for node in labels}))
    if not matching:
        selectors = "; ".join(f"{_name(c)} selects {_selector(c)}" for c in configurations)
        detail = f"no CheckpointConfiguration selects the slices' nodes (machine type {types}): {selectors}"
        fix = f"create one with spec.nodeSelector {{{INSTANCE_TYPE}: {types}}}; {SETUP}"
        return row(Status.FAILED, detail + identity, fix, FIELDS)
    spec = matching[0].get("spec") or {}
    bucket = spec.get("cloudStorageBucketName")
    detail = f"{_name(matching[0])} selects the slices' nodes ({types}): bucket {bucket!r}, "
    detail += f"ramdisk {spec.get('inMemoryVolumeSize')!r} per node"
    named = target.job.mtc.backup_bucket
    if named is not None and named.bucket != bucket:
        detail += f"; not mtc.backup_bucket ({named.uri}), the bucket preflight checked"
        fix = f"set mtc.backup_bucket: gs://{bucket} (or point the CheckpointConfiguration at {named.uri})"
        return row(Status.WARN, detail + identity, fix, (*FIELDS, "mtc.backup_bucket"))
    status = Status.WARN if identity.startswith("; no Workload") else Status.OK
    return row(status, detail + identity, None if status is Status.OK else _BINDING_FIX, FIELDS)


def _slice_node_labels(target: Target) -> list[dict[str, str]] | None:
    """The labels of the nodes the slices' pods would run on; None when there are none to read."""
    spec = replicated_job(target.jobset, WORKER_JOB)["template"]["spec"]["template"]["spec"]
    nodes = nodes_or_none(target, node_selector(spec))
    if not nodes:
        return None
    return [dict(node["metadata"].get("labels") or {}) for node in nodes]


def _selects(configuration: Object, nodes: list[dict[str, str]]) -> bool:
    wanted = (configuration.get("spec") or {}).get("nodeSelector") or {}
    return any(all(labels.get(k) == v for k, v in wanted.items()) for labels in nodes)


def _name(obj: Object) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))


def _selector(configuration: Object) -> str:
    wanted = (configuration.get("spec") or {}).get("nodeSelector") or {}
    return ", ".join(f"{k}={v}" for k, v in sorted(wanted.items())) or "every node"


_BINDING_FIX = (
    "grant the driver the bucket: gcloud storage buckets add-iam-policy-binding gs://BUCKET --role "
    "roles/storage.objectUser --member principal://iam.googleapis.com/projects/NUMBER/locations/global/"
    f"workloadIdentityPools/PROJECT.svc.id.goog/subject/ns/{NAMESPACE}/sa/{SERVICE_ACCOUNT} (skip if granted)"
)


def _identity(target: Target) -> str:
    """What the driver's Kubernetes service account says of its Google identity, as a clause of the detail."""
    try:
        account = get_or_none(target, SERVICE_ACCOUNTS, SERVICE_ACCOUNT, NAMESPACE)
    except ApiError as exc:
        return f"; the driver's service account not read ({exc.message})"
    if account is None:
        return f"; no service account {NAMESPACE}/{SERVICE_ACCOUNT} (the add-on makes it)"
    gsa = ((account.get("metadata") or {}).get("annotations") or {}).get(WI_ANNOTATION)
    if gsa:
        return f"; the driver's service account acts as {gsa} (Workload Identity)"
    return (
        f"; no Workload Identity annotation ({WI_ANNOTATION}) on {NAMESPACE}/{SERVICE_ACCOUNT}: its bucket access "
        "must come from an IAM binding to its principal, which only Cloud Storage shows"
    )
