"""The names a pwdeploy JobSet is built from and found by: replicatedJobs, containers, volumes, labels,
annotations and ports.

One spelling each, imported by the manifest builders, the cluster commands, local runs and the tests, so a
rename changes every reader at once. No imports: anything may import this module.
"""

# replicatedJobs
HEAD_JOB = "pathways-head"
WORKER_JOB = "worker"

# containers
MAIN_CONTAINER = "main"
PROXY_CONTAINER = "pathways-proxy"
RM_CONTAINER = "pathways-rm"
WORKER_CONTAINER = "pathways-worker"
SIDECAR_CONTAINER = "colocated-python-sidecar"
HLO_UPLOADER_CONTAINER = "hlo-uploader"

# ports (host ports too: every Pathways pod runs on the host network)
PROXY_PORT = 29000
RM_PORT = 29001
WORKER_PORT = 29005
SIDECAR_PORT = 50051

# volumes and where they are mounted
SHM_VOLUME = "dshm"
SHM_DIR = "/dev/shm"
SIDECAR_SHM_VOLUME = "sidecar-shm"
SIDECAR_SHM_DIR = "/tmp/pathways-sidecar-shm"
TRANSFER_VOLUME = "ifrt-proxy-transfer"
TRANSFER_DIR = "/tmp/ifrt_proxy"
HLO_VOLUME = "hlo-dump"
HLO_DIR = "/tmp/pwdeploy-hlo"

# labels pwdeploy sets
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "pwdeploy"
APP_NAME_LABEL = "app.kubernetes.io/name"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

# annotations pwdeploy sets
VERSION_ANNOTATION = "pwdeploy.dev/version"
CONFIG_HASH_ANNOTATION = "pwdeploy.dev/config-hash"
TPU_ANNOTATION = "pwdeploy.dev/tpu"
PATHWAYS_VERSION_ANNOTATION = "pwdeploy.dev/pathways-version"

# labels and annotations the JobSet and Job controllers set on what they create
COORDINATOR_LABEL = "jobset.sigs.k8s.io/coordinator"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
REPLICATED_JOB_REPLICAS_LABEL = "jobset.sigs.k8s.io/replicatedjob-replicas"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
EXCLUSIVE_TOPOLOGY_ANNOTATION = "alpha.jobset.sigs.k8s.io/exclusive-topology"
