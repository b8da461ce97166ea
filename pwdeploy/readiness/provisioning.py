"""``provisioning`` (capacity queued only): the Kueue ClusterQueue behind ``scheduling.queue`` runs a
ProvisioningRequest admission check, so Kueue asks GKE's queued provisioning for the TPU nodes before it admits
the job, and that check spares the head's CPU pod set.

Kueue's objects are read at the API version the cluster's discovery prefers. The chain is LocalQueue
(``spec.clusterQueue``) -> ClusterQueue (``spec.admissionChecks``, or ``spec.admissionChecksStrategy`` with
``onFlavors``) -> AdmissionCheck (``spec.controllerName`` ``kueue.x-k8s.io/provisioning-request``, ``spec.parameters``)
-> ProvisioningRequestConfig (``spec.provisioningClassName`` ``queued-provisioning.gke.io``, ``managedResources``).
"""

from __future__ import annotations

from typing import NamedTuple

from pwdeploy.cluster import jobsets as js
from pwdeploy.cluster.jobsets import KUEUE_GROUP, Object
from pwdeploy.config.capacity_modes import capacity_mode
from pwdeploy.kube.seam import Action, ApiError, Kube, Resource
from pwdeploy.readiness.target import Check, Row, Target
from pwdeploy.report import PreflightRow, Status

# What this check's verdict rests on (its rows' ``source``).
SOURCE = "https://kueue.sigs.k8s.io/docs/admission-check-controllers/provisioning/"

PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
QUEUED_CLASS = "queued-provisioning.gke.io"
FIELDS = ("tpu.capacity", "scheduling.queue")
SETUP = (
    "create an AdmissionCheck with controllerName kueue.x-k8s.io/provisioning-request whose parameters name a "
    "ProvisioningRequestConfig with provisioningClassName queued-provisioning.gke.io, and list it in the "
    "ClusterQueue's admissionChecksStrategy for the TPU flavor only (docs/capacity.md, queued)"
)


class Provisioning(NamedTuple):
    """A provisioning admission check of the ClusterQueue and what it applies to."""

    name: str
    on_flavors: tuple[str, ...]  # empty: every flavor of the ClusterQueue
    config: Object | None  # its ProvisioningRequestConfig, when it names one that could be read


def checks(capacity: str) -> list[Check]:
    """The check, for a capacity mode that goes through a ProvisioningRequest; none otherwise."""
    return [Check("provisioning", _run, SOURCE)] if capacity_mode(capacity).provisioning_request else []


def _kind(version: str, plural: str, kind: str, *, namespaced: bool = False) -> Resource:
    return Resource(KUEUE_GROUP, version, plural, kind, namespaced=namespaced)


def _get(kube: Kube, resource: Resource, name: str, namespace: str | None = None) -> Object | None:
    """The object, or None when there is none of that name (403 and others raise)."""
    try:
        found: Object = kube.request(Action("get", resource, namespace, name), "GET", resource.path(namespace, name))
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    return found


def _run(target: Target, row: Row) -> PreflightRow:
    queue, kube = str(target.job.scheduling.queue), target.kube
    localqueues = js.kueue_localqueues(kube)
    if localqueues is None:
        return row(Status.FAILED, "capacity queued needs Kueue, and kueue.x-k8s.io is not installed", SETUP, FIELDS)
    version = localqueues.version
    try:
        local = _get(kube, localqueues, queue, target.namespace)
        if local is None:
            return row(Status.NOT_VERIFIED, f"LocalQueue {queue!r} does not exist (see the queue row)", None, FIELDS)
        cluster_queue = str((local.get("spec") or {}).get("clusterQueue") or "")
        found = _get(kube, _kind(version, "clusterqueues", "ClusterQueue"), cluster_queue) if cluster_queue else None
        if found is None:
            return row(
                Status.FAILED,
                f"LocalQueue {queue!r} points at ClusterQueue {cluster_queue!r}, which does not exist",
                f"create that ClusterQueue; {SETUP}",
                FIELDS,
            )
        provisioning = [p for p in _admission_checks(kube, version, found) if p is not None]
    except ApiError as exc:
        if exc.status != 403:
            raise
        return row(Status.NOT_VERIFIED, f"Kueue's objects are not readable: {exc.message}", exc.hint, FIELDS)
    return _judge(row, cluster_queue, provisioning)


def _admission_checks(kube: Kube, version: str, cluster_queue: Object) -> list[Provisioning | None]:
    """The ClusterQueue's admission checks run by Kueue's provisioning controller (None for the others)."""
    spec = cluster_queue.get("spec") or {}
    named: list[tuple[str, tuple[str, ...]]] = [(str(n), ()) for n in spec.get("admissionChecks") or []]
    for rule in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []:
        named.append((str(rule.get("name")), tuple(str(f) for f in rule.get("onFlavors") or [])))
    return [_provisioning(kube, version, name, flavors) for name, flavors in named]


def _provisioning(kube: Kube, version: str, name: str, flavors: tuple[str, ...]) -> Provisioning | None:
    check = _get(kube, _kind(version, "admissionchecks", "AdmissionCheck"), name)
    spec = (check or {}).get("spec") or {}
    if spec.get("controllerName") != PROVISIONING_CONTROLLER:
        return None
    parameters = spec.get("parameters") or {}
    config = None
    if parameters.get("kind") == "ProvisioningRequestConfig" and parameters.get("name"):
        configs = _kind(version, "provisioningrequestconfigs", "ProvisioningRequestConfig")
        config = _get(kube, configs, str(parameters["name"]))
    return Provisioning(name, flavors, config)


def _judge(row: Row, cluster_queue: str, found: list[Provisioning]) -> PreflightRow:
    if not found:
        return row(
            Status.FAILED,
            f"ClusterQueue {cluster_queue!r} has no admission check run by {PROVISIONING_CONTROLLER}: Kueue would "
            "admit the job without asking queued provisioning for TPU nodes, and the workers would wait",
            SETUP,
            FIELDS,
        )
    check = found[0]
    spec = (check.config or {}).get("spec") or {}
    klass = spec.get("provisioningClassName")
    where = f"ClusterQueue {cluster_queue!r} runs admission check {check.name!r} ({PROVISIONING_CONTROLLER})"
    if check.config is not None and klass != QUEUED_CLASS:
        return row(
            Status.WARN,
            f"{where}, but its ProvisioningRequestConfig asks for class {klass!r}, not {QUEUED_CLASS}",
            f"set provisioningClassName: {QUEUED_CLASS}",
            FIELDS,
        )
    managed = [str(r) for r in spec.get("managedResources") or []]
    if not check.on_flavors and not (managed and not {"cpu", "memory"} & set(managed)):
        return row(
            Status.WARN,
            f"{where} for every flavor: the head's CPU pod set is part of the ProvisioningRequest too, and queued "
            "provisioning does not provision CPU nodes, so the job may never be admitted",
            "scope the check to the TPU flavor (admissionChecksStrategy.admissionChecks[].onFlavors), or set the "
            "ProvisioningRequestConfig's managedResources to [google.com/tpu]",
            FIELDS,
        )
    scope = f"on flavor(s) {', '.join(check.on_flavors)}" if check.on_flavors else f"for {', '.join(managed)}"
    return row(Status.OK, f"{where} {scope}; the head's CPU pod set is not gated", None, FIELDS)
