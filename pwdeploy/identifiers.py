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
PROFILER_PORT = 9999  # where a program starts pathwaysutils' profiler server (MaxText's default)

# volumes and where they are mounted
SHM_VOLUME = "dshm"
SHM_DIR = "/dev/shm"
SIDECAR_SHM_VOLUME = "sidecar-shm"
SIDECAR_SHM_DIR = "/tmp/pathways-sidecar-shm"
TRANSFER_VOLUME = "ifrt-proxy-transfer"
TRANSFER_DIR = "/tmp/ifrt_proxy"
HLO_VOLUME = "hlo-dump"
HLO_DIR = "/tmp/pwdeploy-hlo"
MTC_VOLUME = "mtc-ramdisk"  # mounted at mtc.ramdisk_dir (a config field)
# The CSI driver of GKE's multi-tier checkpointing (the HighScaleCheckpointing add-on); Cluster Toolkit and xpk
# mount it as an inline CSI volume.
MTC_CSI_DRIVER = "multitier-checkpoint.csi.storage.gke.io"

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
# The JobSet's restart attempt (0, then 1, 2, ... after each restart of the whole JobSet), a label and an
# annotation on the child Jobs and their pods (kubernetes-sigs/jobset pkg/constants/constants.go RestartsKey,
# set in labelAndAnnotateObject of pkg/controllers/jobset_controller.go; older releases set only the label).
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"

# GKE node labels, taints and annotations the TPU capacity modes use (docs/capacity.md gives the sources)
NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
TPU_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
# The compact placement policy of a multi-host tpu7/tpu7x node pool, as xpk names and selects it.
PLACEMENT_POLICY_LABEL = "cloud.google.com/placement-policy-name"
# Dynamic slicing (Cluster Toolkit v1.95.0 pkg/orchestrator/gke/scheduling.go, GetTopologyAnnotation): the
# slice's topology for GKE's slice controller, and Kueue TAS's placement of the pods (per slice with several).
SLICE_TOPOLOGY_ANNOTATION = "cloud.google.com/gke-tpu-slice-topology"
PODSET_REQUIRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
PODSET_SLICE_REQUIRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-slice-required-topology"
PODSET_SLICE_SIZE_ANNOTATION = "kueue.x-k8s.io/podset-slice-size"
TPU_RESOURCE = "google.com/tpu"  # the extended resource, and the taint GKE puts on TPU nodes
HOSTNAME_LABEL = "kubernetes.io/hostname"  # one node: exclusive placement of the head, one pod per host
# The label of a tpu7x partition of a topology that a dynamic slice's pods share (Kueue TAS level), per topology.
TPU_PARTITION_LABEL = "cloud.google.com/gke-tpu-partition-{topology}-id"
JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
# The JobSet failurePolicy rules' names (docs/restarts.md; manifests.failure_policy reports them).
SLICE_LOST_RULE = "slice_lost"
RETRY_EXIT_CODE_RULE = "retry_exit_code"
USER_PROGRAM_FAILED_RULE = "user_program_failed"
SPOT_LABEL = "cloud.google.com/gke-spot"  # label, and the taint GKE suggests for spot node pools
RESERVATION_NAME_LABEL = "cloud.google.com/reservation-name"
RESERVATION_PROJECT_LABEL = "cloud.google.com/reservation-project"  # a shared reservation's owner project
FLEX_START_LABEL = "cloud.google.com/gke-flex-start"
MAX_RUN_DURATION_LABEL = "cloud.google.com/gke-max-run-duration-seconds"
QUEUED_LABEL = "cloud.google.com/gke-queued"  # label and taint of queued-provisioning nodes
MAX_RUN_DURATION_ANNOTATION = "provreq.kueue.x-k8s.io/maxRunDurationSeconds"  # read by Kueue from the JobSet
SAFE_TO_EVICT_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict"

