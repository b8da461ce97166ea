"""The Pathways head pod: IFRT proxy, resource manager and (unless headless) the user's JAX container."""

from __future__ import annotations

from typing import NoReturn

from pwdeploy import envcontract
from pwdeploy import identifiers as ids
from pwdeploy.config import JobConfig
from pwdeploy.errors import ConfigError, raise_all
from pwdeploy.manifests import common as c
from pwdeploy.manifests.common import Manifest
from pwdeploy.manifests.placement import head_pod_annotations
from pwdeploy.manifests.user_volumes import fuse_annotations
from pwdeploy.quantity import amount


def scratch_args(job: JobConfig) -> list[str]:
    """``--gcs_scratch_location``: proxy, resource manager and workers all keep state there."""
    return [f"--gcs_scratch_location={job.storage.scratch.uri}"]


def rm_client_args(job: JobConfig, port: int) -> list[str]:
    """What every server that registers with the resource manager (proxy, workers) starts with."""
    return [f"--server_port={port}", f"--resource_manager_address=$(PATHWAYS_HEAD):{ids.RM_PORT}", *scratch_args(job)]


def is_dump_flag(flag: str) -> bool:
    return flag.startswith("--xla_dump")


def proxy_args(job: JobConfig) -> list[str]:
    """The proxy's arguments; the XLA flags other than HLO dump flags (those go in its XLA_FLAGS)."""
    args = rm_client_args(job, ids.PROXY_PORT)
    if job.tpu.elastic_slices:
        args.append(f"--num_elastic_slices={job.tpu.elastic_slices}")
    return args + [f for f in job.xla_flags if not is_dump_flag(f)]


def proxy_dump_flags(job: JobConfig) -> list[str]:
    """HLO dump flags reach the proxy through its XLA_FLAGS environment variable, as the one producer that dumps
    HLO from Pathways (axlearn) passes them; whether the proxy accepts them as arguments is unverified. With
    storage.hlo_dump, the dump goes to the uploader's volume."""
    flags = [f for f in job.xla_flags if is_dump_flag(f)]
    if job.storage.hlo_dump is not None:
        flags = [f for f in flags if not f.startswith("--xla_dump_to=")] + [f"--xla_dump_to={ids.HLO_DIR}/"]
    return flags


def proxy_container_env(job: JobConfig) -> list[Manifest]:
    """The proxy container's own environment: the head's address, the HLO dump flags and, with head.insecure_grpc,
    plain gRPC (envcontract.proxy_env is the client's, which points JAX at the proxy)."""
    dump = proxy_dump_flags(job)
    own = [c.env_label("PATHWAYS_HEAD", ids.COORDINATOR_LABEL)] + (
        [c.env_value("XLA_FLAGS", " ".join(dump))] if dump else []
    )
    own += c.env_list(envcontract.grpc_credentials_env(job))
    return own + c.env_list(dict(job.proxy_env))  # the config constraints keep the user's names apart from these


def proxy_container(job: JobConfig) -> Manifest:
    return {
        "name": ids.PROXY_CONTAINER,
        "image": job.proxy_image,
        "imagePullPolicy": "IfNotPresent",
        "args": proxy_args(job),
        "env": proxy_container_env(job),
        "ports": c.ports(ids.PROXY_PORT),
        "resources": c.limits({"cpu": job.head.proxy_cpu, "memory": job.head.proxy_memory}),
        "securityContext": c.hardened(),
    }


# The kubelet starts the next init container, and the main containers after the last, only once a native
# sidecar's `started` status is true: as soon as its process runs, or, with a startupProbe, once the probe
# succeeds (https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/, "Sidecar containers and Pod
# lifecycle"; native sidecars are on by default from Kubernetes 1.29, which pwdeploy already needs). A TCP probe
# of the proxy's port makes `main` start once the proxy listens, instead of its first JAX call waiting on it.
PROXY_STARTUP_PERIOD_S = 2
PROXY_STARTUP_FAILURES = 300  # 10 minutes for the proxy to listen before the kubelet restarts it


def proxy_startup_probe() -> Manifest:
    return {
        "tcpSocket": {"port": ids.PROXY_PORT},
        "periodSeconds": PROXY_STARTUP_PERIOD_S,
        "failureThreshold": PROXY_STARTUP_FAILURES,
    }


def rm_args(job: JobConfig) -> list[str]:
    args = [
        f"--server_port={ids.RM_PORT}",
        *scratch_args(job),
        "--node_type=resource_manager",
        f"--instance_count={job.tpu.slices}",
        f"--instance_type={job.tpu.slice.instance_type}",
    ]
    if not job.storage.enable_olm:
        args.append("--enable_gcs_olm=false")
    return args + list(job.rm_flags)  # the config constraints refuse the flags set above


