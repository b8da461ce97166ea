"""The JobSet that ties the Pathways head and the TPU worker slices together."""

from __future__ import annotations

from pwdeploy import __version__
from pwdeploy import identifiers as ids
from pwdeploy.config import JobConfig
from pwdeploy.manifests import common as c
from pwdeploy.manifests.common import Manifest
from pwdeploy.manifests.head import head_pod_spec, head_replicated_job
from pwdeploy.manifests.placement import jobset_annotations
from pwdeploy.manifests.variants import Pods, apply_variants
from pwdeploy.manifests.worker import worker_pod_spec, worker_replicated_job

API_VERSION = ids.JOBSET_API_VERSION


def metadata(job: JobConfig) -> Manifest:
    labels = {ids.MANAGED_BY_LABEL: ids.MANAGED_BY, ids.APP_NAME_LABEL: job.name}
    if job.scheduling.queue:
        labels[ids.QUEUE_LABEL] = job.scheduling.queue
    return c.drop_none(
        name=job.name,
        namespace=job.namespace,
        labels=labels,
        annotations={
            ids.VERSION_ANNOTATION: __version__,
            ids.TPU_ANNOTATION: f"{job.tpu.slices}x {job.tpu.slice.type_name} ({job.tpu.slice.instance_type})",
            ids.PATHWAYS_VERSION_ANNOTATION: job.pathways_version,
            **jobset_annotations(job),
        },
    )


def failure_policy(job: JobConfig) -> Manifest:
    """BlockingRecreate by default: host-network pods bind fixed host ports, so every pod of the previous
    attempt must be gone before the new ones start."""
    policy: Manifest = {
        "restartStrategy": job.scheduling.restart_strategy,
        "maxRestarts": job.scheduling.max_restarts,
    }
    if not job.headless:
        policy["rules"] = failure_rules()
    return policy


def failure_rules() -> list[Manifest]:
    """JobSet tries its rules in order on the child Jobs failed at that moment, and the first that matches any of
    them decides (no match: RestartJobSet). A lost slice reaches it in one of two ways. The worker Job fails only
    once its pods used up their backoffLimit (slice_lost). More often the program dies first, as soon as its
    devices are gone: pwdeploy.runtime.retry_on_slice_loss makes it exit with a retry exit code, so the head Job
    fails with BackoffLimitExceeded (retry_exit_code). Any other non-zero exit of main fails the head Job with
    PodFailurePolicy: a bug, which a restart would only repeat (user_program_failed). docs/restarts.md has the
    scenarios; pwdeploy.manifests.failure_policy evaluates these rules."""
    return [
        {"name": ids.SLICE_LOST_RULE, "action": "RestartJobSet", "targetReplicatedJobs": [ids.WORKER_JOB]},
        {
            "name": ids.RETRY_EXIT_CODE_RULE,
            "action": "RestartJobSet",
            "onJobFailureReasons": ["BackoffLimitExceeded"],
            "targetReplicatedJobs": [ids.HEAD_JOB],
        },
        {
            "name": ids.USER_PROGRAM_FAILED_RULE,
            "action": "FailJobSet",
            "onJobFailureReasons": ["PodFailurePolicy"],
            "targetReplicatedJobs": [ids.HEAD_JOB],
        },
    ]


def jobset(job: JobConfig) -> Manifest:
    pods = apply_variants(job, Pods(head_pod_spec(job), worker_pod_spec(job)))
    spec = c.drop_none(
        coordinator={"replicatedJob": ids.HEAD_JOB},
        network={"enableDNSHostnames": True, "publishNotReadyAddresses": True},
        startupPolicy={"startupPolicyOrder": "InOrder"},
        successPolicy=None if job.headless else {"operator": "All", "targetReplicatedJobs": [ids.HEAD_JOB]},
        failurePolicy=failure_policy(job),
        # Unset by default: a finished JobSet stays, with its pods and their logs, for status, logs and diagnose
        # (gcluster deletes it after an hour, xpk after its --ttl-seconds-after-finished).
        ttlSecondsAfterFinished=job.scheduling.ttl_after_finished,
        replicatedJobs=[head_replicated_job(job, pods.head), worker_replicated_job(job, pods.worker)],
    )
    return {"apiVersion": API_VERSION, "kind": "JobSet", "metadata": metadata(job), "spec": spec}
