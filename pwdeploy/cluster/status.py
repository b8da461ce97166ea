"""What `pwdeploy status` shows of a job: its state and conditions, the first findings of `diagnose` (found by the
rules the caller passes in, ``explain``, in the objects status reads anyway: no logs, no Kueue), its pods per
component and slice, and, while it is not running, the latest warning events of its objects in trouble (read by
object: pwdeploy.cluster.job_events), and, while it has not ended, the resource manager's count of ready slices
(the end of its log, once it runs: one try of at most ``LOG_WAIT_S`` seconds; a count that cannot be read is a note
saying why, beside everything else). Reading (``read_status``) and formatting (``status_lines``) are apart, so
other views (diagnose, tests) use the same objects."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from pwdeploy.cluster import jobsets as js
from pwdeploy.cluster.job_events import read_events
from pwdeploy.cluster.pod_rows import read_pods
from pwdeploy.cluster.progress import (
    age,
    job_state,
    pod_group,
    pod_row,
    progress,
    progress_line,
    slices_text,
    table,
)
from pwdeploy.cluster.ready_slices import SlicesReady, read_slices, rm_running, unread_note, worker_slices
from pwdeploy.finding import Finding
from pwdeploy.identifiers import HEAD_JOB
from pwdeploy.kube.seam import ApiError, Kube
from pwdeploy.text import evidence, masked

LATEST_EVENTS = 10
FIRST_FINDINGS = 3
FINDING_WIDTH = 160
MESSAGE_WIDTH = 400  # of a condition's or an event's message: the whole text is in diagnose -o json


class JobStatus(NamedTuple):
    name: str
    namespace: str
    jobset: dict[str, Any]
    pods: list[dict[str, Any]]
    warning_events: list[dict[str, Any]]  # empty while the job runs or after it completed
    now: datetime
    findings: tuple[Finding, ...] = ()  # the findings ``explain`` found in the objects above, most important first
    slices: SlicesReady | None = None  # the resource manager's count, while the job has not ended
    notes: tuple[str, ...] = ()  # what could not be read (events, the count), and why


# What finds a job's findings in what status read of it: its name and namespace, the JobSet, pods, events, the time
# and its Jobs (None: not read). diagnose's rules (cluster.diagnose.findings_from), passed in by the caller: status
# is a view, and imports nothing of diagnose.
Explain = Callable[
    [str, str, dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], datetime, list[dict[str, Any]] | None],
    Sequence[Finding],
]


def read_status(kube: Kube, namespace: str, name: str, explain: Explain | None = None) -> JobStatus:
    """The JobSet (a missing one is a ClusterError naming it), its pods (a large running job's as the server
    prints them where they are plainly healthy: pwdeploy.cluster.pod_rows) and, unless it runs, its Jobs and the
    events of its objects in trouble (pwdeploy.cluster.job_events: events that cannot be read are a note); with
    ``explain``, the findings it finds in them (in the pods read whole)."""
    obj = js.require_jobset(kube, namespace, name)
    phase = job_state(obj).phase
    pods, read = read_pods(kube, namespace, obj) if phase == "Running" else (js.list_pods(kube, namespace, name),) * 2
    jobs: list[dict[str, Any]] | None = None
    events: list[dict[str, Any]] = []
    notes: list[str] = []
    if phase not in ("Running", "Completed"):
        jobs = js.list_jobs(kube, namespace, name)
        events, _, notes = read_events(kube, namespace, obj, jobs, pods)
    now = kube.clock.utc_now()
    findings = () if explain is None else tuple(explain(name, namespace, obj, read, events, now, jobs))
    slices, unread = _slices(kube, namespace, obj, pods)
    warnings = [e for e in events if e.get("type") == "Warning"][-LATEST_EVENTS:]
    return JobStatus(name, namespace, obj, pods, warnings, now, findings, slices, (*notes, *unread))


def _slices(
    kube: Kube, namespace: str, obj: dict[str, Any], pods: list[dict[str, Any]]
) -> tuple[SlicesReady | None, tuple[str, ...]]:
    """The resource manager's count while the job has not ended and it runs, else None; a note when it runs and
    its log cannot be read."""
    if job_state(obj).phase in ("Completed", "Failed", "Deleting", "Suspended"):
        return None, ()
    heads = [
        p for p in pods if pod_group(p)[0] == HEAD_JOB and rm_running(p) and not p["metadata"].get("deletionTimestamp")
    ]
    if not heads:
        return None, ()
    head = heads[0]
    try:
        return read_slices(kube, namespace, head["metadata"]["name"], worker_slices(obj)), ()
    except ApiError as exc:
        return None, (unread_note(exc, str((head.get("spec") or {}).get("nodeName") or "")),)


def status_lines(status: JobStatus) -> list[str]:
    obj, pods = status.jobset, status.pods
    state = job_state(obj)
    lines = [f"jobset {status.name}  namespace {status.namespace}  age {age(js.created_at(obj), status.now)}"]
    lines.append(progress_line(state, progress(obj, pods)))
    if status.slices is not None:
        lines.append(f"  {status.slices.text}")
    lines += [f"  note: {evidence(note, MESSAGE_WIDTH)}" for note in status.notes]
    if state.reason or state.message:
        lines.append(f"  {evidence(state.reason)}: {evidence(state.message, MESSAGE_WIDTH)}".rstrip(": "))
    if status.findings:
        more = len(status.findings) - FIRST_FINDINGS
        lines.append(f"\nfindings (evidence and fixes: pwdeploy diagnose {status.name} -n {status.namespace}):")
        lines += [f"  {f.line(FINDING_WIDTH)}" for f in status.findings[:FIRST_FINDINGS]]
        lines += [f"  ... and {more} more"] if more > 0 else []
    conditions = js.conditions(obj)
    if conditions:
        rows: list[tuple[str, ...]] = [("CONDITION", "STATUS", "REASON", "MESSAGE")]
        rows += [
            tuple(evidence(str(c.get(key, "")), MESSAGE_WIDTH) for key in ("type", "status", "reason", "message"))
            for c in conditions
        ]
        lines.append("\n" + table(rows))
    if pods:
        ordered = sorted(pods, key=lambda p: (pod_group(p), p["metadata"].get("name", "")))
        lines.append("\n" + table([("COMPONENT", "POD", "STATE", "READY", "RESTARTS"), *map(pod_row, ordered)]))
    if status.warning_events:
        lines.append(f"\nwarning events (latest {LATEST_EVENTS}):")
        for e in status.warning_events:
            who = str((e.get("involvedObject") or {}).get("name", ""))
            said = f"{who}: {e.get('reason', '')}: {e.get('message', '')}"
            lines.append(f"  {evidence(said, MESSAGE_WIDTH)}")
    return lines


def status_document(status: JobStatus) -> dict[str, Any]:
    """``status -o json|yaml``: the same facts as ``status_lines``, as data (shape in docs/output.md). Values from
    the cluster are kept as sent (JSON and YAML escape their control characters), credential-looking ones masked."""
    obj, pods = status.jobset, status.pods
    state = job_state(obj)
    return {
        "job": status.name,
        "namespace": status.namespace,
        "created": js.created_at(obj),
        "state": {
            "phase": state.phase,
            "reason": masked(state.reason),
            "message": masked(state.message),
            "restarts": state.restarts,
        },
        "groups": [group._asdict() for group in progress(obj, pods)],
        "conditions": [
            {key: masked(str(c.get(key, ""))) for key in ("type", "status", "reason", "message")}
            for c in js.conditions(obj)
        ],
        "pods": [dict(zip(POD_KEYS, pod_row(p), strict=True)) for p in sorted(pods, key=_pod_order)],
        "warning_events": [
            {
                "object": str((e.get("involvedObject") or {}).get("name", "")),
                "reason": masked(str(e.get("reason", ""))),
                "message": masked(str(e.get("message", ""))),
            }
            for e in status.warning_events
        ],
        # The one finding shape, with the keys `status -o json` printed before it (cause, evidence: a contract).
        "findings": [f.as_json(cause="id", evidence="message") for f in status.findings],
        "slices": status.slices._asdict() if status.slices is not None else None,
        "notes": list(status.notes),
    }


POD_KEYS = ("component", "pod", "state", "ready", "restarts")


def _pod_order(pod: dict[str, Any]) -> tuple[tuple[str, int], str]:
    return pod_group(pod), str(pod["metadata"].get("name", ""))


class JobSummary(NamedTuple):
    """One pwdeploy job as `pwdeploy list` shows it: where, what state, how many slices ready, since when."""

    namespace: str
    name: str
    state: str
    slices: str  # ready/total, or "-"
    created: str | None
    age: str


def summaries(jobsets: list[dict[str, Any]], now: datetime) -> list[JobSummary]:
    """The jobs' summaries, by namespace and name."""
    return [
        JobSummary(
            js.namespace_of(obj),
            js.name_of(obj),
            job_state(obj).phase,
            slices_text(obj),
            js.created_at(obj),
            age(js.created_at(obj), now),
        )
        for obj in sorted(jobsets, key=lambda o: (js.namespace_of(o), js.name_of(o)))
    ]


def list_document(jobs: list[JobSummary]) -> dict[str, Any]:
    """``list -o json|yaml``: one entry per pwdeploy JobSet (shape in docs/output.md)."""
    return {"jobs": [job._asdict() for job in jobs]}
