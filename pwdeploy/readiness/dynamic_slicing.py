"""``dynamic-slicing`` (tpu.dynamic_slicing only): the cluster can form the job's slices from 4x4x4 sub-blocks.
GKE's version is one that forms such a slice (1.35.2-gke.1842000 and later for 4x4x4 and larger, 1.36.0-gke.3712000
and later below: GKE "Schedule dynamic slices with Kueue and TAS"); Kueue has a Topology (topology-aware
scheduling), ideally with the level the workers require (``cloud.google.com/gke-tpu-partition-<topology>-id``);
and an AdmissionCheck is run by GKE's slice controller (``accelerator.gke.io/slice``), which Cluster Toolkit v1.95.0
(pkg/orchestrator/gke/resource_resolver.go, hasKueueTopologies and hasSliceAdmissionCheck) takes as the sign that
dynamic slicing is on.
"""

from __future__ import annotations

import re

from pwdeploy.cluster import jobsets as js
from pwdeploy.cluster.jobsets import KUEUE_GROUP, Object
from pwdeploy.config import JobConfig
from pwdeploy.kube.seam import Action, ApiError, Kube, Resource
from pwdeploy.readiness import version
from pwdeploy.readiness.target import Check, Row, Target
from pwdeploy.report import PreflightRow, Status

# What this check's verdict rests on (its rows' ``source``).
SOURCE = (
    "GKE: Schedule dynamic slices with Kueue and TAS; GoogleCloudPlatform/cluster-toolkit: "
    "pkg/orchestrator/gke/resource_resolver.go (hasKueueTopologies, hasSliceAdmissionCheck)"
)

NAME = "dynamic-slicing"
FIELDS = ("tpu.dynamic_slicing", "scheduling.queue")
SLICE_CONTROLLER = "accelerator.gke.io/slice"
SUPER_SLICING_GKE = (1, 35, 2, 1842000)  # 1.35.2-gke.1842000
SUB_SLICING_GKE = (1, 36, 0, 3712000)  # 1.36.0-gke.3712000
SUB_SLICES = ("2x2x1", "2x2x2", "2x2x4", "2x4x4")
_GKE_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)-gke\.(\d+)")
SETUP = "docs/capacity.md, dynamic slicing"


def checks(job: JobConfig) -> list[Check]:
    """The check, for a job that asks for dynamic slicing; none otherwise."""
    return [Check(NAME, _run, SOURCE)] if job.tpu.dynamic_slicing else []


def gke_version(text: str) -> tuple[int, int, int, int] | None:
    """(1, 35, 2, 1842000) from ``v1.35.2-gke.1842000``; None for a version that is not GKE's."""
    found = _GKE_VERSION.match(text)
    return None if found is None else (int(found[1]), int(found[2]), int(found[3]), int(found[4]))


def _spelled(needed: tuple[int, int, int, int]) -> str:
    return f"{needed[0]}.{needed[1]}.{needed[2]}-gke.{needed[3]}"


def version_problem(job: JobConfig, git_version: str) -> tuple[Status, str]:
    """Whether this control plane's version forms the job's kind of dynamic slice."""
    sub = job.tpu.slice.topology in SUB_SLICES
    needed = SUB_SLICING_GKE if sub else SUPER_SLICING_GKE
    kind = "sub-slice" if sub else "super-slice"
    found = gke_version(git_version)
    if found is None:
        return Status.FAILED, f"control plane {git_version} is not GKE's: dynamic slicing is a GKE feature"
    if found < needed:
        return Status.FAILED, f"GKE {git_version} is older than {_spelled(needed)}, which a dynamic {kind} needs"
    return Status.OK, f"GKE {git_version} forms dynamic {kind}s"


def _topologies(kube: Kube) -> list[Object] | None:
    """Kueue's Topology objects at its preferred version (v1alpha1 where that version does not serve them); None
    when Kueue is not installed."""
    preferred = js.preferred_version(kube, KUEUE_GROUP, default="v1beta1")
    if preferred is None:
        return None
    for api_version in dict.fromkeys((preferred, "v1alpha1")):
        resource = Resource(KUEUE_GROUP, api_version, "topologies", "Topology", namespaced=False)
        try:
            return kube.list_items(Action("list", resource), resource.path())
        except ApiError as exc:
            if exc.status != 404:
                raise
    return []


def _slice_checks(kube: Kube) -> list[str]:
    """The AdmissionChecks that GKE's slice controller runs."""
    preferred = js.preferred_version(kube, KUEUE_GROUP, default="v1beta1") or "v1beta1"
    resource = Resource(KUEUE_GROUP, preferred, "admissionchecks", "AdmissionCheck", namespaced=False)
    found = kube.list_items(Action("list", resource), resource.path())
    return sorted(
        str(c["metadata"]["name"]) for c in found if (c.get("spec") or {}).get("controllerName") == SLICE_CONTROLLER
    )


def _levels(topology: Object) -> list[str]:
    levels = (topology.get("spec") or {}).get("levels") or []
    return [str(level.get("nodeLabel")) for level in levels if isinstance(level, dict)]


def _run(target: Target, row: Row) -> PreflightRow:
    status, detail = version_problem(target.job, version.kubernetes_version(target.kube)[2])
    if status is not Status.OK:
        return row(status, detail, f"upgrade the cluster (Rapid channel), or drop --dynamic-slicing; {SETUP}", FIELDS)
    try:
        topologies = _topologies(target.kube)
        if topologies is None:
            return row(Status.FAILED, f"{detail}, but Kueue is not installed", f"install Kueue; {SETUP}", FIELDS)
        controllers = _slice_checks(target.kube)
    except ApiError as exc:
        if exc.status != 403:
            raise
        return row(Status.NOT_VERIFIED, f"{detail}; Kueue's objects are not readable: {exc.message}", exc.hint, FIELDS)
    return _judged(target, row, detail, topologies, controllers)


def _judged(target: Target, row: Row, detail: str, topologies: list[Object], controllers: list[str]) -> PreflightRow:
    """Kueue read: a Topology, the slice admission check, the level the workers require."""
    if not topologies:
        return row(
            Status.FAILED,
            f"{detail}, but Kueue has no Topology: topology-aware scheduling, which places a dynamic slice, is not "
            "set up",
            "create the Topology, a ResourceFlavor naming it and a ClusterQueue with the slice admission check; "
            + SETUP,
            FIELDS,
        )
    if not controllers:
        return row(
            Status.FAILED,
            f"{detail}, but no AdmissionCheck is run by {SLICE_CONTROLLER}: nothing would form the slice",
            f"enable the slice controller (gcloud container clusters update CLUSTER --enable-slice-controller) and "
            f"list its AdmissionCheck in the ClusterQueue; {SETUP}",
            FIELDS,
        )
    level = f"cloud.google.com/gke-tpu-partition-{target.job.tpu.slice.topology}-id"
    names = ", ".join(str(t["metadata"]["name"]) for t in topologies)
    where = f"{detail}; Kueue Topology {names}; slice admission check {', '.join(controllers)}"
    if not any(level in _levels(t) for t in topologies):
        return row(
            Status.WARN,
            f"{where}; no Topology has the level {level} that the workers require",
            f"add that level to the Topology of the TPU ResourceFlavor; {SETUP}",
            FIELDS,
        )
    return row(Status.OK, f"{where} with level {level}", None, FIELDS)
