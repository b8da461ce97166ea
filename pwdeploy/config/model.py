"""The typed, immutable job config (JobConfig and its sections) that pwdeploy.config builds and validates.

Everything downstream (manifests, local runs, sidecar builds, preflight, submit) trusts this object.
"""


# No `from __future__ import annotations`: typing.NamedTuple compiles each string annotation into a ForwardRef
# (tens of microseconds a field), which evaluated annotations skip; this module's NamedTuples are on render's path.

from pathlib import Path
from typing import NamedTuple

from pwdeploy import catalog, releases
from pwdeploy.config.values import GcsPath
from pwdeploy.quantity import Quantity


class Toleration(NamedTuple):
    """A taint the TPU workers tolerate: ``key=value:effect``, or any value of ``key`` when value is None."""

    key: str
    value: str | None
    effect: str

    @property
    def text(self) -> str:
        """``KEY[=VALUE]:EFFECT``, as the flag and the config file give it."""
        return f"{self.key}{'' if self.value is None else '=' + self.value}:{self.effect}"


class TpuConfig(NamedTuple):
    type: str | None
    family: str | None
    topology: str | None
    slices: int
    elastic_slices: int
    max_slice_restarts: int
    worker_memory: Quantity | None
    shm_size: Quantity
    slice: catalog.TpuSlice
    # How the TPU VMs are bought (pwdeploy.config.capacity): on-demand, spot, reservation, flex-start, queued.
    capacity: str = "on-demand"
    reservation: str | None = None  # NAME, or projects/PROJECT/reservations/NAME
    max_run_duration: int | None = None  # seconds; flex-start and queued only
    node_selector: tuple[tuple[str, str], ...] = ()  # extra labels the TPU nodes must carry
    tolerations: tuple[Toleration, ...] = ()  # extra taints the workers tolerate
    dynamic_slicing: bool = False  # tpu7x: slices formed from sub-blocks through Kueue TAS (manifests.placement)

    @property
    def total_chips(self) -> int:
        return self.slices * self.slice.chips


class Volume(NamedTuple):
    """A volume of the user's (``volumes``): a bucket through GCS FUSE or a memory-backed ramdisk, mounted at
    ``path`` in main, in the workers (pathways-worker and the colocated-Python sidecar), or both (xpk's
    ``--storage``, its ``--ramdisk-directory``)."""

    kind: str  # "gcsfuse" or "ramdisk"
    source: str  # the bucket (gcsfuse) or the size, a memory quantity (ramdisk)
    path: str  # where it is mounted: absolute
    where: tuple[str, ...]  # "main", "workers"
    read_only: bool = False
    mount_options: str | None = None  # GCS FUSE mount options (default implicit-dirs)

    @property
    def text(self) -> str:
        """``KIND:SOURCE:PATH[@WHERE][:ro]``, as the flag gives it."""
        where = "" if self.where == ("main",) else "@" + ",".join(self.where)
        return f"{self.kind}:{self.source}:{self.path}{where}{':ro' if self.read_only else ''}"


class SecretRef(NamedTuple):
    """An environment variable taken from one key of a Kubernetes Secret (``valueFrom.secretKeyRef``)."""

    env: str
    secret: str
    key: str


class MainConfig(NamedTuple):
    image: str | None
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    secret_env: tuple[SecretRef, ...]
    cpu: Quantity
    memory: Quantity
    shm_size: Quantity
    data_workers: int  # resolved: never None
    privileged: bool
    profiler_host: str = "127.0.0.1"  # PATHWAYS_PROFILING_SERVER_HOST of the user's container


class HeadConfig(NamedTuple):
    node_pool: str
    proxy_cpu: Quantity
    proxy_memory: Quantity
    rm_cpu: Quantity
    rm_memory: Quantity
    transfer_shm_size: Quantity | None  # a cap on the client-proxy shared memory; None: no cap; "0": none at all
    share_process_namespace: bool = True  # the pause container is PID 1, not main (docs/manifests.md)
    insecure_grpc: bool = False  # plain gRPC between the JAX client and the proxy, not ALTS (docs/sessions.md)


class StorageConfig(NamedTuple):
    scratch: GcsPath
    enable_olm: bool
    hlo_dump: GcsPath | None
    hlo_uploader_image: str
    profiles: GcsPath | None
    checkpoints: GcsPath | None

    def locations(self) -> dict[str, GcsPath]:
        """The GCS locations that are set, by config field."""
        found = {
            "storage.scratch": self.scratch,
            "storage.hlo_dump": self.hlo_dump,
            "storage.profiles": self.profiles,
            "storage.checkpoints": self.checkpoints,
        }
        return {name: path for name, path in found.items() if path is not None}


