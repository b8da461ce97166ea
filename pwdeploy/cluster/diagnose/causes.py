"""What each diagnose cause means and what it is read from: the reference table of ``docs/diagnose.md`` is
generated from here (``pwdeploy.cli.reference``), and a test holds it to ``findings.CAUSES``, so a cause without
a meaning, or a meaning of no cause, fails."""

from __future__ import annotations

# Per stage of ``findings.STAGES``: the objects and fields its rules read.
READS: dict[str, str] = {
    "queue": "Kueue Workload conditions (QuotaReserved, Admitted, Evicted) and admission checks, ProvisioningRequest "
    "conditions",
    "create": "the JobSet's status and its Jobs; the Jobs' `FailedCreate` events",
    "schedule": "the pod's PodScheduled condition, cluster-autoscaler events",
    "image": "ErrImagePull / ImagePullBackOff and the kubelet's `Failed to pull image` event",
    "start": "container waiting reasons",
    "run": "container states, pod conditions, the last 40 lines of container logs",
    "end": "JobSet conditions, `status.restarts` and its restart events",
}

MEANINGS: dict[str, str] = {
    "kueue-pending": "Kueue has not admitted the job: an error when it never can (a request above the "
    "ClusterQueue's maximum, a missing LocalQueue, an inactive ClusterQueue, a rejected admission check, a failed "
    "ProvisioningRequest); a warning while others hold the quota; info while an admission check or provisioning "
    "is pending",
    "kueue-deactivated": "Kueue deactivated the Workload (`Deactivated*` eviction, e.g. the requeuing limit): it "
    "is never requeued; reactivate it or resubmit",
    "no-jobset-controller": "the JobSet has no status and no Jobs a minute after it was created: no JobSet "
    "controller runs",
    "pod-create-refused": "the API server refuses the Job's pods (`FailedCreate`): JobSet's leader-pod deadlock "
    "(up to v0.12.0), Pod Security forbidding hostNetwork, a full ResourceQuota, another admission refusal",
    "scale-up-failed": "FailedScaleUp (quota, stockout, reservation); NotTriggerScaleUp is a warning",
    "head-unschedulable": "the head pod fits no node of `head.node_pool` (too small, or its host ports held by "
    "another job's head)",
    "tpu-capacity": "`Insufficient google.com/tpu`, or `didn't have free ports` (another job's hostNetwork pods "
    "hold the TPU nodes): no free TPU node; a pod whose scale-up was triggered is a warning",
    "node-selector": "no node carries the labels the pod selects",
    "untolerated-taint": "the nodes carry a taint the pod does not tolerate",
    "unschedulable": "another reason of the scheduler",
    "image-not-found": "the image or its tag does not exist",
    "image-unauthorized": "403/401/denied: the node pool's service account needs `roles/artifactregistry.reader`",
    "image-pull": "another pull failure (warning)",
    "missing-secret": '`secret "x" not found`, `couldn\'t find key`',
    "container-config": "the kubelet cannot create the container from its spec",
    "sidecar-not-started": "`main` waits in PodInitializing for 2 min: the proxy has not passed its startup probe "
    "(it does not listen yet), or the native sidecars do not start (kubelet < 1.29)",
    "version-mismatch": "IFRT protocol versions differ, or the proxy and server images are of different `jax-` "
    "releases",
    "scratch-bucket-missing": "`The specified bucket does not exist` in a Pathways log: storage.scratch names "
    "no bucket",
    "scratch-lifecycle-limit": "`cannot specify more than 50 prefixes`: the scratch bucket's lifecycle rules are full",
    "proxy-in-use": "`Connection to IFRT proxy server was terminated: CANCELLED`: another client holds the proxy",
    "session-lost": "`writes no longer allowed`: the connection to the proxy ended, and the JAX session with it",
    "hbm-oom": "`RESOURCE_EXHAUSTED`: a TPU ran out of device memory (HBM)",
    "oom-killed": "a container was OOM-killed: which container, against which memory field",
    "shm-exhausted": "exit 135 (SIGBUS), or `No space left on device` on /dev/shm: which size field",
    "gcs-permission": "403 / permission denied on a bucket in a proxy, resource manager, worker or main log",
    "proxy-backend": "`Unable to initialize backend 'proxy'`, connection refused to port 29000",
    "hang": "`Megascale detects a hang`",
    "crash": "any other non-zero exit, with its last log lines: an error while the container is down or in "
    "CrashLoopBackOff (whatever its cause), a warning once it runs again or the Job replaced the failed pod",
    "pods-ready-timeout": "Kueue evicted the job with `PodsReadyTimeout`: its pods were not all Ready within "
    "`waitForPodsReady.timeout` (30 minutes by default since Kueue 0.19) or `recoveryTimeout`; names the pods "
    "not ready (warning: it is requeued)",
    "preempted": "DisruptionTarget, Evicted, node shutdown, Kueue preemption (warning); a head pod is replaced by "
    "its Job without a restart",
    "max-restarts": "the JobSet failed with ReachedMaxRestarts",
    "job-failed": "the JobSet failed for another reason",
    "restarted": "the JobSet restarted (`status.restarts`): its latest restart event names the first failed Job (info)",
}
