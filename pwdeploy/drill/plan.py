"""`pwdeploy drill`: one real fault injected into a running job, the rule the JobSet's failure policy predicts for
it. The requests that inject it are ``drill.inject``, following the job afterwards ``drill.follow``, the report
``drill.verdict``.

The faults (docs/drill.md says what each emulates on GKE and what it does not):

- ``lose_slice``: every worker pod of one slice is evicted through the Eviction API (``POST pods/NAME/eviction``,
  policy/v1). The API server then marks the pod with the condition ``DisruptionTarget`` (reason
  ``EvictionByEvictionAPI``) before it deletes it, as the taint manager does for a lost node
  (``DeletionByTaintManager``) and a drain does for node maintenance (kubernetes/kubernetes
  pkg/registry/core/pod/storage/eviction.go, ``addConditionAndDeletePod``; "Pod disruption conditions",
  kubernetes.io/docs/concepts/workloads/pods/disruptions/). A plain DELETE leaves no condition, so the Job
  controller would see a different failure than a lost node gives: the head's podFailurePolicy, for one, ignores
  only pods with DisruptionTarget.
- ``kill_worker``: one worker container is sent a signal through the exec subresource (``kill -s SIG 1`` in the
  container). No Kubernetes API sets a container's exit code; a container killed by signal N exits with 128 + N,
  so ``--exit-code`` must be such a code.
- ``evict_head``: the head pod is evicted as above (node maintenance of the CPU node pool).
- ``delete_head``: the head pod is deleted with a plain DELETE, no DisruptionTarget, as a person deleting it does
  (and as the Job controller deletes a suspended Job's pods when Kueue evicts the job). The kubelet stops main with
  SIGTERM, then SIGKILL after the grace period; what main exits with is read from the live head pod's template
  (``manifests.head_stop``, as `local run --evict-by delete` reads the rendered one): 143 when the pod shares its
  process namespace, 137 when main is PID 1 of its container (for a program without a SIGTERM handler).

The prediction is the one `local run` makes for the same fault, by the same evaluator
(``pwdeploy.manifests.failure_policy``): a lost slice is the slice's worker Job failing once its pods used up its
backoffLimit (``local.restarts.cluster_failure``), or, for an elastic job, the elastic manager's in-process
recovery (`local run --lose-slice`).
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from typing import Literal

from pwdeploy import identifiers as ids
from pwdeploy.cluster import jobsets as js
from pwdeploy.cluster.jobsets import Object
from pwdeploy.errors import ArgumentError, ClusterError
from pwdeploy.kube.seam import Kube
from pwdeploy.manifests import failure_policy as fp
from pwdeploy.manifests import head_stop
from pwdeploy.manifests.lost_slice import slice_lost

FaultKind = Literal["lose_slice", "kill_worker", "evict_head", "delete_head"]


@dataclass(frozen=True)
class Fault:
    """One fault as the flags named it."""

    kind: FaultKind
    slice_index: int | None = None
    host: int | None = None
    exit_code: int | None = None

    @property
    def signal(self) -> signal.Signals | None:
        return None if self.exit_code is None else signal.Signals(self.exit_code - 128)

    def describe(self) -> str:
        if self.kind == "lose_slice":
            return f"lose slice {self.slice_index} (evict its worker pods, as a lost node or maintenance does)"
        if self.kind == "kill_worker":
            sig = self.signal.name if self.signal else "?"
            return f"kill worker {self.slice_index}/{self.host} ({sig} to its container: exit code {self.exit_code})"
        if self.kind == "delete_head":
            return "delete the head pod (no DisruptionTarget, as a person deleting it does: the kubelet stops main)"
        return "evict the head pod (as node maintenance does)"

    def flags(self) -> str:
        if self.kind == "lose_slice":
            return f"--lose-slice {self.slice_index}"
        if self.kind == "kill_worker":
            return f"--kill-worker {self.slice_index}/{self.host} --exit-code {self.exit_code}"
        return "--delete-head" if self.kind == "delete_head" else "--evict-head"


def parse_fault(
    lose_slice: int | None, kill_worker: str | None, exit_code: int | None, evict_head: bool, delete_head: bool = False
) -> Fault:
    """The one fault the arguments ask for; an ArgumentError naming the argument for anything else."""
    chosen = [f"`{f}`" for f, v in (("lose_slice", lose_slice), ("kill_worker", kill_worker)) if v is not None]
    chosen += [f"`{f}`" for f, v in (("evict_head", evict_head), ("delete_head", delete_head)) if v]
    if len(chosen) != 1:
        what = "none was given" if not chosen else f"got {', '.join(chosen)}"
        faults = "`lose_slice`, `kill_worker`, `evict_head` or `delete_head`"
        raise ArgumentError(None, f"give exactly one fault: {faults} ({what})")
    if exit_code is not None and kill_worker is None:
        raise ArgumentError("exit_code", "applies only to `kill_worker`")
    if lose_slice is not None:
        return Fault("lose_slice", slice_index=lose_slice)
    if evict_head or delete_head:
        return Fault("evict_head" if evict_head else "delete_head")
    assert kill_worker is not None
    m = re.fullmatch(r"(\d{1,6})/(\d{1,6})", kill_worker.strip())
    if m is None:
        raise ArgumentError("kill_worker", f"{kill_worker!r} is not SLICE/HOST (e.g. 0/1)")
    if exit_code is None:
        raise ArgumentError("exit_code", "`kill_worker` needs `exit_code=N` (e.g. 137 for SIGKILL)")
    if not _signal_code(exit_code):
        raise ArgumentError(
            "exit_code",
            f"{exit_code} is not an exit code a signal gives: no Kubernetes API sets a container's exit code, "
            "pwdeploy can only signal the container's process (exit code 128 + signal)",
            hint="use 143 (SIGTERM), 137 (SIGKILL), 134 (SIGABRT) or another 128 + N",
        )
    _check_ending(exit_code)
    return Fault("kill_worker", slice_index=int(m[1]), host=int(m[2]), exit_code=exit_code)


def _signal_code(code: int) -> bool:
    try:
        signal.Signals(code - 128)
    except ValueError:
        return False
    return code > 128


# Signals whose default action does not end a process (signal(7): Stop, Cont, Ign): a container sent one goes on,
# or stops, and never exits with 128 + the signal.
NOT_ENDING = frozenset(
    {signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGCONT, signal.SIGCHLD, signal.SIGURG,
     signal.SIGWINCH}
)  # fmt: skip


def _check_ending(exit_code: int) -> None:
    sig = signal.Signals(exit_code - 128)
    if sig in NOT_ENDING:
        raise ArgumentError(
            "exit_code",
            f"{exit_code} is 128 + {sig.name}, which does not end a process (it stops, continues or is ignored): "
            f"no container exits with {exit_code}",
            hint="use 143 (SIGTERM), 137 (SIGKILL), 134 (SIGABRT) or another signal that ends a process",
        )


# ---------------------------------------------------------------------------------------------- the job and its pods


@dataclass(frozen=True)
class Target:
    """What the fault hits, found on the cluster."""

    pods: tuple[str, ...]  # pod names
    container: str | None  # kill_worker: the container signalled


def slice_count(jobset: Object) -> int:
    return next((rj.replicas for rj in js.replicated_jobs(jobset) if rj.name == ids.WORKER_JOB), 0)


def hosts_per_slice(jobset: Object) -> int:
    return next((rj.pods_per_job for rj in js.replicated_jobs(jobset) if rj.name == ids.WORKER_JOB), 0)


def check_managed(jobset: Object, namespace: str) -> None:
    """A JobSet another tool created is refused, as `delete` refuses it: the prediction reads pwdeploy's rendering
    (its failure policy, replicated Jobs, labels and container names), and the job is that tool's to disturb."""
    if js.is_managed(jobset):
        return
    other = ((jobset.get("metadata") or {}).get("labels") or {}).get(ids.MANAGED_BY_LABEL)
    by = f" ({ids.MANAGED_BY_LABEL}: {other})" if other else ""
    raise ClusterError(
        f"jobset {js.name_of(jobset)} in namespace {namespace} is not managed by pwdeploy{by}: not drilling it",
        hint="a drill predicts what pwdeploy's rendering does, and a JobSet another tool made is that tool's "
        "(`delete` refuses it too); drill a job pwdeploy submitted",
    )


