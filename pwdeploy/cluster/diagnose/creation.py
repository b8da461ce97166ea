"""Creation: a JobSet no controller acts on, and pods the API server refuses to create for the Job controller.

Texts matched:
- a JobSet with no status and no Jobs a minute after it was created: no JobSet controller reconciles it (the
  controller writes ``status.replicatedJobsStatus`` and creates the Jobs at its first reconcile, kubernetes-sigs/
  jobset pkg/controllers/jobset_controller.go), or its ``spec.managedBy`` names another controller, which the
  JobSet controller leaves it to. status, which reads no Jobs, goes by the pods.
- the Job controller's Warning event ``FailedCreate`` ``Error creating: <error>`` (kubernetes/kubernetes
  pkg/controller/controller_utils.go, ``RealPodControl``), whose error is the API server's refusal. A refusal is a
  finding only while it still blocks: the Job has fewer live pods than it runs at once, and the refusal was seen
  within ``REFUSING_S`` (the Job controller tries again at most a minute apart, pkg/controller/job
  ``MaxJobApiBackOff``, and the event recorder lets one repeat of an object's events through each five minutes once
  it has passed 25, client-go tools/record/events_cache.go ``defaultSpamQPS``). The refusals:
  - JobSet's pod webhook with exclusive placement (kubernetes-sigs/jobset v0.11.1 pkg/webhooks/
    pod_admission_webhook.go, v0.12.0 pkg/webhooks/pod_webhook.go) refuses a slice's follower pods until its leader
    pod (completion index 0) is scheduled: ``follower pod node selector not set``, ``follower pod node selector
    for topology domain not found. missing selector: <key>`` (the mutating webhook sets that selector only from a
    scheduled leader's node), ``leader pod not yet scheduled, not creating follower pod. this is an expected,
    transient error`` and ``expected 1 leader pod (<pod>), but got 0``. Every healthy multi-host job sees them
    while its slices start, and the Job controller's next try gets through: transient, an info finding while the
    Job still waits on them (the leader's own scheduling findings say why it waits);
  - ``expected 1 leader pod (<pod>), but got <n>`` with n >= 2 (up to v0.12.0) is not transient: the failed
    leader pod is still there beside its replacement, the followers are refused for ever, the Job never fails and
    JobSet never restarts it (fixed on main by kubernetes-sigs/jobset#1276, commit 1dc6eec9, in no release yet);
  - Pod Security admission: ``pods "<pod>" is forbidden: violates PodSecurity "<level>:<version>": host
    namespaces (hostNetwork=true), ...`` (kubernetes/kubernetes staging/src/k8s.io/pod-security-admission/
    admission/admission.go, policy/check_hostNamespaces.go);
  - ResourceQuota admission: ``pods "<pod>" is forbidden: exceeded quota: <quota>, requested: <r>, used: <u>,
    limited: <l>`` (kubernetes/kubernetes plugin/pkg/admission/resourcequota/controller.go).
"""

from __future__ import annotations

import re
from datetime import datetime

from pwdeploy.cluster.diagnose import pods as p
from pwdeploy.cluster.diagnose.findings import Cause, Observation, quote
from pwdeploy.cluster.diagnose.read import Snapshot
from pwdeploy.cluster.job_events import event_time, short_jobs

CONTROLLER_GRACE_S = 60  # a JobSet this old with no status and no Jobs has no controller
# spec.managedBy's value for JobSet's own controller; any other leaves the JobSet to an external one (kubernetes-sigs/
# jobset api/jobset/v1alpha2 JobSetControllerName, pkg/controllers/jobset_controller.go managedByExternalController)
JOBSET_CONTROLLER = "jobset.sigs.k8s.io/jobset-controller"
_LEADER = re.compile(r"expected 1 leader pod \((?P<pod>[^)]*)\), but got (?P<count>\d+)")
_QUOTA = re.compile(r"exceeded quota: (?P<quota>[^,\s]+)")
_POD_SECURITY = re.compile(r'violates PodSecurity "(?P<level>[^":]+)')
LEADER_FIX_VERSION = "v0.12.0"  # the last JobSet release with the leader-pod deadlock (kubernetes-sigs/jobset#1276)
REFUSING_S = 600  # a refusal seen this recently still goes on (a minute between tries; one event in five minutes)
# JobSet's pod webhook while a slice's leader pod is not yet scheduled: refusals its next try gets through
TRANSIENT = (
    "leader pod not yet scheduled, not creating follower pod",
    "follower pod node selector not set",
    "follower pod node selector for topology domain not found",
)

# What each cause's rule rests on (its findings' ``source``).
JOBSET_CONTROLLER = (
    "kubernetes-sigs/jobset: pkg/controllers/jobset_controller.go (status and Jobs at the first reconcile)"
)
FAILED_CREATE = (
    "kubernetes/kubernetes: pkg/controller/controller_utils.go (FailedCreate); "
    "kubernetes-sigs/jobset: pkg/webhooks/pod_admission_webhook.go (a slice's followers and its leader pod)"
)

NO_JOBSET_CONTROLLER = Cause(
    "no-jobset-controller",
    "create",
    "the JobSet has no status and no Jobs a minute after it was created: no JobSet controller runs",
    severity="error",
    source=JOBSET_CONTROLLER,
)
POD_CREATE_REFUSED = Cause(
    "pod-create-refused",
    "create",
    "the API server refuses the Job's pods (`FailedCreate`) and the Job still lacks them: JobSet's leader-pod "
    "deadlock (up to v0.12.0), Pod Security forbidding hostNetwork, a full ResourceQuota, another admission refusal "
    "(error); JobSet's webhook holding a slice's followers until its leader is scheduled (info: transient)",
    source=FAILED_CREATE,
)