def rm_container(job: JobConfig) -> Manifest:
    return {
        "name": ids.RM_CONTAINER,
        "image": job.server_image,
        "imagePullPolicy": "IfNotPresent",
        "args": rm_args(job),
        "env": [
            c.env_value("TPU_SKIP_MDS_QUERY", "true"),
            c.env_label("HOST_ADDRESS", ids.COORDINATOR_LABEL),
            # As the PathwaysJob controller sets them for its resource manager.
            c.env_annotation(ids.JOBSET_NAME_ENV, ids.JOBSET_NAME_LABEL),
            c.env_annotation("REPLICATED_JOB_NAME", ids.REPLICATED_JOB_LABEL),
            *c.env_list(dict(job.rm_env)),
        ],
        "ports": c.ports(ids.RM_PORT, ids.RM_PORT + 1),
        "resources": c.limits({"cpu": job.head.rm_cpu, "memory": job.head.rm_memory}),
        "securityContext": c.hardened(),
    }


def transfer_memory_on(job: JobConfig) -> bool:
    """Whether the JAX client and the proxy share a memory-backed directory (not headless: no client there; off
    when head.transfer_shm_size is 0)."""
    cap = job.head.transfer_shm_size
    return not job.headless and (cap is None or amount(cap, "head.transfer_shm_size", allow_zero=True) > 0)


def main_env(job: JobConfig) -> list[Manifest]:
    """The user container's env: the proxy connection (same pod, so localhost), pwdeploy's contract (the restart
    attempt from the pod's JobSet label), and the variables read from Secrets (by reference: the value never
    enters the manifest)."""
    transfer_dir = ids.TRANSFER_DIR if transfer_memory_on(job) else None
    env = c.env_list(
        {
            **envcontract.proxy_env("localhost", transfer_dir),
            **envcontract.grpc_credentials_env(job),  # as the proxy's: the two must agree
            **envcontract.profiler_env(job.main.profiler_host),
            **envcontract.job_env(job),  # last: the user's own main.env wins
        }
    )
    env.append(c.env_label(ids.RESTART_ATTEMPT_ENV, ids.RESTART_ATTEMPT_LABEL))  # the JobSet's, via downward API
    env.append(c.env_annotation(ids.JOBSET_NAME_ENV, ids.JOBSET_NAME_LABEL))
    return env + [c.env_secret(ref.env, ref.secret, ref.key) for ref in job.main.secret_env]


def main_container(job: JobConfig) -> Manifest:
    main = job.main
    return {
        "name": ids.MAIN_CONTAINER,
        "image": main.image or _unpushed_job_image(job),
        "imagePullPolicy": "IfNotPresent",
        "command": list(main.command),
        "env": main_env(job),
        "resources": c.limits({"cpu": main.cpu, "memory": main.memory}),
        "volumeMounts": [c.mount(ids.SHM_VOLUME, ids.SHM_DIR)],
        "securityContext": c.hardened(main.privileged),
    }


def _unpushed_job_image(job: JobConfig) -> str:
    raise_unpushed(job)


def raise_unpushed(job: JobConfig) -> NoReturn:
    """Every image the job needs that no pushed image pins (the job image, the sidecar), in one error, so that one
    round of pushes is enough."""
    errors = []
    if not job.headless and job.main.image is None:
        errors.append(
            ConfigError(
                "image.repository",
                f"{job.image.repository} is set but no pushed job image matches this job's current image inputs "
                "(none was pushed yet, or its code or requirements changed since)",
                hint="run `pwdeploy image build --push` with the same config, or set main.image",
            )
        )
    if job.sidecar.enabled and job.sidecar.image is None:
        errors.append(
            ConfigError(
                "sidecar.repository",
                f"{job.sidecar.repository} is set but no pushed sidecar image matches this job's current sidecar "
                "inputs (none was pushed yet, or its code or requirements changed since)",
                hint="run `pwdeploy sidecar build --push` with the same config, or set sidecar.image",
            )
        )
    raise_all(errors)
    raise AssertionError("raise_unpushed: every image is pinned")


def shares_process_namespace(job: JobConfig) -> bool | None:
    """``shareProcessNamespace`` of the head pod: true unless head.share_process_namespace is off (None then, and
    for a headless job, which has no main: the field is left out).

    ``main`` runs the user's command without a shell, so without it the user's interpreter is PID 1 of its
    container's PID namespace, and the kernel delivers a signal from outside the namespace to its init only when
    init has a handler for it (pid_namespaces(7), "The namespace init process"; CPython, jax and pathwaysutils
    install none for SIGTERM). The kubelet stops a container by asking the runtime to send SIGTERM to the
    container's first process, then SIGKILL once ``terminationGracePeriodSeconds`` is over (kubernetes
    pkg/kubelet/kuberuntime/kuberuntime_container.go ``killContainer``; runc ``kill`` signals the container's
    initial process). So a handler-less main ignored the SIGTERM of every deletion and was SIGKILLed (exit 137),
    which the head's FailJob rule fails the JobSet on. With a shared namespace the pod's pause container is PID 1
    (it reaps orphans and handles only SIGINT, SIGTERM and SIGCHLD: kubernetes build/pause/linux/pause.c), main is
    an ordinary process of it, and SIGTERM ends a handler-less main at once (exit 143). What it exposes between
    main, the proxy and the resource manager, and why workers keep their own: docs/manifests.md."""
    return True if not job.headless and job.head.share_process_namespace else None