def check_fault_fits(fault: Fault, jobset: Object) -> None:
    """A slice or host the job does not have is an ArgumentError that says how many there are."""
    slices, hosts = slice_count(jobset), hosts_per_slice(jobset)
    if fault.slice_index is not None and fault.slice_index >= slices:
        raise ArgumentError(
            fault.kind,
            f"job {js.name_of(jobset)} has no slice {fault.slice_index}: it has {slices} (slices 0 to {slices - 1})",
        )
    if fault.host is not None and fault.host >= hosts:
        raise ArgumentError(
            "kill_worker",
            f"slice {fault.slice_index} of job {js.name_of(jobset)} has no host {fault.host}: it has {hosts} "
            f"(hosts 0 to {hosts - 1})",
        )


def find_target(kube: Kube, namespace: str, name: str, fault: Fault) -> Target:
    """The live pods the fault hits (newest of each slot); a ClusterError when they are not there."""
    if fault.kind in ("evict_head", "delete_head"):
        pods = js.list_pods(kube, namespace, name, **{ids.REPLICATED_JOB_LABEL: ids.HEAD_JOB})
    else:
        labels = {ids.REPLICATED_JOB_LABEL: ids.WORKER_JOB, ids.JOB_INDEX_LABEL: str(fault.slice_index)}
        if fault.host is not None:
            labels[ids.COMPLETION_INDEX_LABEL] = str(fault.host)
        pods = js.list_pods(kube, namespace, name, **labels)
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp") and _phase(p) in ("Running", "Pending")]
    if not live:
        raise ClusterError(
            f"no live pod to hit for {fault.flags()} in job {name}",
            hint=f"the job must be running: pwdeploy status {name} -n {namespace}",
        )
    container = ids.WORKER_CONTAINER if fault.kind == "kill_worker" else None
    return Target(tuple(sorted(str(p["metadata"]["name"]) for p in live)), container)