def observations(snap: Snapshot) -> list[Observation]:
    short = short_jobs(snap.jobs or [], snap.pods)
    refused = [e for e in snap.events if _refusing(e, short, snap.now)]
    return _no_controller(snap) + [_failed_create(e, snap) for e in refused]


def _refusing(event: p.Object, short: set[str], now: datetime) -> bool:
    """A FailedCreate on a Job that still lacks pods, seen within REFUSING_S: a refusal that still blocks."""
    involved = event.get("involvedObject") or {}
    if event.get("reason") != "FailedCreate" or involved.get("kind") != "Job" or involved.get("uid") not in short:
        return False
    age = _age_s(event_time(event), now)
    return age is not None and age <= REFUSING_S


def _no_controller(snap: Snapshot) -> list[Observation]:
    """status reads no Jobs: there, no pods stand for no Jobs (a JobSet without a status has no suspended Jobs)."""
    made = snap.jobs if snap.jobs is not None else snap.pods
    if made or snap.jobset.get("status"):
        return []
    created = str(snap.jobset.get("metadata", {}).get("creationTimestamp") or "")
    age = _age_s(created, snap.now)
    if age is None or age < CONTROLLER_GRACE_S:
        return []
    waited = f"the JobSet was created {age // 60} min {age % 60} s ago and has no status and no Jobs"
    manager = (snap.jobset.get("spec") or {}).get("managedBy")
    if isinstance(manager, str) and manager != JOBSET_CONTROLLER:
        evidence = f"{waited}: its spec.managedBy is {manager!r}, so the JobSet controller leaves it to that controller"
        fix = (
            f"{manager} must act on it (for MultiKueue, kueue.x-k8s.io/multikueue: the Workload's admission in the "
            "manager cluster and the copy on a worker cluster); a JobSet meant for this cluster's own JobSet "
            "controller has no spec.managedBy (pwdeploy render sets none)"
        )
        return [NO_JOBSET_CONTROLLER.observe("jobset", snap.name, "managed-by", evidence, fix=fix)]
    evidence = f"{waited}: no JobSet controller has reconciled it"
    fix = (
        "install or repair the JobSet controller: kubectl get deployments,pods -n jobset-system (its pods must run; "
        "their logs say why they do not reconcile); check: pwdeploy preflight -f job.yaml --cluster"
    )
    return [NO_JOBSET_CONTROLLER.observe("jobset", snap.name, "no-status", evidence, fix=fix)]


def _age_s(timestamp: str, now: datetime) -> int | None:
    try:
        return int((now - datetime.fromisoformat(timestamp.replace("Z", "+00:00"))).total_seconds())
    except (ValueError, TypeError):
        return None


def _failed_create(event: p.Object, snap: Snapshot) -> Observation:
    involved = event.get("involvedObject") or {}
    job, message = str(involved.get("name", "")), str(event.get("message") or "")
    role = _role(snap, job)
    evidence = f"Job {job}: FailedCreate: {quote(message)}"
    leader = _LEADER.search(message)
    if any(text in message for text in TRANSIENT) or (leader is not None and int(leader["count"]) < 2):
        fix = (
            "JobSet's pod webhook (exclusive placement) admits a slice's follower pods once its leader pod "
            "(completion index 0) is scheduled: expected while a slice starts, and transient (the Job controller "
            "tries again); when it lasts, the leader pod's scheduling findings say why it waits"
        )
        return POD_CREATE_REFUSED.observe(role, job, "transient", f"{evidence} (transient)", severity="info", fix=fix)
    if leader is not None:
        fix = (
            f"JobSet's pod webhook (JobSet {LEADER_FIX_VERSION} and older) refuses the slice's other pods while its "
            f"failed leader pod {leader['pod']} is still there, so the Job never fails and the JobSet never "
            f"restarts (kubernetes-sigs/jobset#1276): delete that pod (kubectl delete pod {leader['pod']} -n "
            f"{snap.namespace}), and upgrade JobSet to a release after {LEADER_FIX_VERSION}"
        )
        return POD_CREATE_REFUSED.observe(role, job, "leader", evidence, severity="error", fix=fix)
    if (level := _POD_SECURITY.search(message)) is not None:
        fix = (
            f"namespace {snap.namespace} enforces Pod Security level {level['level']!r}, which forbids the "
            "hostNetwork the Pathways pods need: label it privileged (kubectl label namespace "
            f"{snap.namespace} pod-security.kubernetes.io/enforce=privileged --overwrite) or use a namespace that is"
        )
        return POD_CREATE_REFUSED.observe(role, job, "pod-security", evidence, severity="error", fix=fix)
    if (quota := _QUOTA.search(message)) is not None:
        fix = (
            f"ResourceQuota {quota['quota']} in namespace {snap.namespace} has no room for the pod (see requested, "
            f"used, limited): raise it (kubectl describe resourcequota {quota['quota']} -n {snap.namespace}), wait "
            "for other pods to end, or lower the job's requests"
        )
        return POD_CREATE_REFUSED.observe(role, job, f"quota/{quota['quota']}", evidence, severity="error", fix=fix)
    fix = "the API server refuses the Job's pods (see the message: an admission webhook or policy): fix what it names"
    key = re.sub(r"\d+", "N", message[:80])
    return POD_CREATE_REFUSED.observe(role, job, key, evidence, severity="error", fix=fix)


def _role(snap: Snapshot, job: str) -> str:
    """``worker job``, ``head job`` or ``<replicatedJob> job`` from ``<jobset>-<replicatedJob>-<index>``."""
    for rj in (snap.jobset.get("spec") or {}).get("replicatedJobs") or []:
        if job.startswith(f"{snap.name}-{rj.get('name')}-"):
            return p.job_role(str(rj.get("name"))) + " job"
    return "job"
