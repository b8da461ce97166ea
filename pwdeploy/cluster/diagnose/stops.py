"""Stops from outside that failed the JobSet: the head Job failed on main's exit after the head pod was deleted (a
Kueue eviction or preemption, the JobSet suspended, a pod deleted by hand), where the stop should have requeued or
restarted the job.

Texts matched:
- the head Job's condition Failed=True reason ``PodFailurePolicy``, message ``Container main for pod <ns>/<pod>
  failed with exit code <code> matching FailJob rule at index <i>`` (kubernetes/kubernetes
  pkg/controller/job/pod_failure_policy.go);
- what shows the pod was stopped from outside: the Workload's condition ``Evicted`` (Kueue's eviction; ``False``
  with ``Previously: ...`` once requeued: kubernetes-sigs/kueue apis/kueue), the head Job or JobSet
  ``spec.suspend``, or the head pod still listed with a ``deletionTimestamp``; and not an OOM kill (main's
  termination reason ``OOMKilled``, containerd's CRI reason).

Exit 137 (``sigterm-ignored``): the kubelet sent SIGTERM and, once ``terminationGracePeriodSeconds`` was over,
SIGKILL (pkg/kubelet/kuberuntime/kuberuntime_container.go ``killContainer``). A main that is PID 1 of its container
(a head pod without ``shareProcessNamespace``: rendered before pwdeploy rendered it, or
``head.share_process_namespace: false``) never sees a SIGTERM it has no handler for (pid_namespaces(7)). Exit 143
(a head policy that failed on 143, as pwdeploy rendered it before 143 became a retry code) stays a ``job-failed``
finding with its own fix (``lifecycle``).
"""

from __future__ import annotations

from pwdeploy import identifiers as ids
from pwdeploy.cluster.diagnose import pods as p
from pwdeploy.cluster.diagnose.findings import Cause, quote
from pwdeploy.cluster.diagnose.read import Snapshot

KILLED = 137  # 128 + SIGKILL: what the kubelet's SIGKILL at the end of the grace period makes of main

SIGTERM_IGNORED = Cause(
    "sigterm-ignored",
    "end",
    "the head Job failed on main's exit 137 after a stop from outside (a Kueue eviction, a suspend, a deleted pod): "
    "main ignored SIGTERM as PID 1 of its container, or did not end within the grace period",
    severity="error",
    source=(
        "kubernetes/kubernetes: pkg/controller/job/pod_failure_policy.go (FailJob), "
        "pkg/kubelet/kuberuntime/kuberuntime_container.go (killContainer); pid_namespaces(7)"
    ),
)


def failed_on_exit(snap: Snapshot, code: int) -> tuple[str, str] | None:
    """(the head Job's name, its failure message) when it failed on main's exit ``code`` matching its FailJob
    rule; else None."""
    for job in snap.jobs or []:
        labels = (job.get("metadata") or {}).get("labels") or {}
        failed = p.condition(job, "Failed")
        if labels.get(ids.REPLICATED_JOB_LABEL) != ids.HEAD_JOB or failed is None or failed.get("status") != "True":
            continue
        message = str(failed.get("message") or "")
        if (
            failed.get("reason") == "PodFailurePolicy"
            and message.startswith(f"Container {ids.MAIN_CONTAINER} ")
            and f" failed with exit code {code} matching FailJob " in message
        ):
            return str((job.get("metadata") or {}).get("name")), message
    return None


def eviction(snap: Snapshot) -> str:
    """Kueue's eviction of the job, from its Workload's Evicted condition (False again once it was requeued, the
    message then "Previously: ..."); "" when there is none."""
    evicted = p.condition(snap.workload, "Evicted") if snap.workload is not None else None
    if evicted is None:
        return ""
    return f"Evicted {evicted.get('reason')}: {quote(str(evicted.get('message') or ''))}"


def stopped_from_outside(snap: Snapshot) -> str | None:
    """How the head pod was stopped from outside, in words; None when nothing shows it was, or main was OOM-killed."""
    head = [pod for pod in snap.pods if p.role(pod) == "head pod"]
    if any(_main_reason(pod) == "OOMKilled" for pod in head):
        return None
    evicted = eviction(snap)
    if evicted:
        return f"Kueue evicted the job ({evicted})"
    suspended = [obj for obj in [snap.jobset, *(snap.jobs or [])] if (obj.get("spec") or {}).get("suspend") is True]
    if suspended:
        return "the JobSet was suspended (its Jobs' pods deleted)"
    deleted = [pod for pod in head if (pod.get("metadata") or {}).get("deletionTimestamp")]
    if deleted:
        when = deleted[0]["metadata"]["deletionTimestamp"]
        return f"the head pod {p.name(deleted[0])} was deleted (deletionTimestamp {when})"
    return None


def sigterm_ignored(snap: Snapshot) -> tuple[str, str] | None:
    """(evidence, fix) when the head Job failed on main's exit 137 after a stop from outside."""
    failed = failed_on_exit(snap, KILLED)
    stop = stopped_from_outside(snap) if failed is not None else None
    if failed is None or stop is None:
        return None
    job, message = failed
    evidence = f"Job {job} failed: {quote(message)}; {stop}"
    then = "which the head's FailJob rule fails the JobSet on instead of leaving it to be requeued or restarted"
    if shares_process_namespace(snap.jobset):
        fix = (
            f"main did not end within terminationGracePeriodSeconds of the stop's SIGTERM and was SIGKILLed (137), "
            f"{then}: a SIGTERM handler must save and exit 143 in time (pwdeploy.runtime.stop_on_sigterm exits "
            "before the SIGKILL), or raise scheduling.termination_grace_seconds; then resubmit (pwdeploy submit -f "
            "job.yaml --replace)"
        )
    else:
        fix = (
            "main is PID 1 of its container (this JobSet's head pod does not share its process namespace: rendered "
            "by an earlier pwdeploy, or head.share_process_namespace: false) and has no SIGTERM handler, so the "
            f"kernel dropped the kubelet's SIGTERM and main was SIGKILLed after the grace period (137), {then}: "
            "render it again with this pwdeploy (SIGTERM then ends main with 143) or handle SIGTERM in the program "
            "(pwdeploy.runtime.stop_on_sigterm), and resubmit (pwdeploy submit -f job.yaml --replace)"
        )
    return evidence, fix


def shares_process_namespace(jobset: p.Object) -> bool:
    """Whether the live JobSet's head pod template shares its process namespace (main is not PID 1)."""
    for rj in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        if rj.get("name") == ids.HEAD_JOB:
            pod = (((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
            return pod.get("shareProcessNamespace") is True
    return False


def _main_reason(pod: p.Object) -> str:
    for c in p.containers(pod):
        if c.spec.get("name") == ids.MAIN_CONTAINER:
            return str(((c.status.get("state") or {}).get("terminated") or {}).get("reason") or "")
    return ""