def _phase(pod: Object) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def is_elastic(jobset: Object) -> bool:
    """Whether the job may lose slices and go on (tpu.elastic_slices > 0: its workers carry PWDEPLOY_ELASTIC_SLICES
    or the head's server --num_elastic_slices)."""
    for rj in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        pod = ((rj.get("template") or {}).get("spec") or {}).get("template", {}).get("spec") or {}
        for c in pod.get("containers") or []:
            if any(str(a).startswith("--num_elastic_slices=") for a in c.get("args") or []):
                return True
            if any(
                e.get("name") == ids.ELASTIC_SLICES_ENV and e.get("value") not in (None, "0")
                for e in c.get("env") or []
            ):
                return True
    return False


def has_main(jobset: Object) -> bool:
    """Whether the head pod runs the user's program (a headless job's does not: it has no step reports)."""
    for rj in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        if rj.get("name") == ids.HEAD_JOB:
            pod = ((rj.get("template") or {}).get("spec") or {}).get("template", {}).get("spec") or {}
            return any(c.get("name") == ids.MAIN_CONTAINER for c in pod.get("containers") or [])
    return False


def queued_capacity(jobset: Object) -> bool:
    """Whether the workers run on queued-provisioning nodes (``cloud.google.com/gke-queued``): a lost slice's
    nodes are gone with their provisioning request, and a replacement waits for new capacity that may never come."""
    for rj in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        if rj.get("name") != ids.WORKER_JOB:
            continue
        pod = ((rj.get("template") or {}).get("spec") or {}).get("template", {}).get("spec") or {}
        if ids.QUEUED_LABEL in (pod.get("nodeSelector") or {}):
            return True
    return False


