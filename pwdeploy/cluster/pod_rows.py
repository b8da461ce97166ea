"""A running job's pods as `status` reads them.

A job of at least ``ROWS_FROM`` pods whose JobSet runs is read as the API server prints its pods
(pwdeploy.kube.tables: name, ready, status, restarts, node; some 160 bytes a pod where the object is some 13 KB),
and whole only where that is not plainly healthy:

- every row must say ``Running``, all containers ready (``n/n``), no restart, and name its pod as the Job
  controller names a JobSet's (``<jobset>-<replicatedJob>-<job index>-<completion index>-<suffix>``), which gives
  its component and slice; any other row, and the pods are read whole, as for a job in trouble;
- the head pods are read whole (each a list selecting it by name; their containers say whether the resource
  manager runs; their log has its count of ready slices), and the first pod of every other replicated job: the
  pods of one replicated job come from one template, so diagnose's rules that look at a healthy pod (the images'
  releases) see what each one would show. Each such pod must show what its row said (component, state, ready,
  restarts), or the pods are read whole;
- every other pod is the facts of its row in a pod's shape (``shown``), for the views that count and list pods.

So `status` of a healthy 1,024-pod job decodes some 170 KB instead of some 13 MB."""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from pwdeploy.cluster import jobsets as js
from pwdeploy.cluster.progress import pod_row
from pwdeploy.identifiers import (
    COMPLETION_INDEX_LABEL,
    HEAD_JOB,
    JOB_INDEX_LABEL,
    JOBSET_NAME_LABEL,
    REPLICATED_JOB_LABEL,
)
from pwdeploy.kube.seam import PODS, Action, Kube

Object = dict[str, Any]
ROWS_FROM = 64  # pods a job expects before its pods are read as rows: below it the objects cost little
COLUMNS = ("Name", "Ready", "Status", "Restarts", "Node")
_INDICES = re.compile(r"(\d{1,9})-(\d{1,9})-[a-z0-9]{1,10}")


class JobPods(NamedTuple):
    shown: list[Object]  # every pod of the job: read whole, or its row's facts in a pod's shape
    read: list[Object]  # the pods read whole: what diagnose's rules look at


class _Row(NamedTuple):
    cells: dict[str, str]
    group: tuple[str, int, int]  # replicatedJob, job index, completion index


def read_pods(kube: Kube, namespace: str, jobset: Object) -> JobPods:
    """The pods of the running JobSet ``jobset`` as its rows where they are all plainly healthy, else whole."""
    name = js.name_of(jobset)
    if sum(rj.replicas * rj.pods_per_job for rj in js.replicated_jobs(jobset)) >= ROWS_FROM:
        from pwdeploy.kube.tables import list_rows

        query = [("labelSelector", f"{JOBSET_NAME_LABEL}={name}")]
        rows = list_rows(kube, Action("list", PODS, namespace), PODS.path(namespace), COLUMNS, query=query)
        parsed = _healthy(rows, jobset) if rows else None
        found = _sampled(kube, namespace, parsed) if parsed else None
        if found is not None:
            return found
    pods = js.list_pods(kube, namespace, name)
    return JobPods(pods, pods)


def _healthy(rows: list[dict[str, str]], jobset: Object) -> list[_Row] | None:
    """The rows with their groups, or None when one is not plainly healthy or names no group of ``jobset``."""
    prefix = js.name_of(jobset) + "-"
    jobs = [rj.name for rj in js.replicated_jobs(jobset)]
    parsed = []
    for cells in rows:
        ready, _, total = cells["Ready"].partition("/")
        if cells["Status"] != "Running" or cells["Restarts"] != "0" or ready != total or not ready.isdigit():
            return None
        rest = cells["Name"].removeprefix(prefix)
        groups = [
            (rj, m) for rj in jobs if rest.startswith(rj + "-") and (m := _INDICES.fullmatch(rest[len(rj) + 1 :]))
        ]
        if rest == cells["Name"] or len(groups) != 1:
            return None
        rj, match = groups[0]
        parsed.append(_Row(cells, (rj, int(match[1]), int(match[2]))))
    return parsed


def _sampled(kube: Kube, namespace: str, rows: list[_Row]) -> JobPods | None:
    """The head pods and the first pod of each other replicated job read whole, the others from their rows; None
    when a pod read whole does not show what its row said, or is gone."""
    rows = sorted(rows, key=lambda r: r.group)
    firsts = {r.group[0]: r for r in reversed(rows)}
    whole = {id(r) for r in rows if r.group[0] == HEAD_JOB} | {id(r) for r in firsts.values()}
    shown: list[Object] = []
    read: list[Object] = []
    for row in rows:
        if id(row) not in whole:
            shown.append(_shaped(row))
            continue
        pod = _get(kube, namespace, row.cells["Name"])
        if pod is None or pod_row(pod) != pod_row(_shaped(row)):
            return None
        shown.append(pod)
        read.append(pod)
    return JobPods(shown, read)


def _get(kube: Kube, namespace: str, name: str) -> Object | None:
    """The pod ``name`` (None when it is gone or being deleted): a list selecting it by name, which the Role that
    lists and watches pods grants (it grants no ``get``)."""
    query = [("fieldSelector", f"metadata.name={name}")]
    found = kube.list_items(Action("list", PODS, namespace), PODS.path(namespace), query=query)
    pod = next((p for p in found if p["metadata"].get("name") == name), None)
    return None if pod is None or pod["metadata"].get("deletionTimestamp") else pod


def _shaped(row: _Row) -> Object:
    """A healthy pod's row in a pod's shape: what the views that count and list pods read of one."""
    rj, index, host = row.group
    count = int(row.cells["Ready"].partition("/")[0])
    node = row.cells["Node"]
    return {
        "metadata": {
            "name": row.cells["Name"],
            "labels": {REPLICATED_JOB_LABEL: rj, JOB_INDEX_LABEL: str(index), COMPLETION_INDEX_LABEL: str(host)},
        },
        "spec": {"nodeName": "" if node == "<none>" else node},
        "status": {"phase": "Running", "containerStatuses": [{"ready": True, "restartCount": 0}] * count},
    }
