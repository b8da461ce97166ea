"""Pure summaries of a JobSet and its pods: the job's state, pods per component and slice, table rows."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, NamedTuple

from pwdeploy.cluster import jobsets as js
from pwdeploy.cluster.jobsets import Object
from pwdeploy.identifiers import COMPLETION_INDEX_LABEL, HEAD_JOB, REPLICATED_JOB_LABEL, WORKER_JOB
from pwdeploy.text import evidence, one_line

Phase = Literal["Pending", "Starting", "Running", "Completed", "Failed", "Suspended", "Deleting"]
TERMINAL: tuple[Phase, ...] = ("Completed", "Failed")


class JobState(NamedTuple):
    phase: Phase
    reason: str = ""
    message: str = ""
    restarts: int = 0


class GroupProgress(NamedTuple):
    """The pods of one component: the head, or one worker slice."""

    label: str
    expected: int
    scheduled: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0

    @property
    def done(self) -> bool:
        return self.running + self.succeeded >= self.expected


def job_state(jobset: Object) -> JobState:
    restarts = js.restarts(jobset)
    true = js.true_conditions(jobset)
    if js.being_deleted(jobset):
        return JobState("Deleting", restarts=restarts)
    phases: tuple[Phase, ...] = ("Failed", "Completed", "Suspended")
    for phase in phases:
        if phase in true:
            cond = true[phase]
            return JobState(phase, str(cond.get("reason") or ""), str(cond.get("message") or ""), restarts)
    replicas = {rj.name: rj.replicas for rj in js.replicated_jobs(jobset)}
    ready = js.ready_jobs(jobset)
    if replicas and all(ready.get(name, 0) >= count for name, count in replicas.items()):
        return JobState("Running", restarts=restarts)
    return JobState("Starting" if js.has_status(jobset) else "Pending", restarts=restarts)


def group_label(replicated_job: str, index: int, replicas: int) -> str:
    if replicated_job == HEAD_JOB:
        return "head"
    if replicated_job == WORKER_JOB:
        return f"slice {index}"
    return replicated_job if replicas == 1 else f"{replicated_job} {index}"


def expected_groups(jobset: Object) -> dict[tuple[str, int], str]:
    """(replicatedJob name, job index) -> label, in spec order."""
    groups: dict[tuple[str, int], str] = {}
    for rj in js.replicated_jobs(jobset):
        for index in range(rj.replicas):
            groups[(rj.name, index)] = group_label(rj.name, index, rj.replicas)
    return groups


def pod_group(pod: Object) -> tuple[str, int]:
    """(replicatedJob, job index); a pod whose job-index label is not a count is in no group (index -1)."""
    labels = pod.get("metadata", {}).get("labels") or {}
    index = js.job_index(pod)
    return str(labels.get(REPLICATED_JOB_LABEL, "")), -1 if index is None else index


def progress(jobset: Object, pods: list[Object]) -> list[GroupProgress]:
    """Pods scheduled/running/finished per component and slice (pods being deleted are not counted)."""
    per_job = {rj.name: rj.pods_per_job for rj in js.replicated_jobs(jobset)}
    tallies: dict[tuple[str, int], dict[str, int]] = {key: {} for key in expected_groups(jobset)}
    for pod in pods:
        key = pod_group(pod)
        if key not in tallies or pod.get("metadata", {}).get("deletionTimestamp"):
            continue
        phase = pod.get("status", {}).get("phase", "Pending")
        tally = tallies[key]
        tally["scheduled"] = tally.get("scheduled", 0) + int(_scheduled(pod))
        for name, match in (("running", "Running"), ("succeeded", "Succeeded"), ("failed", "Failed")):
            tally[name] = tally.get(name, 0) + int(phase == match)
    labels = expected_groups(jobset)
    return [GroupProgress(labels[key], per_job.get(key[0], 1), **tally) for key, tally in tallies.items()]


def _scheduled(pod: Object) -> bool:
    if pod.get("spec", {}).get("nodeName"):
        return True
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "PodScheduled" and c.get("status") == "True" for c in conditions)


def all_running(groups: list[GroupProgress]) -> bool:
    return bool(groups) and all(g.done for g in groups)


def running_state(jobset: Object, groups: list[GroupProgress]) -> JobState:
    """The job's state as one waiting for it to run means it: Running once every pod it expects runs. The JobSet's
    own phase follows later: the Job controller counts a pod ready in a batched sync, the JobSet controller its Job
    ready at its next reconcile, seconds on a busy control plane. What `submit --wait` ends on is what `drill`
    accepts as running."""
    state = job_state(jobset)
    if state.phase in ("Pending", "Starting") and all_running(groups):
        return state._replace(phase="Running")
    return state


def progress_line(state: JobState, groups: list[GroupProgress], *, max_groups: int = 6) -> str:
    """``Starting: head 1/1 running; slice 0 2/2 running; slice 1 0/2 (1 scheduled)``; many slices are summed."""
    parts = [_group_text(g) for g in groups[:max_groups]] if len(groups) <= max_groups else _summed(groups)
    restarts = f" (restarts {state.restarts})" if state.restarts else ""
    return f"{state.phase}{restarts}: " + "; ".join(parts)


def _group_text(g: GroupProgress) -> str:
    text = f"{g.label} {g.running}/{g.expected} running"
    pending = g.scheduled - g.running - g.succeeded - g.failed
    extra = [f"{pending} scheduled"] if pending > 0 else []
    extra += [f"{g.succeeded} succeeded"] if g.succeeded else []
    extra += [f"{g.failed} failed"] if g.failed else []
    return text + (f" ({', '.join(extra)})" if extra else "")


def _summed(groups: list[GroupProgress]) -> list[str]:
    head = [_group_text(g) for g in groups if g.label == "head"]
    slices = [g for g in groups if g.label != "head"]
    ready = sum(g.done for g in slices)
    pods = sum(g.expected for g in slices)
    running = sum(g.running for g in slices)
    return [*head, f"slices {ready}/{len(slices)} ready ({running}/{pods} worker pods running)"]


# ---------------------------------------------------------------------------------------------- tables


def slices_text(jobset: Object) -> str:
    """``ready/total`` worker slices, from the JobSet status."""
    replicas = next((rj.replicas for rj in js.replicated_jobs(jobset) if rj.name == WORKER_JOB), 0)
    return f"{js.ready_jobs(jobset).get(WORKER_JOB, 0)}/{replicas}"


def age(timestamp: str | None, now: datetime) -> str:
    if not timestamp:
        return "-"
    try:
        created = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
        if created.tzinfo is None:
            raise ValueError(timestamp)
    except ValueError:  # not RFC 3339 (`creationTimestamp: "yesterday"`): shown as kubectl shows a bad time
        return "<invalid>"
    seconds = max(0, int((now - created).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


SCHEDULER_MESSAGE_WIDTH = 72  # of a pod's state in the status table
CELL_WIDTH = 200  # of any other text from the cluster in a table cell


def pod_row(pod: Object) -> tuple[str, str, str, str, str]:
    """(component, pod, state, ready, restarts) for the status table."""
    meta, status = pod.get("metadata", {}), pod.get("status", {})
    labels = meta.get("labels") or {}
    rj, index = pod_group(pod)
    component = group_label(rj, index, 2)
    if rj == WORKER_JOB:
        component += f" host {labels.get(COMPLETION_INDEX_LABEL, '?')}"
    statuses = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    ready = sum(bool(s.get("ready")) for s in statuses)
    restarts = sum(int(s.get("restartCount") or 0) for s in statuses)
    # kubectl's rule: a pod being deleted is Terminating whatever its phase (its containers may still run)
    state = "Terminating" if meta.get("deletionTimestamp") else _pod_state(status, statuses)
    return component, str(meta.get("name", "")), state, f"{ready}/{len(statuses)}", str(restarts)


def _pod_state(status: dict[str, Any], statuses: list[dict[str, Any]]) -> str:
    for s in statuses:
        waiting = (s.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") and waiting["reason"] != "PodInitializing":
            return one_line(str(waiting["reason"]), CELL_WIDTH)
        terminated = (s.get("state") or {}).get("terminated") or {}
        if terminated.get("exitCode"):
            return one_line(f"{terminated.get('reason', 'Error')} (exit {terminated['exitCode']})", CELL_WIDTH)
    unscheduled = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled" and c.get("status") == "False"),
        None,
    )
    if unscheduled is not None:
        # the whole text is in the events below, and in diagnose
        message = evidence(str(unscheduled.get("message", "")), SCHEDULER_MESSAGE_WIDTH)
        return f"Unschedulable: {message}".rstrip(": ")
    return one_line(str(status.get("phase", "Pending")))


def table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)