# ---------------------------------------------------------------------------------------------- the prediction


@dataclass(frozen=True)
class Prediction:
    """What the failure policy (and, for an elastic job, the elastic manager) will do about the fault."""

    outcome: Literal["jobset_restart", "elastic_recovery", "pod_replaced", "job_ends"]
    decision: fp.Decision | None  # None: elastic recovery (the JobSet is not involved)
    fatal: bool
    why: str


def predict(fault: Fault, jobset: Object) -> Prediction:
    """The rule that will fire, as `local run` predicts it for the same fault."""
    status = jobset.get("status") or {}
    counted = int(status.get("restartsCountTowardsMax") or status.get("restarts") or 0)
    if fault.kind == "lose_slice" and is_elastic(jobset):
        why = "tpu.elastic_slices > 0: the elastic manager drops the slice and goes on in-process"
        return Prediction("elastic_recovery", None, False, why)
    failure = pod_failure(fault, jobset)
    decision = fp.decide(jobset, [failure], restarts=counted)
    if decision.action is fp.Action.FAIL:
        return Prediction("job_ends", decision, True, decision.why)
    if decision.restarts:
        return Prediction("jobset_restart", decision, False, decision.why)
    return Prediction("pod_replaced", decision, False, decision.why)


def pod_failure(fault: Fault, jobset: Object) -> fp.PodFailure:
    """The pod failure the evaluator is given for the fault (a lost slice as `local run` models it)."""
    if fault.kind == "lose_slice":
        return slice_lost(jobset, fault.slice_index or 0)
    if fault.kind == "kill_worker":
        return fp.PodFailure(
            ids.WORKER_JOB, exit_code=fault.exit_code, container=ids.WORKER_CONTAINER, job_index=fault.slice_index or 0
        )
    if fault.kind == "delete_head":  # what main without a SIGTERM handler exits with, as the live pod makes it
        return head_stop.stopped_main(jobset)
    return fp.PodFailure(ids.HEAD_JOB, conditions=("DisruptionTarget",), container=ids.MAIN_CONTAINER)


def capacity_fatal(fault: Fault, jobset: Object) -> str | None:
    """Why the job's capacity mode makes the fault fatal, or None."""
    if fault.kind == "lose_slice" and queued_capacity(jobset):
        return (
            "the workers run on queued-provisioning nodes: a lost slice's replacement waits for a new provisioning "
            "request, which may never be granted"
        )
    return None


# ---------------------------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Plan:
    """What a drill will do to a job, decided before anything is done."""

    jobset: Object
    prediction: Prediction
    fatal: str | None  # why the fault would end the job (its policy or its capacity), else None
    target: Target


def plan(kube: Kube, namespace: str, name: str, fault: Fault, *, needs_steps: bool = False) -> Plan:
    """Check the job can take the fault (it exists, runs, has the slice and host; ``needs_steps``: it runs a
    program that reports steps) and predict what follows. Errors say what to do; nothing is changed."""
    from pwdeploy.cluster.progress import progress, running_state

    jobset = js.require_jobset(kube, namespace, name)
    check_managed(jobset, namespace)
    check_fault_fits(fault, jobset)
    state = running_state(jobset, progress(jobset, js.list_pods(kube, namespace, name)))
    if state.phase != "Running":
        raise ClusterError(
            f"job {name} is {state.phase}, not running: a drill needs a running job",
            hint=f"wait until it runs: pwdeploy status {name} -n {namespace}",
        )
    if needs_steps and not has_main(jobset):
        raise ArgumentError(
            "after_step",
            f"job {name} is headless: no program in the cluster reports steps",
            hint="use `after=DURATION`",
        )
    prediction = predict(fault, jobset)
    fatal = capacity_fatal(fault, jobset) or (prediction.why if prediction.fatal else None)
    return Plan(jobset, prediction, fatal, find_target(kube, namespace, name, fault))
