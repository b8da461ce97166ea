"""The TPU worker slices: one Job per slice, one pod per TPU VM."""

from __future__ import annotations

from pwdeploy import identifiers as ids
from pwdeploy.config import JobConfig
from pwdeploy.manifests import common as c
from pwdeploy.manifests.common import Manifest
from pwdeploy.manifests.head import rm_client_args
from pwdeploy.manifests.placement import worker_node_selector, worker_pod_annotations, worker_tolerations
from pwdeploy.manifests.user_volumes import fuse_annotations

BACKOFF_PER_VM = 4  # failures of one host's worker pod (and restarts of its container) before its slice's Job fails


def worker_args(job: JobConfig) -> list[str]:
    return rm_client_args(job, ids.WORKER_PORT) + list(job.worker_flags)


def default_worker_env() -> list[Manifest]:
    """What every Google producer gives a pathways-worker."""
    return [
        c.env_label("PATHWAYS_HEAD", ids.COORDINATOR_LABEL),
        c.env_value("TPU_MIN_LOG_LEVEL", "0"),
        c.env_value("TF_CPP_MIN_LOG_LEVEL", "0"),
        c.env_value("XCLOUD_ENVIRONMENT", "GCP"),
        # The megascale XOR tracer leaked memory before jax 0.5 and logs heavily.
        c.env_value("MEGASCALE_GRPC_ENABLE_XOR_TRACER", "false"),
        c.env_label("MEGASCALE_COORDINATOR_ADDRESS", ids.COORDINATOR_LABEL),
        c.env_label("MEGASCALE_NUM_SLICES", ids.REPLICATED_JOB_REPLICAS_LABEL),
        c.env_label("MEGASCALE_SLICE_ID", ids.JOB_INDEX_LABEL),
        c.env_annotation(ids.JOBSET_NAME_ENV, ids.JOBSET_NAME_LABEL),
        c.env_annotation("REPLICATED_JOB_NAME", ids.REPLICATED_JOB_LABEL),
    ]


def worker_env(job: JobConfig) -> list[Manifest]:
    """The defaults, each replaceable through worker_env, then the user's other worker variables."""
    return c.with_env(default_worker_env(), c.env_list(dict(job.worker_env)))


def worker_container(job: JobConfig) -> Manifest:
    return {
        "name": ids.WORKER_CONTAINER,
        "image": job.worker_image,
        "imagePullPolicy": "IfNotPresent",
        "args": worker_args(job),
        "env": worker_env(job),
        "ports": c.ports(ids.WORKER_PORT, ids.WORKER_PORT + 1, 8471, 8080),
        "resources": c.limits({ids.TPU_RESOURCE: job.tpu.slice.chips_per_vm, "memory": job.tpu.worker_memory}),
        "volumeMounts": [c.mount(ids.SHM_VOLUME, ids.SHM_DIR)],
    }


def worker_pod_spec(job: JobConfig) -> Manifest:
    """A worker pod without variants (the colocated-Python sidecar is added by its own step)."""
    return c.drop_none(
        hostNetwork=True,
        dnsPolicy="ClusterFirstWithHostNet",
        restartPolicy="OnFailure",
        nodeSelector=worker_node_selector(job),
        tolerations=worker_tolerations(job),
        serviceAccountName=job.scheduling.service_account,
        priorityClassName=job.scheduling.priority_class,
        terminationGracePeriodSeconds=job.scheduling.termination_grace_seconds,
        containers=[worker_container(job)],
        volumes=[c.memory_volume(ids.SHM_VOLUME, job.tpu.shm_size)],
    )


def worker_backoff_limit(job: JobConfig) -> int:
    """A slice's container restarts in place (restartPolicy OnFailure) before its Job fails: per host, times its
    hosts (the Job controller sums the restarts of the Job's pods)."""
    return host_backoff_limit(job) * job.tpu.slice.vms


def host_backoff_limit(job: JobConfig) -> int:
    """Failed pods of one host (a completion index) before its slice's Job fails."""
    return job.tpu.max_slice_restarts if job.tpu.elastic_slices else BACKOFF_PER_VM


def backoff(job: JobConfig) -> Manifest:
    """The worker Job's limits. A failed pod (a disruption: eviction, preemption, a lost VM) is counted per host
    (``backoffLimitPerIndex``), and the Job waits before the replacement of each host by that host's failures
    only: 10 s after its first (kubernetes/kubernetes pkg/controller/job getRemainingTimePerIndex). Without it the
    Job waits by every failure since its last success (backoff_utils.go ``newBackoffRecord``, each of them, those
    a podFailurePolicy ignores included): a lost 4-VM slice, 4 failures at once, waited 10 s x 2^3 = 80 s before
    any replacement was created. One host over its limit fails the Job (``maxFailedIndexes`` 0), which the
    JobSet's ``slice_lost`` rule restarts. A container restarted in place still counts against
    ``backoffLimit``. An Ignore rule on DisruptionTarget, as the head has, would not shorten the wait, needs
    ``restartPolicy: Never``, and with it, with JobSet <= v0.12.0, a failed leader pod kept beside its replacement
    refuses the slice's followers for ever (kubernetes-sigs/jobset#1276)."""
    return {
        "backoffLimit": worker_backoff_limit(job),
        "backoffLimitPerIndex": host_backoff_limit(job),
        "maxFailedIndexes": 0,
    }


# A worker pod is replaced once it has stopped (phase Failed), not as soon as it is terminating, Kubernetes'
# default: the pod it replaces still holds its host's TPU chips and host-network ports until it stops, so an early
# replacement waits Pending meanwhile, where the cluster autoscaler may scale up a node pool for it and Kueue does
# not count the terminating pod against the quota; JAX expects one pod per index at a time (Kubernetes blog
# "v1.34: Pod Replacement Policy for Jobs Goes GA", KEP-3939). Cluster Toolkit renders it on its Pathways workers
# (v1.98.0, pkg/orchestrator/gke/templates/pathways_jobset.tmpl). GA in Kubernetes 1.34, on by default from 1.29.
REPLACE_ONCE_FAILED = "Failed"


def worker_replicated_job(job: JobConfig, pod: Manifest) -> Manifest:
    """One Job per slice; each on a node pool of its own, except a dynamic slice, which spans the sub-blocks' pools
    (Cluster Toolkit drops the exclusive topology there too)."""
    vms = job.tpu.slice.vms
    exclusive = {} if job.tpu.dynamic_slicing else {ids.EXCLUSIVE_TOPOLOGY_ANNOTATION: ids.NODE_POOL_LABEL}
    annotations = {**worker_pod_annotations(job), **fuse_annotations(job, "workers")}
    return {
        "name": ids.WORKER_JOB,
        "replicas": job.tpu.slices,
        "template": c.drop_none(
            metadata=c.drop_none(annotations=exclusive),
            spec={
                **backoff(job),
                "podReplacementPolicy": REPLACE_ONCE_FAILED,
                "completionMode": "Indexed",
                "completions": vms,
                "parallelism": vms,
                "template": c.drop_none(metadata=c.drop_none(annotations=annotations), spec=pod),
            },
        ),
    }
