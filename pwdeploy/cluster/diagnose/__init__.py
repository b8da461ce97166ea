"""`pwdeploy diagnose`: why a job is not running, with the evidence and the fix.

``diagnose`` reads a bounded set of objects (read.py), each family of causes turns them into observations
(queueing, creation, scheduling, images, containers, multi_tier, pathways, lifecycle), findings.py groups them and
causes.py orders them.
``from_snapshot`` runs the same rules on what `status` already read (no logs, no Kueue): ``findings_from`` is what
the callers of ``status.read_status`` pass it, which imports nothing of diagnose."""

from __future__ import annotations

from datetime import datetime

from pwdeploy.cluster.diagnose import (
    containers,
    creation,
    images,
    lifecycle,
    multi_tier,
    pathways,
    queueing,
    scheduling,
)
from pwdeploy.cluster.diagnose.causes import CAUSES, order
from pwdeploy.cluster.diagnose.findings import Diagnosis, Observation, group
from pwdeploy.cluster.diagnose.pods import expected_jobs, expected_pods
from pwdeploy.cluster.diagnose.read import Snapshot, read_logs, read_snapshot
from pwdeploy.cluster.diagnose.summary import summary
from pwdeploy.cluster.jobsets import Object
from pwdeploy.finding import Finding
from pwdeploy.kube.seam import Kube

__all__ = ["CAUSES", "Diagnosis", "Snapshot", "diagnose", "findings_from", "from_snapshot"]

FAMILIES = (queueing, creation, scheduling, images, containers, multi_tier, pathways, lifecycle)


def diagnose(kube: Kube, namespace: str, name: str) -> Diagnosis:
    """Read the job (a missing one is a ClusterError, exit 4), the logs of the containers that failed, and
    explain it."""
    before = kube.sent
    snap = read_snapshot(kube, namespace, name)
    nodes = {str(p["metadata"].get("name")): str((p.get("spec") or {}).get("nodeName") or "") for p in snap.pods}
    snap.logs = read_logs(kube, namespace, containers.wanted_logs(snap), snap.notes, nodes)
    found = from_snapshot(snap)
    return Diagnosis(found.job, found.namespace, found.summary, found.findings, kube.sent - before, tuple(snap.notes))


def findings_from(
    name: str,
    namespace: str,
    jobset: Object,
    pods: list[Object],
    events: list[Object],
    now: datetime,
    jobs: list[Object] | None = None,
) -> tuple[Finding, ...]:
    """The findings in what `status` read of a job (no logs, no Kueue): what ``status.read_status`` is given as
    its ``explain``."""
    return tuple(from_snapshot(Snapshot(name, namespace, jobset, pods, events, now, jobs)).findings)


def from_snapshot(snap: Snapshot) -> Diagnosis:
    observations: list[Observation] = [obs for family in FAMILIES for obs in family.observations(snap)]
    totals = expected_pods(snap.jobset) | expected_jobs(snap.jobset)
    return Diagnosis(
        snap.name, snap.namespace, summary(snap), order(group(observations, totals)), notes=tuple(snap.notes)
    )
