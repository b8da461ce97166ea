"""The requests pwdeploy makes for a job: JobSets (server-side apply, get, list, delete), its pods and events,
and the discovery lookups that tell whether the cluster can run it; and every read of a JobSet's fields (its
name, annotations, replicated jobs, status), so a future PathwaysJob output has one place to go."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NamedTuple

from pwdeploy import identifiers as ids
from pwdeploy.errors import ClusterError
from pwdeploy.kube.seam import JOBS, JOBSETS, NAMESPACES, PODS, Action, ApiError, Kube, Resource, localqueues
from pwdeploy.kube.watch import Mirrors
from pwdeploy.kube.watch_stream import Listing
from pwdeploy.text import printable

FIELD_MANAGER = "pwdeploy"
APPLY_PATCH = "application/apply-patch+yaml"
KUEUE_GROUP = "kueue.x-k8s.io"
DELETE_TIMEOUT_S = 300.0  # foreground deletion waits for every pod to stop

# A Kubernetes object as the API server returned it (read-only here); what render builds is manifests.Manifest.
Object = dict[str, Any]


def get_jobset(kube: Kube, namespace: str, name: str) -> Object | None:
    """The JobSet, or None when there is none of that name."""
    try:
        found: Object = kube.request(Action("get", JOBSETS, namespace, name), "GET", JOBSETS.path(namespace, name))
    except ApiError as exc:
        if exc.missing == "object":
            return None
        raise
    return found


def require_jobset(kube: Kube, namespace: str, name: str) -> Object:
    """The JobSet, or a ClusterError that says how to list the jobs there are."""
    found = get_jobset(kube, namespace, name)
    if found is None:
        raise ClusterError(
            f"jobset {name} not found in namespace {namespace}", hint=f"list jobs: pwdeploy list -n {namespace}"
        )
    return found


def list_jobsets(
    kube: Kube, namespace: str | None, selector: str = f"{ids.MANAGED_BY_LABEL}={ids.MANAGED_BY}"
) -> list[Object]:
    """JobSets in ``namespace`` (None: every namespace) that match the label selector."""
    return kube.list_items(
        Action("list", JOBSETS, namespace), JOBSETS.path(namespace), query=[("labelSelector", selector)]
    )


def apply_jobset(kube: Kube, obj: Object, *, dry_run: bool) -> Object:
    """Server-side apply under the pwdeploy field manager; unknown fields are rejected (fieldValidation=Strict)."""
    namespace, name = obj["metadata"]["namespace"], name_of(obj)
    query = [("fieldManager", FIELD_MANAGER), ("fieldValidation", "Strict")]
    if dry_run:
        query.append(("dryRun", "All"))
    applied: Object = kube.request(
        Action("patch", JOBSETS, namespace, name),
        "PATCH",
        JOBSETS.path(namespace, name),
        query=query,
        body=obj,
        content_type=APPLY_PATCH,
    )
    return applied


def delete_jobset(kube: Kube, namespace: str, name: str, *, dry_run: bool = False) -> None:
    """Delete with foreground propagation, so the JobSet is gone only once its Jobs and pods are."""
    query = [("propagationPolicy", "Foreground")] + ([("dryRun", "All")] if dry_run else [])
    try:
        kube.request(Action("delete", JOBSETS, namespace, name), "DELETE", JOBSETS.path(namespace, name), query=query)
    except ApiError as exc:
        if exc.status != 404:  # already gone (for instance a retried DELETE that had succeeded)
            raise


def jobset_listing(namespace: str, name: str) -> Listing:
    """The JobSet of that name, as a list of at most one (what a watch of one object is: kubectl wait's)."""
    return Listing(JOBSETS, namespace, fields=f"metadata.name={name}")


def pods_listing(namespace: str, jobset: str) -> Listing:
    """The JobSet's pods (its name label, which the JobSet controller puts on every pod it makes)."""
    return Listing(PODS, namespace, labels=f"{ids.JOBSET_NAME_LABEL}={jobset}")


def wait_gone(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    timeout: float = DELETE_TIMEOUT_S,
    poll: float = 2.0,
    said: Callable[[str], None] | None = None,
) -> bool:
    """Whether the JobSet disappeared within ``timeout`` seconds, followed by a watch of it (and, for ``said``, of
    its pods), as ``kubectl delete --wait`` does: a list and a watch each, however long it takes. ``said`` hears,
    whenever it changes, which of its pods are still terminating (foreground deletion removes the JobSet after
    them). ``poll``: how often to list where watching is forbidden."""
    deadline = kube.clock.now() + timeout
    last = ""
    listings = [jobset_listing(namespace, name)] + ([pods_listing(namespace, name)] if said is not None else [])
    with Mirrors(kube, listings, poll=poll) as seen:
        while seen[0]:
            if said is not None and (now := terminating_text(seen[1])) != last:
                said(now)
                last = now
            left = deadline - kube.clock.now()
            if left <= 0:
                return False
            seen.wait(left)
    return True


def terminating_text(pods: list[Object], shown: int = 3) -> str:
    """``waiting for 2 pods to terminate: a, b`` (or for the JobSet itself once its pods are gone)."""
    names = sorted(str(p.get("metadata", {}).get("name", "")) for p in pods)
    if not names:
        return "waiting for the JobSet to go (its pods are gone)"
    more = f" (+{len(names) - shown} more)" if len(names) > shown else ""
    return f"waiting for {len(names)} pod(s) to terminate: {', '.join(names[:shown])}{more}"


def list_pods(kube: Kube, namespace: str, jobset: str, **labels: str) -> list[Object]:
    selector = ",".join([f"{ids.JOBSET_NAME_LABEL}={jobset}", *(f"{k}={v}" for k, v in labels.items())])
    return kube.list_items(Action("list", PODS, namespace), PODS.path(namespace), query=[("labelSelector", selector)])


def list_jobs(kube: Kube, namespace: str, jobset: str) -> list[Object]:
    """The JobSet's Jobs (the JobSet controller labels them with its name)."""
    query = [("labelSelector", f"{ids.JOBSET_NAME_LABEL}={jobset}")]
    return kube.list_items(Action("list", JOBS, namespace), JOBS.path(namespace), query=query)


# ---------------------------------------------------------------------------------------------- reading a JobSet


class ReplicatedJob(NamedTuple):
    """One replicatedJob of a JobSet's spec."""

    name: str  # pathways-head, worker
    replicas: int  # Jobs made from the template (workers: one per slice)
    pods_per_job: int  # the Job's parallelism, else completions (workers: VMs per slice)


def name_of(jobset: Object) -> str:
    return str(jobset["metadata"]["name"])


def namespace_of(jobset: Object) -> str:
    """The namespace the JobSet names ("" when it names none, as a rendered one may)."""
    return str(jobset["metadata"].get("namespace", ""))


def created_at(jobset: Object) -> str | None:
    """Its creationTimestamp (RFC 3339), None when the API server has not set one."""
    found = jobset.get("metadata", {}).get("creationTimestamp")
    return None if found is None else str(found)


def annotation(jobset: Object, key: str) -> str | None:
    value = (jobset.get("metadata", {}).get("annotations") or {}).get(key)
    return None if value is None else str(value)


def is_managed(jobset: Object) -> bool:
    """Whether pwdeploy created this JobSet (its managed-by label)."""
    return (jobset.get("metadata", {}).get("labels") or {}).get(ids.MANAGED_BY_LABEL) == ids.MANAGED_BY


def being_deleted(jobset: Object) -> bool:
    """Whether deletion has begun (a deletionTimestamp): it goes once its Jobs and pods are gone."""
    return bool(jobset.get("metadata", {}).get("deletionTimestamp"))


def replicated_jobs(jobset: Object) -> list[ReplicatedJob]:
    """The spec's replicatedJobs, in spec order."""
    found = []
    for index, rj in enumerate(jobset.get("spec", {}).get("replicatedJobs") or []):
        job_spec = rj.get("template", {}).get("spec", {})
        where = f"spec.replicatedJobs[{index}]"
        pods = count(job_spec.get("parallelism") or job_spec.get("completions") or 1, f"{where}.template.spec")
        found.append(ReplicatedJob(str(rj["name"]), count(rj.get("replicas", 1), f"{where}.replicas"), pods))
    return found


def count(value: Any, field: str) -> int:
    """A count the API server wrote (a non-negative JSON integer); anything else (``"lots"``, -1, 2.5, true) is an
    ``ApiError`` naming the field, never an internal error."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    shown = printable(json.dumps(value)[:60])
    raise ApiError(
        f"the API server's answer has {field}: {shown}, not a count",
        hint="the object was written by something other than its controller, or the server is not a Kubernetes "
        "API server; --debug shows where it was read",
    )


def job_index(pod: Object) -> int | None:
    """The pod's JobSet job index (label ``jobset.sigs.k8s.io/job-index``), None when it is not a decimal count:
    anyone who may patch pods may set it to anything (``abc``), and one such pod must not stop a whole report."""
    value = (pod.get("metadata", {}).get("labels") or {}).get(ids.JOB_INDEX_LABEL, "0") or "0"
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 9 else None


def has_status(jobset: Object) -> bool:
    """Whether the JobSet controller has written a status yet."""
    return bool(jobset.get("status"))


def conditions(jobset: Object) -> list[Object]:
    return list((jobset.get("status") or {}).get("conditions") or [])


def true_conditions(jobset: Object) -> dict[str, Object]:
    """The conditions whose status is "True", by type (Completed, Failed, Suspended, ...)."""
    return {str(c.get("type")): c for c in conditions(jobset) if c.get("status") == "True"}


def restarts(jobset: Object) -> int:
    """How many times the JobSet was recreated after a failure (failurePolicy.maxRestarts counts these)."""
    return count((jobset.get("status") or {}).get("restarts") or 0, "status.restarts")


def ready_jobs(jobset: Object) -> dict[str, int]:
    """Ready Jobs per replicatedJob name, from status.replicatedJobsStatus."""
    statuses = (jobset.get("status") or {}).get("replicatedJobsStatus") or []
    return {str(s.get("name")): int(s.get("ready") or 0) for s in statuses}


# ---------------------------------------------------------------------------------------------- discovery


def serves_jobsets(kube: Kube) -> bool:
    """Whether the JobSet API (its CRD) is installed."""
    try:
        answer = kube.request(Action("get", None, name=JOBSETS.api_path), "GET", JOBSETS.api_path)
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    return any(r.get("name") == JOBSETS.plural for r in answer.get("resources") or [])


def namespace_exists(kube: Kube, namespace: str) -> bool | None:
    """True/False, or None when this identity may not read namespaces (common for namespace-scoped users)."""
    try:
        kube.request(Action("get", NAMESPACES, name=namespace), "GET", NAMESPACES.path(name=namespace))
    except ApiError as exc:
        if exc.status == 404:
            return False
        if exc.status == 403:
            return None
        raise
    return True


def preferred_version(kube: Kube, group: str, default: str | None = None) -> str | None:
    """The API group's preferred version from discovery (Kueue's is not fixed: v1beta1, v1beta2, ...; ``default``
    when the answer names none), or None when the cluster does not serve the group."""
    try:
        answer = kube.request(Action("get", None, name=f"/apis/{group}"), "GET", f"/apis/{group}")
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    version = (answer.get("preferredVersion") or {}).get("version") if isinstance(answer, dict) else None
    return str(version) if version else default


def kueue_localqueues(kube: Kube) -> Resource | None:
    """The LocalQueue resource at Kueue's preferred version, or None when Kueue is not installed."""
    version = preferred_version(kube, KUEUE_GROUP, default="v1beta1")
    return None if version is None else localqueues(version)


def localqueue_names(kube: Kube, resource: Resource, namespace: str) -> list[str]:
    queues = kube.list_items(Action("list", resource, namespace), resource.path(namespace))
    return sorted(str(q["metadata"]["name"]) for q in queues)


def localqueue_exists(kube: Kube, resource: Resource, namespace: str, name: str) -> bool:
    try:
        kube.request(Action("get", resource, namespace, name), "GET", resource.path(namespace, name))
    except ApiError as exc:
        if exc.missing == "object":
            return False
        raise
    return True
