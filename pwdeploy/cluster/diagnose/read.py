"""What diagnose reads, in a bounded number of requests: the JobSet, then side by side one list each of its Jobs
and its pods and, when Kueue manages the job, its Workload (and its ProvisioningRequests when an admission check
asks for one); then the events of the job's objects in trouble, each by its uid, at most
``job_events.MAX_OBJECTS`` lists (events that cannot be read are a note); then the last lines of at most
``MAX_LOGS`` containers, concurrently, each in one try of at most ``LOG_WAIT_S`` seconds (a log that cannot be read
in time is a note, never silence, and never a wait of its own). The number of requests grows neither with the
number of pods nor with the namespace's events."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from pwdeploy import identifiers as ids
from pwdeploy.cluster import jobsets as js
from pwdeploy.cluster.job_events import read_events
from pwdeploy.cluster.jobsets import Object as Object  # re-exported: the diagnose rules read it here
from pwdeploy.cluster.logs import log_tail, unread_reason
from pwdeploy.kube.seam import Action, ApiError, Kube, Resource

KUEUE_GROUP = "kueue.x-k8s.io"
AUTOSCALING_GROUP = "autoscaling.x-k8s.io"
MAX_LOGS = 4  # containers whose logs are read
LOG_LINES = 40  # last lines of each
LOG_BYTES = 64 * 1024  # and at most this many bytes (limitBytes)
LOG_WAIT_S = 5.0  # connecting, the first byte and the whole tail of each, in one try (read side by side)


@dataclass(frozen=True)
class LogTail:
    pod: str
    container: str
    previous: bool  # the restarted container's previous run
    lines: list[str]


@dataclass
class Snapshot:
    """The objects a diagnosis is made from. ``status`` fills only what it reads itself (JobSet, pods, events)."""

    name: str
    namespace: str
    jobset: Object
    pods: list[Object]
    events: list[Object]
    now: datetime
    jobs: list[Object] | None = None  # None: not read (status reads no Jobs while the job runs)
    workload: Object | None = None
    kueue_installed: bool | None = None  # None: not looked up
    provisioning: list[Object] = field(default_factory=list)
    logs: list[LogTail] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what could not be read, said beside the findings
    events_read: frozenset[str] | None = None  # uids whose events were read (None: every object's)


def read_snapshot(kube: Kube, namespace: str, name: str) -> Snapshot:
    """Everything but the logs; a missing JobSet is a ClusterError (exit 4) naming it."""
    from concurrent.futures import ThreadPoolExecutor  # here: status, which imports these rules, reads no logs

    jobset = js.require_jobset(kube, namespace, name)
    with ThreadPoolExecutor(max_workers=3) as pool:
        jobs = pool.submit(js.list_jobs, kube, namespace, name)
        pods = pool.submit(js.list_pods, kube, namespace, name)
        kueue = pool.submit(_kueue, kube, namespace, jobset) if _queued(jobset) else None
        snap = Snapshot(name, namespace, jobset, pods.result(), [], kube.clock.utc_now(), jobs.result())
        if kueue is not None:
            snap.kueue_installed, snap.workload, unread = kueue.result()
            snap.notes += [unread] if unread else []
    snap.events, snap.events_read, notes = read_events(kube, namespace, jobset, snap.jobs, snap.pods, snap.workload)
    snap.notes += notes
    workload = str(snap.workload["metadata"].get("name", "")) if snap.workload is not None else None
    if snap.workload is not None and workload and (snap.workload.get("status") or {}).get("admissionChecks"):
        snap.provisioning = _provisioning(kube, namespace, workload)
    return snap


def _list(kube: Kube, resource: Resource, namespace: str, selector: str | None = None) -> list[Object]:
    query = [("labelSelector", selector)] if selector else []
    return kube.list_items(Action("list", resource, namespace), resource.path(namespace), query=query)


def _queued(jobset: Object) -> bool:
    """Kueue is looked up only for a job that names a queue or is suspended (what Kueue does to a job it holds)."""
    labels = jobset.get("metadata", {}).get("labels") or {}
    return bool(labels.get(ids.QUEUE_LABEL)) or bool((jobset.get("spec") or {}).get("suspend"))


def _kueue(kube: Kube, namespace: str, jobset: Object) -> tuple[bool | None, Object | None, str | None]:
    """(Kueue installed, the JobSet's Workload, a note when it could not be read): Kueue labels a Workload with
    its job's UID (kueue.x-k8s.io/job-uid, see kubernetes-sigs/kueue pkg/controller/constants)."""
    version = js.preferred_version(kube, KUEUE_GROUP)
    if version is None:
        return False, None, None
    workloads = Resource(KUEUE_GROUP, version, "workloads", "Workload")
    uid = jobset.get("metadata", {}).get("uid")
    try:
        found = _list(kube, workloads, namespace, f"{KUEUE_GROUP}/job-uid={uid}") if uid else []
    except ApiError as exc:
        if exc.status in (403, 404):  # may not read Workloads: the rest of the diagnosis still stands, said so
            note = f"the job's Kueue Workload could not be read ({exc.message}): why Kueue holds it is not known; " + (
                exc.hint or f"check: kubectl get workloads -n {namespace}"
            )
            return None, None, note
        raise
    return True, (found[-1] if found else None), None


def _provisioning(kube: Kube, namespace: str, workload: str) -> list[Object]:
    """The ProvisioningRequests Kueue made for the Workload: their names start with the Workload's
    (``<workload>-<check>-<attempt>``, kubernetes-sigs/kueue pkg/controller/admissionchecks/provisioning)."""
    version = js.preferred_version(kube, AUTOSCALING_GROUP)
    if version is None:
        return []
    resource = Resource(AUTOSCALING_GROUP, version, "provisioningrequests", "ProvisioningRequest")
    try:
        items = _list(kube, resource, namespace)
    except ApiError as exc:
        if exc.status in (403, 404):
            return []
        raise
    return [p for p in items if str(p.get("metadata", {}).get("name", "")).startswith(f"{workload}-")]


# ---------------------------------------------------------------------------------------------- logs


def read_logs(
    kube: Kube,
    namespace: str,
    wanted: list[tuple[str, str, bool]],
    notes: list[str] | None = None,
    nodes: dict[str, str] | None = None,
) -> list[LogTail]:
    """The last lines of each (pod, container, previous) in ``wanted`` (at most MAX_LOGS), read concurrently; a
    container whose log cannot be read (gone, forbidden, a kubelet that refuses or does not answer in time) is
    left out, and said in ``notes``, naming the component at fault (``nodes``: pod name -> its node)."""
    from concurrent.futures import ThreadPoolExecutor

    wanted = wanted[:MAX_LOGS]
    if not wanted:
        return []
    with ThreadPoolExecutor(max_workers=len(wanted)) as pool:
        tails = list(pool.map(lambda w: _tail(kube, namespace, *w), wanted))
    for (pod, container, previous), tail in zip(wanted, tails, strict=True):
        if isinstance(tail, ApiError) and notes is not None:
            which = f"{pod}/{container}" + (" (previous run)" if previous else "")
            why = unread_reason(tail, (nodes or {}).get(pod, ""))
            notes.append(f"the log of {which} could not be read ({why}): what only it shows is missing")
    return [t for t in tails if isinstance(t, LogTail)]


def _tail(kube: Kube, namespace: str, pod: str, container: str, previous: bool) -> LogTail | ApiError:
    try:
        lines = log_tail(
            kube, namespace, pod, container, lines=LOG_LINES, max_bytes=LOG_BYTES, within=LOG_WAIT_S, previous=previous
        )
    except ApiError as exc:
        return exc
    return LogTail(pod, container, previous, lines)
