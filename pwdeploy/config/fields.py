"""The job config's fields: one table that drives parsing, the CLI flags, env defaults and the JSON Schema.

Each row names a dotted path in the YAML file (``tpu.slices``), the kind of value, its default, the flag that
sets it and its help text. Flags beat environment defaults (``PWDEPLOY_<FLAG>``), which beat the file, which
beats the defaults here.
"""

# No `from __future__ import annotations`: typing.NamedTuple compiles each string annotation into a ForwardRef
# (tens of microseconds a field), which evaluated annotations skip; as in pwdeploy.config.model.
from enum import Enum
from typing import NamedTuple

from pwdeploy.config import capacity_modes
from pwdeploy.identifiers import JOB_ENV_NAMES, RETRY_EXIT_CODE


class Kind(Enum):
    STR = "string"
    INT = "integer"
    BOOL = "boolean"
    QUANTITY = "quantity"  # a Kubernetes quantity: 8, 500m, 16Gi
    GCS = "gcs"  # gs://bucket[/prefix]
    PATH = "path"  # a local path, relative to the config file
    IMAGE = "image"  # a container image reference (OCI grammar): [registry/]repository[:tag][@digest]
    COMMAND = "command"  # a string (split like a shell) or a list of strings
    STR_LIST = "string list"
    FLAG_LIST = "flag list"  # --name=value items
    ENV = "env"  # a mapping of NAME: value
    SECRET_ENV = "secret env"  # a mapping of NAME: SECRET/KEY (a Kubernetes Secret and one of its keys)
    DURATION = "duration"  # 90m, 24h, 7d or seconds, kept as seconds
    LABELS = "labels"  # a mapping of Kubernetes label: value (KEY=VALUE flags)
    TOLERATIONS = "tolerations"  # KEY[=VALUE]:EFFECT items
    EXIT_CODES = "exit codes"  # process exit codes 1-255: one or a list
    VOLUMES = "volumes"  # gcsfuse/ramdisk mounts: mappings, or KIND:SOURCE:PATH[@WHERE][:ro] items


class Field(NamedTuple):
    path: str
    kind: Kind
    default: object
    help: str
    flag: str | None = None
    minimum: int | None = None
    envvar: bool = True  # whether PWDEPLOY_<FLAG> sets it
    empty_disables: bool = False  # an empty string means "off" rather than "the default"
    choices: tuple[str, ...] | None = None  # the only values a STR field accepts

    @property
    def section(self) -> str:
        return self.path.split(".")[0] if "." in self.path else ""

    @property
    def key(self) -> str:
        return self.path.split(".")[-1]

    @property
    def env_name(self) -> str | None:
        """``PWDEPLOY_<FLAG>``, the flag's environment default; None where a job's own env contract uses the name."""
        if self.flag is None or not self.envvar:
            return None
        name = self.flag_env_name
        return None if name in JOB_ENV_NAMES else name

    @property
    def flag_env_name(self) -> str:
        """``PWDEPLOY_<FLAG>`` whether or not it is read (a repeatable flag has no environment default)."""
        return "PWDEPLOY_" + str(self.flag).split("/")[0].lstrip("-").replace("-", "_").upper()  # --gcs-olm/--no-...