# The env contract: variables pwdeploy sets for the job's program (pwdeploy.envcontract, local runs). They are
# outputs, never read back as flag defaults: a shell that ran `eval "$(pwdeploy local env ...)"`, or a program
# inside a job that calls pwdeploy, must not have the job's own values override another config.
JOB_NAME_ENV = "PWDEPLOY_JOB_NAME"
DATA_WORKERS_ENV = "PWDEPLOY_DATA_WORKERS"
TPU_TYPE_ENV = "PWDEPLOY_TPU_TYPE"
TPU_TOPOLOGY_ENV = "PWDEPLOY_TPU_TOPOLOGY"
NUM_SLICES_ENV = "PWDEPLOY_NUM_SLICES"
CHIPS_PER_SLICE_ENV = "PWDEPLOY_CHIPS_PER_SLICE"
NUM_DEVICES_ENV = "PWDEPLOY_NUM_DEVICES"
PATHWAYS_VERSION_ENV = "PWDEPLOY_PATHWAYS_VERSION"
HLO_DUMP_DIR_ENV = "PWDEPLOY_HLO_DUMP_DIR"
PROFILE_DIR_ENV = "PWDEPLOY_PROFILE_DIR"
CHECKPOINT_DIR_ENV = "PWDEPLOY_CHECKPOINT_DIR"
# mtc.enabled: Orbax's local_checkpoint_directory (on the workers; a tmpfs in local runs) and its backup interval.
MTC_DIR_ENV = "PWDEPLOY_MTC_DIR"
MTC_BACKUP_MINUTES_ENV = "PWDEPLOY_MTC_BACKUP_INTERVAL_MINUTES"
MTC_BACKUP_STEPS_ENV = "PWDEPLOY_MTC_BACKUP_INTERVAL_STEPS"
LOCAL_DEVICES_ENV = "PWDEPLOY_LOCAL_DEVICES"
# The JobSet's name in main's env, from the pod's annotation (as the workers and the resource manager get it): a
# trainer names its run after it (MaxText's run_name), so a restart resumes the same run. Locally: the job's name.
JOBSET_NAME_ENV = "JOBSET_NAME"
# head.insecure_grpc: plain gRPC between the JAX client and the IFRT proxy instead of ALTS. XLA's IFRT proxy reads it
# on both sides and takes exactly "true" (xla/python/ifrt_proxy/common/grpc_credentials_possibly_insecure_wrapper.cc,
# compiled into jaxlib 0.10.2's libjax_common.so); a client and a proxy that disagree cannot connect.
INSECURE_GRPC_ENV = "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS"
RESTART_ATTEMPT_ENV = "PWDEPLOY_RESTART_ATTEMPT"  # 0 on the first run, then 1, 2, ... after each restart
FAIL_AT_STEP_ENV = "PWDEPLOY_FAIL_AT_STEP"  # local run --fail-at-step: runtime.step_done kills the job there
# local run --evict-at-step N: once step N is done, runtime.step_done creates the file EVICT_FLAG names, and local
# run stops the job from outside as the kubelet does (pwdeploy.local.eviction).
EVICT_AT_STEP_ENV = "PWDEPLOY_EVICT_AT_STEP"
EVICT_FLAG_ENV = "PWDEPLOY_EVICT_FLAG"
# The pod's terminationGracePeriodSeconds (scheduling.termination_grace_seconds, else Kubernetes' 30): how long the
# program has between the kubelet's SIGTERM and its SIGKILL (pwdeploy.runtime.stop_on_sigterm reads it).
TERMINATION_GRACE_ENV = "PWDEPLOY_TERMINATION_GRACE_SECONDS"
# What the job's program exits with when it lost a slice (pwdeploy.runtime.retry_on_slice_loss): sysexits.h
# EX_TEMPFAIL, "temporary failure; the user is invited to retry". The head's podFailurePolicy lets it, and
# scheduling.retry_exit_codes, restart the JobSet where any other non-zero exit fails it.
RETRY_EXIT_CODE = 75
# What main exits with when its pod is stopped from outside (128 + SIGTERM): Kueue suspending the JobSet (an
# eviction, a preemption), a deleted pod. Kubernetes marks neither with DisruptionTarget, so the head's
# podFailurePolicy leaves this code out of its FailJob rule: stopping a job is not the program failing.
STOPPED_EXIT_CODE = 143
ELASTIC_SLICES_ENV = "PWDEPLOY_ELASTIC_SLICES"  # tpu.elastic_slices, where > 0: slices the job may lose
# Local runs: which emulated devices make each slice (the local run's probe gives each its slice_index), and, for
# elastic jobs, the slice losses and returns runtime.step_done emulates (local run --lose-slice / --restore-slice).
LOCAL_SLICE_LAYOUT_ENV = "PWDEPLOY_LOCAL_SLICE_LAYOUT"  # "0-3 4-7": slice 0 is devices 0..3, slice 1 is 4..7
LOSE_SLICE_ENV = "PWDEPLOY_LOSE_SLICE"  # "1@40,0@90": SLICE@STEP, lost once step STEP is done
RESTORE_SLICE_ENV = "PWDEPLOY_RESTORE_SLICE"  # "1@80": SLICE@STEP, back once step STEP is done
ELASTIC_EVENTS_ENV = "PWDEPLOY_LOCAL_ELASTIC_EVENTS"  # a file the job appends one JSON line to per event
JOB_ENV_NAMES = frozenset(
    {
        JOB_NAME_ENV,
        DATA_WORKERS_ENV,
        TPU_TYPE_ENV,
        TPU_TOPOLOGY_ENV,
        NUM_SLICES_ENV,
        CHIPS_PER_SLICE_ENV,
        NUM_DEVICES_ENV,
        PATHWAYS_VERSION_ENV,
        HLO_DUMP_DIR_ENV,
        PROFILE_DIR_ENV,
        CHECKPOINT_DIR_ENV,
        MTC_DIR_ENV,
        MTC_BACKUP_MINUTES_ENV,
        MTC_BACKUP_STEPS_ENV,
        LOCAL_DEVICES_ENV,
        RESTART_ATTEMPT_ENV,
        FAIL_AT_STEP_ENV,
        EVICT_AT_STEP_ENV,
        EVICT_FLAG_ENV,
        TERMINATION_GRACE_ENV,
        ELASTIC_SLICES_ENV,
        LOCAL_SLICE_LAYOUT_ENV,
        LOSE_SLICE_ENV,
        RESTORE_SLICE_ENV,
        ELASTIC_EVENTS_ENV,
    }
)