def head_pod_spec(job: JobConfig) -> Manifest:
    """The head pod without variants: headless, the servers alone; else the servers as native sidecars of main."""
    if job.headless:
        placement: Manifest = {"containers": [proxy_container(job), rm_container(job)]}
    else:
        # The resource manager first: the proxy's startup probe holds back whatever follows it, and the proxy
        # registers with the resource manager.
        proxy = {**proxy_container(job), "startupProbe": proxy_startup_probe()}
        placement = {
            "initContainers": [c.as_native_sidecar(s) for s in (rm_container(job), proxy)],
            "containers": [main_container(job)],
            "volumes": [c.memory_volume(ids.SHM_VOLUME, job.main.shm_size)],
        }
    return c.drop_none(
        hostNetwork=True,
        dnsPolicy="ClusterFirstWithHostNet",
        restartPolicy="Never",
        nodeSelector={ids.NODE_POOL_LABEL: job.head.node_pool},
        serviceAccountName=job.scheduling.service_account,
        priorityClassName=job.scheduling.priority_class,
        terminationGracePeriodSeconds=job.scheduling.termination_grace_seconds,
        shareProcessNamespace=shares_process_namespace(job),
        **placement,
    )


def retry_exit_codes(job: JobConfig) -> list[int]:
    """The exit codes of main that restart the JobSet, ascending: pwdeploy's own (a lost slice), a stop from outside
    (SIGTERM) and the user's."""
    return sorted({ids.RETRY_EXIT_CODE, ids.STOPPED_EXIT_CODE, *job.scheduling.retry_exit_codes})


def head_failure_policy(job: JobConfig) -> Manifest | None:
    """How the head Job (backoffLimit 0) takes a failed pod. A pod the node's disruption ended (preemption,
    eviction, a drain) is replaced without counting; main's non-zero exit fails the Job with reason
    PodFailurePolicy (the JobSet rule user_program_failed then fails the JobSet: rerunning a bug reruns it),
    except a retry exit code: no rule matches, the failure counts, and the Job fails with BackoffLimitExceeded,
    which the JobSet rule retry_exit_code restarts (Cluster Toolkit's --restart-on-exit-codes does the same).

    143 (SIGTERM) is a retry exit code too. When Kueue evicts or preempts the job it suspends the JobSet, and the
    Job controller deletes the pods with no DisruptionTarget condition; main, stopped by SIGTERM, exits 143, and
    while that pod is still listed the FailJob rule fails the suspended Job, so the JobSet fails instead of being
    requeued (the real Job, JobSet and Kueue controllers did so in tests/test_control_plane_diagnose.py). A pod
    deleted by hand restarts the JobSet the same way.

    With scheduling.restart_on_user_code_failure, the FailJob rule is left out: every failure of main is counted and
    restarts the JobSet, within maxRestarts, as xpk's --restart-on-user-code-failure does (xpk's workload command
    ends with `exit $EXIT_CODE` then, handing main's exit to JobSet; its Pathways workloads always set it, and it
    warns that --max-restarts 0 restarts nothing, as advice.py does here)."""
    if job.headless:
        return None
    rules: list[Manifest] = [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
    if not job.scheduling.restart_on_user_code_failure:  # else every exit of main is counted: a restart
        rules.append(
            {
                "action": "FailJob",
                "onExitCodes": {
                    "containerName": ids.MAIN_CONTAINER,
                    "operator": "NotIn",
                    "values": [0, *retry_exit_codes(job)],
                },
            }
        )
    return {"rules": rules}


def head_replicated_job(job: JobConfig, pod: Manifest) -> Manifest:
    return {
        "name": ids.HEAD_JOB,
        "replicas": 1,
        "template": {
            "metadata": {"annotations": {ids.EXCLUSIVE_TOPOLOGY_ANNOTATION: ids.HOSTNAME_LABEL}},
            "spec": c.drop_none(
                backoffLimit=0,
                completionMode="Indexed",
                completions=1,
                parallelism=1,
                podFailurePolicy=head_failure_policy(job),
                template={
                    "metadata": {"annotations": {**head_pod_annotations(), **fuse_annotations(job, "main")}},
                    "spec": pod,
                },
            ),
        },
    }
