"""The JobSet that ties the Pathways head and the TPU worker slices together."""

from __future__ import annotations

from pwdeploy import __version__
from pwdeploy.config import JobConfig
from pwdeploy.manifests import common as c
from pwdeploy.manifests.common import Manifest
from pwdeploy.manifests.head import head_replicated_job
from pwdeploy.manifests.worker import worker_replicated_job

API_VERSION = "jobset.x-k8s.io/v1alpha2"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
VERSION_ANNOTATION = "pwdeploy.dev/version"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def metadata(job: JobConfig) -> Manifest:
    labels = {MANAGED_BY_LABEL: "pwdeploy", "app.kubernetes.io/name": job.name}
    if job.scheduling.queue:
        labels[QUEUE_LABEL] = job.scheduling.queue
    return c.drop_none(
        name=job.name,
        namespace=job.namespace,
        labels=labels,
        annotations={
            VERSION_ANNOTATION: __version__,
            "pwdeploy.dev/tpu": f"{job.tpu.slices}x {job.tpu.slice.type_name} ({job.tpu.slice.instance_type})",
            "pwdeploy.dev/pathways-version": job.pathways_version,
        },
    )


def failure_policy(job: JobConfig) -> Manifest:
    policy: Manifest = {"restartStrategy": "Recreate", "maxRestarts": job.scheduling.max_restarts}
    if not job.headless:
        # The head Job fails with reason PodFailurePolicy only when the user's program exited non-zero:
        # restarting every slice would rerun the same bug, so stop the JobSet instead.
        policy["rules"] = [
            {
                "name": "user_program_failed",
                "action": "FailJobSet",
                "onJobFailureReasons": ["PodFailurePolicy"],
                "targetReplicatedJobs": [c.HEAD],
            }
        ]
    return policy


def jobset(job: JobConfig) -> Manifest:
    spec = c.drop_none(
        coordinator={"replicatedJob": c.HEAD},
        network={"enableDNSHostnames": True, "publishNotReadyAddresses": True},
        startupPolicy={"startupPolicyOrder": "InOrder"},
        successPolicy=None if job.headless else {"operator": "All", "targetReplicatedJobs": [c.HEAD]},
        failurePolicy=failure_policy(job),
        replicatedJobs=[head_replicated_job(job), worker_replicated_job(job)],
    )
    return {"apiVersion": API_VERSION, "kind": "JobSet", "metadata": metadata(job), "spec": spec}