class SchedulingConfig(NamedTuple):
    max_restarts: int
    retry_exit_codes: tuple[int, ...]  # the user's own, ascending; identifiers.RETRY_EXIT_CODE is always one too
    restart_strategy: str
    queue: str | None
    priority_class: str | None
    service_account: str | None
    termination_grace_seconds: int | None
    ttl_after_finished: int | None = None  # seconds; None: the finished JobSet is kept
    restart_on_user_code_failure: bool = False  # any non-zero exit of main restarts the JobSet (counted)


class SidecarConfig(NamedTuple):
    image: str | None
    repository: str | None
    base_image: str | None
    source_dir: Path | None
    requirements: Path | None
    pip_args: tuple[str, ...]
    shm_size: Quantity
    base_release: str | None = None  # only `pwdeploy sidecar` reads these two
    python_version: str | None = None
    cpu: Quantity | None = None  # requests of the sidecar container; None: none
    memory: Quantity | None = None

    @property
    def enabled(self) -> bool:
        return self.image is not None or self.repository is not None


class MtcConfig(NamedTuple):
    """Multi-tier checkpointing (docs/checkpoints.md): the MTC CSI volume on the workers, Orbax's local directory."""

    enabled: bool = False
    ramdisk_dir: str = "/tmp/mtc_checkpoints"
    backup_interval_minutes: int | None = None  # exactly one of the two is set once the config loaded
    backup_interval_steps: int | None = None
    backup_bucket: GcsPath | None = None  # the CheckpointConfiguration's bucket, for preflight to check


class ImagesConfig(NamedTuple):
    """Pinned Pathways images; None: derived from image_registry and pathways_version."""

    server: str | None
    proxy_server: str | None
    worker: str | None = None  # None: the server image


class ImageConfig(NamedTuple):
    """The job's own (main) container image, as `pwdeploy image build` makes it."""

    repository: str | None
    base: str | None
    source_dir: Path | None
    requirements: Path | None
    pip_args: tuple[str, ...]


class LocalConfig(NamedTuple):
    devices: int | None
    compile_cache: str
    hlo_dir: Path


class JobConfig(NamedTuple):
    name: str
    namespace: str | None  # None: the kubeconfig context's namespace
    pathways_version: str
    allow_version_mismatch: bool
    image_registry: str
    headless: bool
    xla_flags: tuple[str, ...]
    worker_flags: tuple[str, ...]
    worker_env: tuple[tuple[str, str], ...]
    images: ImagesConfig
    tpu: TpuConfig
    main: MainConfig
    head: HeadConfig
    storage: StorageConfig
    scheduling: SchedulingConfig
    sidecar: SidecarConfig
    image: ImageConfig
    local: LocalConfig
    base_dir: Path = Path(".")  # relative paths in the file resolve here
    proxy_env: tuple[tuple[str, str], ...] = ()
    rm_env: tuple[tuple[str, str], ...] = ()
    rm_flags: tuple[str, ...] = ()
    mtc: MtcConfig = MtcConfig()
    volumes: tuple[Volume, ...] = ()

    @property
    def proxy_image(self) -> str:
        """images.proxy_server, else the newest release seen for pathways_version (pwdeploy.releases)."""
        return (
            self.images.proxy_server
            or f"{self.image_registry}/proxy_server:{releases.default_tag(self.pathways_version)}"
        )

    @property
    def server_image(self) -> str:
        """images.server, else the newest release seen for pathways_version (pwdeploy.releases)."""
        return self.images.server or f"{self.image_registry}/server:{releases.default_tag(self.pathways_version)}"

    @property
    def worker_image(self) -> str:
        """The pathways-worker image: images.worker, else the server image (as Cluster Toolkit defaults it)."""
        return self.images.worker or self.server_image


# JobConfig's sections by the config section whose rows (pwdeploy.config.fields) they hold. Each tuple holds
# exactly its section's rows plus the values the checks resolve (pwdeploy.config.constraints.RESOLVED); loading
# pwdeploy.config.load fails naming any field one has and the other lacks (pwdeploy.config.agreement).
SECTION_MODELS: dict[str, type[tuple[object, ...]]] = {
    "images": ImagesConfig,
    "tpu": TpuConfig,
    "main": MainConfig,
    "head": HeadConfig,
    "storage": StorageConfig,
    "scheduling": SchedulingConfig,
    "sidecar": SidecarConfig,
    "image": ImageConfig,
    "local": LocalConfig,
    "mtc": MtcConfig,
}
LOADER_FIELDS = ("base_dir",)  # JobConfig fields the loader sets itself, from where the config file is