_ = Field
FIELDS: tuple[Field, ...] = (
    _("name", Kind.STR, None,
      "JobSet name (DNS-1035 label of at most 22 characters: the coordinator label holds it twice)", "--name"),
    _("namespace", Kind.STR, None,
      "Kubernetes namespace; default: the kubeconfig context's (render leaves it out, as kubectl expects)",
      "--namespace"),
    _("pathways_version", Kind.STR, None,
      "JAX version the Pathways images are built for (the newest release tag seen for it: docs/images.md); "
      "default: the installed jax, else the newest JAX with a release",
      "--pathways-version"),
    _("allow_version_mismatch", Kind.BOOL, False,
      "Allow a pathways_version other than the installed jax (experts only)", "--allow-version-mismatch"),
    _("image_registry", Kind.STR, "us-docker.pkg.dev/cloud-tpu-v2-images/pathways",
      "Registry holding the Pathways proxy_server and server images", "--image-registry"),
    _("headless", Kind.BOOL, False,
      "Interactive mode: proxy and resource manager only, connect a notebook through the proxy", "--headless"),
    _("xla_flags", Kind.FLAG_LIST, (), "XLA flags for the IFRT proxy, each --name=value", "--xla-flag",
      envvar=False),
    _("worker_flags", Kind.FLAG_LIST, (),
      "Flags for every pathways-worker (e.g. --megascale_*), each --name=value", "--worker-flag", envvar=False),
    _("worker_env", Kind.ENV, {}, "Extra environment of every pathways-worker (e.g. LIBTPU_INIT_ARGS)",
      "--worker-env", envvar=False),
    _("proxy_env", Kind.ENV, {}, "Extra environment of pathways-proxy (the IFRT proxy in the head pod)",
      "--proxy-env", envvar=False),
    _("rm_env", Kind.ENV, {}, "Extra environment of pathways-rm (the resource manager in the head pod)",
      "--rm-env", envvar=False),
    _("rm_flags", Kind.FLAG_LIST, (),
      "Extra flags of pathways-rm, each --name=value (those pwdeploy sets itself are refused)", "--rm-flag",
      envvar=False),
    _("volumes", Kind.VOLUMES, (),
      "Volumes of the user's: gcsfuse:BUCKET[/PREFIX]:PATH (a bucket through GCS FUSE) or ramdisk:SIZE:PATH (memory-"
      "backed), in main (default), @workers or @main,workers, :ro for read-only (docs/config.md#volumes)",
      "--volume", envvar=False),
    _("images.server", Kind.IMAGE, None,
      "Pathways server image (RM, and workers unless images.worker), tag or digest; default: "
      "<image_registry>/server:<the newest release tag seen for pathways_version>", "--server-image"),
    _("images.proxy_server", Kind.IMAGE, None,
      "Pathways IFRT proxy image, tag or digest; default: <image_registry>/proxy_server:<the newest release tag "
      "seen for pathways_version>",
      "--proxy-server-image"),
    _("images.worker", Kind.IMAGE, None,
      "Image of the pathways-worker containers, tag or digest; default: the server image", "--worker-image"),
    _("tpu.type", Kind.STR, None, "TPU slice type such as v5p-8, v6e-16, v5litepod-32", "--tpu-type"),
    _("tpu.family", Kind.STR, None, "TPU family (v4, v5e, v5p, v6e, tpu7, tpu7x), with tpu.topology", "--tpu-family"),
    _("tpu.topology", Kind.STR, None, "TPU topology such as 4x4 or 2x2x4, with tpu.family", "--tpu-topology"),
    _("tpu.slices", Kind.INT, 1, "Number of TPU slices (worker replicas)", "--num-slices", minimum=1),
    _("tpu.elastic_slices", Kind.INT, 0,
      "Slices the job may lose and keep training (proxy --num_elastic_slices); 0 disables elasticity",
      "--elastic-slices", minimum=0),
    _("tpu.max_slice_restarts", Kind.INT, 1,
      "With elastic slices: restarts allowed per slice (worker Job backoffLimit = this x VMs per slice)",
      "--max-slice-restarts", minimum=0),
    _("tpu.worker_memory", Kind.QUANTITY, None, "Memory limit of each TPU worker container (optional)",
      "--worker-memory"),
    _("tpu.shm_size", Kind.QUANTITY, "16Gi", "Size of the workers' memory-backed /dev/shm", "--worker-shm-size"),
    _("tpu.capacity", Kind.STR, "on-demand",
      f"How the TPU VMs are bought: {', '.join(capacity_modes.NAMES)} (reservation with tpu.reservation; queued: "
      "queued provisioning through Kueue, with scheduling.queue)", "--capacity",
      choices=capacity_modes.NAMES),
    _("tpu.reservation", Kind.STR, None,
      "Reservation the workers consume (capacity reservation): NAME, or projects/PROJECT/reservations/NAME when "
      "shared from another project", "--reservation"),
    _("tpu.max_run_duration", Kind.DURATION, None,
      "flex-start and queued only: how long the TPU VMs may run, 10m to 7d (90m, 24h, 7d, or seconds from 3600 on)",
      "--max-run-duration"),
    _("tpu.dynamic_slicing", Kind.BOOL, False,
      "tpu7x only: let GKE form each slice from 4x4x4 sub-blocks at scheduling time (dynamic super- and "
      "sub-slicing through Kueue topology-aware scheduling; needs capacity reservation (All Capacity mode) and "
      "scheduling.queue; docs/capacity.md)", "--dynamic-slicing"),
    _("tpu.node_selector", Kind.LABELS, {},
      "Extra node labels the TPU workers select, KEY=VALUE (e.g. cloud.google.com/gke-nodepool=tpu-a)",
      "--tpu-node-selector", envvar=False),
    _("tpu.tolerations", Kind.TOLERATIONS, (),
      "Extra node taints the TPU workers tolerate, KEY[=VALUE]:EFFECT (e.g. dedicated=ml:NoSchedule)",
      "--tpu-toleration", envvar=False),
    _("main.image", Kind.IMAGE, None, "Image of the user's JAX container (tag or digest; not :latest)", "--image"),
    _("main.command", Kind.COMMAND, None,
      "Command of the user's container, run without a shell: a string split into words as a shell would (no pipes, "
      "&&, redirections or variables), or a list", "--command"),
    _("main.env", Kind.ENV, {}, "Extra environment of the user's container", "--env", envvar=False),
    _("main.secret_env", Kind.SECRET_ENV, {},
      "Environment of the user's container from a Kubernetes Secret: NAME=SECRET/KEY (secretKeyRef)",
      "--secret-env", envvar=False),
    _("main.cpu", Kind.QUANTITY, "24", "CPU limit of the user's container", "--main-cpu"),
    _("main.memory", Kind.QUANTITY, "100Gi", "Memory limit of the user's container (with a unit: 100Gi)",
      "--main-memory"),
    _("main.shm_size", Kind.QUANTITY, "16Gi", "Size of the memory-backed /dev/shm (within the memory limit)",
      "--shm-size"),
    _("main.data_workers", Kind.INT, None,
      "Data-loader worker processes (PWDEPLOY_DATA_WORKERS); default: CPU limit - 1; at most the CPU limit",
      "--data-workers", minimum=0),
    _("main.privileged", Kind.BOOL, False, "Run the user's container privileged (off by default)", "--privileged"),
    _("main.profiler_host", Kind.STR, "127.0.0.1",
      "Address pathwaysutils' profiler server binds (PATHWAYS_PROFILING_SERVER_HOST): 127.0.0.1 keeps it on the "
      "head node's loopback, reached through the API server by `pwdeploy profile`; 0.0.0.0 opens it to the node's "
      "network (the head pod uses the host network; no token unless PATHWAYS_PROFILING_AUTH_TOKEN is set)",
      "--profiler-host", choices=("127.0.0.1", "0.0.0.0")),
    _("head.node_pool", Kind.STR, "cpu-np", "CPU node pool of the Pathways head pod", "--head-node-pool"),
    _("head.proxy_cpu", Kind.QUANTITY, "16", "CPU limit of pathways-proxy", "--proxy-cpu"),
    _("head.proxy_memory", Kind.QUANTITY, "100Gi", "Memory limit of pathways-proxy", "--proxy-memory"),
    _("head.rm_cpu", Kind.QUANTITY, "8", "CPU limit of pathways-rm", "--rm-cpu"),
    _("head.rm_memory", Kind.QUANTITY, "32Gi", "Memory limit of pathways-rm", "--rm-memory"),
    _("head.transfer_shm_size", Kind.QUANTITY, None,
      "Optional cap (sizeLimit) of the memory-backed directory the JAX client and the IFRT proxy share for large "
      "transfers; default: no cap (main.memory bounds it); a transfer that outgrows the cap cannot be written and "
      "aborts the client; 0 turns the directory off", "--transfer-shm-size"),
    _("head.share_process_namespace", Kind.BOOL, True,
      "shareProcessNamespace on the head pod: the pod's pause container is PID 1 and main gets SIGTERM as any "
      "process does (143 on a stop from outside); false: main is PID 1 of its container, and the kernel drops a "
      "SIGTERM it has no handler for, so a stop ends in SIGKILL (137) after the grace period (docs/restarts.md)",
      "--share-process-namespace/--no-share-process-namespace"),
    _("head.insecure_grpc", Kind.BOOL, False,
      "Plain gRPC between the JAX client and the IFRT proxy instead of ALTS (IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS"
      "=true on pathways-proxy and main, and in connect's exports), for a client the proxy refuses in the ALTS "
      "handshake; anyone who reaches the proxy's port on the node may then use it (docs/sessions.md)",
      "--insecure-grpc"),
    _("storage.scratch", Kind.GCS, None,
      "GCS compile-cache (scratch) location, gs://bucket[/prefix]; required", "--gcs-scratch"),
    _("storage.enable_olm", Kind.BOOL, True,
      "Let Pathways set a lifecycle rule on the scratch bucket (false: --enable_gcs_olm=false)",
      "--gcs-olm/--no-gcs-olm"),
    _("storage.hlo_dump", Kind.GCS, None,
      "HLO dump location: the proxy dumps to a volume in the head pod, an uploader container copies it here",
      "--hlo-dump"),
    _("storage.hlo_uploader_image", Kind.IMAGE, "google/cloud-sdk:502.0.0-slim",
      "Image of the head pod's HLO uploader (needs gcloud; tag or digest)", "--hlo-uploader-image"),
    _("storage.profiles", Kind.GCS, None, "Profile directory (PWDEPLOY_PROFILE_DIR in the user's container)",
      "--profile-dir"),
    _("storage.checkpoints", Kind.GCS, None,
      "Checkpoint directory (PWDEPLOY_CHECKPOINT_DIR in the user's container)", "--checkpoint-dir"),
    _("scheduling.max_restarts", Kind.INT, None,
      "JobSet failurePolicy.maxRestarts; default: 3 with storage.checkpoints or mtc.enabled (a restart resumes), "
      "else 0",
      "--max-restarts", minimum=0),
    _("scheduling.retry_exit_codes", Kind.EXIT_CODES, (),
      f"Exit codes of main that restart the JobSet (counted in max_restarts) instead of failing it, besides "
      f"{RETRY_EXIT_CODE} (EX_TEMPFAIL: pwdeploy.runtime.retry_on_slice_loss exits with it on a lost slice), "
      "which always does", "--retry-exit-code"),
    _("scheduling.restart_on_user_code_failure", Kind.BOOL, False,
      "Restart the JobSet (counted in max_restarts) on any non-zero exit of main, as xpk's flag of that name, not "
      "only on the retry exit codes; an OOM kill (137) then restarts too (docs/restarts.md)",
      "--restart-on-user-code-failure"),
    _("scheduling.restart_strategy", Kind.STR, "BlockingRecreate",
      "JobSet failurePolicy.restartStrategy: BlockingRecreate (old pods gone before new ones start) or Recreate",
      "--restart-strategy", choices=("BlockingRecreate", "Recreate")),
    _("scheduling.ttl_after_finished", Kind.INT, None,
      "JobSet ttlSecondsAfterFinished: seconds after the JobSet finishes that Kubernetes deletes it with its pods "
      "and their logs (0: at once); default: kept until `pwdeploy delete`, so status, logs and diagnose can still "
      "read a failed job", "--ttl-after-finished", minimum=0),
    _("scheduling.queue", Kind.STR, None, "Kueue LocalQueue (label kueue.x-k8s.io/queue-name)", "--queue"),
    _("scheduling.priority_class", Kind.STR, None, "PriorityClass of the pods", "--priority-class"),
    _("scheduling.service_account", Kind.STR, None,
      "Kubernetes service account of the pods; host-network pods get no Workload Identity: GCS is reached as the "
      "node pool's service account, so grant bucket roles there", "--service-account"),
    _("scheduling.termination_grace_seconds", Kind.INT, None, "Pods' terminationGracePeriodSeconds",
      "--termination-grace-seconds", minimum=0),
    _("sidecar.image", Kind.IMAGE, None,
      "Colocated-Python sidecar image for the workers (tag or digest); enables the sidecar", "--sidecar-image"),
    _("sidecar.repository", Kind.STR, None,
      "Where `pwdeploy sidecar build` tags and pushes the sidecar (registry/repo); enables the sidecar",
      "--sidecar-repository"),
    _("sidecar.base_image", Kind.IMAGE, None,
      "Colocated-Python base image; default: the Pathways sidecar base for this JAX and Python version",
      "--sidecar-base-image"),
    _("sidecar.source_dir", Kind.PATH, None, "Directory of user code copied into the sidecar image",
      "--sidecar-source-dir"),
    _("sidecar.requirements", Kind.PATH, None, "requirements.txt installed into the sidecar image",
      "--sidecar-requirements"),
    _("sidecar.pip_args", Kind.STR_LIST, (), "Extra pip install arguments for the sidecar build", None),
    _("sidecar.base_release", Kind.STR, None,
      "Date part of the default base tag (<date>-python_X.Y-jax_V, e.g. 20260423); needed without base_image",
      "--sidecar-base-release"),
    _("sidecar.python_version", Kind.STR, None,
      "Python X.Y of the job's client (the main image); default: the Python running pwdeploy",
      "--sidecar-python"),
    _("sidecar.shm_size", Kind.QUANTITY, "8Gi", "Shared-memory directory between sidecar and worker",
      "--sidecar-shm-size"),
    _("sidecar.cpu", Kind.QUANTITY, None,
      "CPU request of the sidecar container (Google's recipes ask 4); default: none", "--sidecar-cpu"),
    _("sidecar.memory", Kind.QUANTITY, None,
      "Memory request of the sidecar container (Google's recipes ask 16Gi; no limit: a limit would kill the "
      "sidecar in the middle of a save); default: none", "--sidecar-memory"),
    _("mtc.enabled", Kind.BOOL, False,
      "Multi-tier checkpointing: GKE's MTC driver keeps Orbax's local checkpoints in each TPU node's ramdisk, "
      "replicates them and backs them up to GCS; mounts its CSI volume at mtc.ramdisk_dir in the workers (needs the "
      "colocated-Python sidecar and the cluster set up once: docs/checkpoints.md)", "--mtc"),
    _("mtc.ramdisk_dir", Kind.STR, "/tmp/mtc_checkpoints",
      "Where the workers mount the MTC volume, Orbax's local_checkpoint_directory (PWDEPLOY_MTC_DIR): absolute, "
      "not / and not under /dev, /proc, /sys, /etc, /bin, /sbin, /usr, /lib or /lib64", "--mtc-ramdisk-dir"),
    _("mtc.backup_interval_minutes", Kind.INT, None,
      "Minutes between the MTC driver's backups to GCS; default: 30, as Orbax's (not with backup_interval_steps)",
      "--mtc-backup-minutes", minimum=1),
    _("mtc.backup_interval_steps", Kind.INT, None,
      "Steps between the MTC driver's backups to GCS, instead of minutes", "--mtc-backup-steps", minimum=1),
    _("mtc.backup_bucket", Kind.GCS, None,
      "The bucket the cluster's CheckpointConfiguration backs up to (gs://BUCKET), when you want it checked: "
      "preflight asks GCS whether it has hierarchical namespace (MTC's backups need it) and checks that the "
      "CheckpointConfiguration selecting the slices' nodes names it", "--mtc-backup-bucket"),
    _("image.repository", Kind.STR, None,
      "Where `pwdeploy image build` tags and pushes the job image (registry/repo); render pins main.image to it",
      "--image-repository"),
    _("image.base", Kind.IMAGE, None,
      "Base image of the job image; default: python:<X.Y>-slim-bookworm of the client's Python",
      "--image-base"),
    _("image.source_dir", Kind.PATH, None, "Directory copied into the job image; default: the config's folder",
      "--image-source-dir"),
    _("image.requirements", Kind.PATH, None, "requirements.txt installed into the job image",
      "--image-requirements"),
    _("image.pip_args", Kind.STR_LIST, (), "Extra pip install arguments for the job image build", None),
    _("local.devices", Kind.INT, None, "Emulated CPU devices for `local run`; default: the target's chips",
      "--devices", minimum=1),
    _("local.compile_cache", Kind.STR, ".pwdeploy/jax-cache",
      "Persistent JAX compilation cache of `local run` (a directory or gs:// URI; empty disables)",
      "--compile-cache", empty_disables=True),
    _("local.hlo_dir", Kind.PATH, ".pwdeploy/hlo",
      "Local directory that replaces storage.hlo_dump in `local run`", "--local-hlo-dir"),
)  # fmt: skip

BY_PATH: dict[str, Field] = {f.path: f for f in FIELDS}
SECTIONS: dict[str, tuple[Field, ...]] = {}
for _field in FIELDS:
    SECTIONS.setdefault(_field.section, ())
    SECTIONS[_field.section] += (_field,)
