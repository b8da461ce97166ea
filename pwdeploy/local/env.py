"""The environment of a local run: pwdeploy's env contract plus what makes JAX emulate the target on CPU.

Pure functions over the JobConfig; ``plan`` gathers everything ``local run`` and ``local env`` need.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from importlib.util import find_spec
from pathlib import Path

from pwdeploy import identifiers as ids
from pwdeploy.config import JobConfig
from pwdeploy.envcontract import job_env
from pwdeploy.errors import ConfigError
from pwdeploy.local.flags import flag_name, split_cpu_flags
from pwdeploy.local.gcs_redirect import Named, named_locations
from pwdeploy.slices import format_layout

# XLA's CPU client runs collectives on a thread pool of this size. Below ~2 threads per emulated device, a
# sharded loop dispatched back-to-back dead-locks in an all-reduce and XLA aborts after ~60 s.
THREADS_PER_DEVICE = 2
MAX_DEVICES = 1024
# Emulating more devices than this many per core still works, only slowly; say so.
DEVICES_PER_CORE_WARNING = 8
PYTHON_NAMES = frozenset({"python", "python3", f"python3.{sys.version_info.minor}"})
# Where a local run writes what the job would write to the cluster's buckets (in the config file's folder, beside
# the default compile cache and HLO directory): a local run must not write a production checkpoint or profile.
LOCAL_STATE = Path(".pwdeploy")
LOCAL_OUTPUTS = {ids.PROFILE_DIR_ENV: "profiles", ids.CHECKPOINT_DIR_ENV: "checkpoints"}  # storage.<value>
CACHE_VARS = (
    "JAX_COMPILATION_CACHE_DIR",
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES",
)
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"  # honoured by gcsfs (JAX's gs:// path) as by google-cloud-storage
# What gcsfs needs against a GCS emulator, each measured: with its zonal/hierarchical-bucket support on (the
# default), gcsfs asks the bucket's layout over gRPC, which an emulator does not speak: 60 s per lookup. With
# Application Default Credentials present, gcsfs refreshes and sends them (offline: every cache read and write
# fails); anonymous is what the emulator expects. Both are read from the environment (fsspec: FSSPEC_<proto>_<kw>).
GCSFS_EMULATOR_ENV = {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false", "FSSPEC_GS_TOKEN": "anon"}


@dataclass(frozen=True)
class LocalPlan:
    """What a local run starts: the command, where, and the variables set on top of the caller's env."""

    command: tuple[str, ...]
    cwd: Path
    devices: int
    env: dict[str, str]
    hlo_dir: Path | None  # where HLO dumps go locally (None: the job dumps none)
    outputs: dict[str, Path]  # PWDEPLOY_PROFILE_DIR / PWDEPLOY_CHECKPOINT_DIR -> the local stand-in, where set
    compile_cache: str | None  # a directory or gs:// URI (None: disabled)
    dropped_flags: tuple[str, ...]
    warnings: tuple[str, ...]
    notes: tuple[str, ...] = ()  # informative: what differs from the cluster by design
    gcs: tuple[Named, ...] = ()  # the gs:// locations the job names, which a local run sends to an emulator


def device_count(job: JobConfig, cores: int) -> tuple[int, list[str]]:
    """Emulated devices (``local.devices``, else every chip of the target) and warnings about them."""
    explicit = job.local.devices is not None
    devices = job.local.devices if job.local.devices is not None else job.tpu.total_chips
    if devices > MAX_DEVICES:
        source = "" if explicit else f" (the {job.tpu.slices} x {job.tpu.slice.type_name} target's chips)"
        raise ConfigError(
            "local.devices",
            f"{devices} emulated devices{source} is more than a local run can emulate (at most {MAX_DEVICES})",
            hint="pass --devices N with a smaller N, e.g. --devices 8",
        )
    warnings = []
    if devices > DEVICES_PER_CORE_WARNING * cores:
        warnings.append(
            f"{devices} emulated devices on {cores} CPU core(s): expect a slow run (each device is a CPU "
            "thread pool); --devices N lowers it"
        )
    chips = job.tpu.total_chips
    if explicit and chips % devices:
        divisors = ", ".join(str(d) for d in range(1, chips) if chips % d == 0)
        warnings.append(
            f"local.devices {devices}: the target ({job.tpu.slices} x {job.tpu.slice.type_name}) has {chips} chips, "
            f"and a mesh shaped for it cannot be laid over {devices} devices (nor split into equal slices); use "
            f"--devices {chips}, or a divisor of it ({divisors}) for a smaller run"
        )
    return devices, warnings


def compile_cache_location(job: JobConfig) -> str | None:
    """The persistent compilation cache: a gs:// URI as given; a local path relative to the config file's folder.

    Like every relative path of the config (and the default ``.pwdeploy/`` state of ``local.hlo_dir``): the same
    cache whichever directory the run starts from.
    """
    value = job.local.compile_cache
    if not value:
        return None
    if value.startswith("gs://"):
        return value
    path = Path(value).expanduser()
    return str((job.base_dir / path).resolve())


def xla_flags(job: JobConfig, devices: int, hlo_dir: Path | None) -> tuple[str, list[str]]:
    """(XLA_FLAGS for the CPU backend, TPU-only flags left out).

    On the cluster two sets of flags apply: main's own XLA_FLAGS (``main.env``) to the JAX client's process, and
    ``xla_flags`` to the IFRT proxy, which compiles the program. Locally the job's one process does both, so it
    gets both, main's first and the proxy's after (a flag both name takes the proxy's value: it is the compiler's
    on the cluster), each without the flags the CPU backend does not know."""
    own_kept, own_dropped = split_cpu_flags(dict(job.main.env).get("XLA_FLAGS", "").split())
    kept, dropped = split_cpu_flags(job.xla_flags)
    proxy_names = {flag_name(f) for f in kept}
    flags = [f"--xla_force_host_platform_device_count={devices}"]
    flags += [f for f in own_kept if flag_name(f) not in proxy_names]
    # The cluster passes the HLO location to the proxy; locally the job's process compiles, so it dumps.
    flags += [f for f in kept if not (hlo_dir is not None and flag_name(f) == "xla_dump_to")]
    if hlo_dir is not None:
        flags = [f for f in flags if flag_name(f) != "xla_dump_to"] + [f"--xla_dump_to={hlo_dir}"]
    return " ".join(flags), own_dropped + dropped


def local_outputs(job: JobConfig) -> dict[str, Path]:
    """Local stand-ins, under the config file's folder, for the gs:// profile and checkpoint locations it sets."""
    env = job_env(job)
    state = job.base_dir / LOCAL_STATE
    return {name: (state / folder).resolve() for name, folder in LOCAL_OUTPUTS.items() if name in env}


def local_env(
    job: JobConfig,
    devices: int,
    *,
    hlo_dir: Path | None,
    compile_cache: str | None,
    outputs: Mapping[str, Path] | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The variables a local run sets: the cluster's env contract without the proxy, with the storage locations
    the job writes replaced by local directories (``hlo_dir``, ``outputs``), plus the CPU emulation.

    ``environ`` is the caller's environment the job inherits: with STORAGE_EMULATOR_HOST in it, a gs:// compile
    cache goes to the emulator, and gcsfs gets what it needs there (unless the caller set those variables).
    """
    env = job_env(job, hlo_dump=str(hlo_dir) if hlo_dir is not None else None)
    env.pop(ids.MTC_DIR_ENV, None)  # the workers' ramdisk: `local run` gives a tmpfs of its own (mtc_stand_in)
    env.update({name: str(path) for name, path in (outputs or {}).items()})
    flags, _ = xla_flags(job, devices, hlo_dir)
    env.update(
        {
            "JAX_PLATFORMS": "cpu",
            "XLA_FLAGS": flags,
            "PJRT_NPROC": str(THREADS_PER_DEVICE * devices),
            ids.LOCAL_DEVICES_ENV: str(devices),
            ids.RESTART_ATTEMPT_ENV: "0",  # each restart of `local run` sets its own attempt number
            ids.JOBSET_NAME_ENV: job.name,  # the JobSet's name on the cluster (its annotation)
        }
    )
    if devices % job.tpu.slices == 0:  # the slice each emulated device stands for: its slice_index in the job
        env[ids.LOCAL_SLICE_LAYOUT_ENV] = format_layout(job.tpu.slices, devices)
    if job.sidecar.source_dir is not None:  # the sidecar image has it at /app, on PYTHONPATH
        env["PYTHONPATH"] = _sidecar_path(job, environ or {})
    if compile_cache is not None:
        env.update(_compile_cache_env(compile_cache, environ or {}))
    return env


def _sidecar_path(job: JobConfig, environ: Mapping[str, str]) -> str:
    """PYTHONPATH with the sidecar's source folder first; main.env's (src for a src layout), else the caller's,
    after it."""
    assert job.sidecar.source_dir is not None
    own = dict(job.main.env).get("PYTHONPATH")
    inherited = own if own is not None else environ.get("PYTHONPATH")
    return os.pathsep.join([str(job.sidecar.source_dir.resolve()), *filter(None, [inherited])])


def _compile_cache_env(compile_cache: str, environ: Mapping[str, str]) -> dict[str, str]:
    """JAX's persistent cache at ``compile_cache``; a gs:// one goes to the GCS emulator when the caller uses one."""
    env = {
        "JAX_COMPILATION_CACHE_DIR": compile_cache,
        # Cache every compiled step, however small or fast to compile: local jobs are small.
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }
    if compile_cache.startswith("gs://") and environ.get(EMULATOR_ENV):
        env.update({name: value for name, value in GCSFS_EMULATOR_ENV.items() if name not in environ})
    return env


def without_compile_cache(local_plan: LocalPlan) -> LocalPlan:
    """The same run with JAX's persistent compilation cache off (also one the caller's environment names)."""
    dropped = set(CACHE_VARS) | set(GCSFS_EMULATOR_ENV)
    env = {name: value for name, value in local_plan.env.items() if name not in dropped}
    env["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    return replace(local_plan, env=env, compile_cache=None)


def local_hlo_dir(job: JobConfig) -> Path | None:
    """The local stand-in for ``storage.hlo_dump`` (or a gs:// ``--xla_dump_to`` flag); None when neither is set."""
    wants_dump = job.storage.hlo_dump is not None or any(
        flag_name(f) == "xla_dump_to" and f.split("=", 1)[-1].startswith("gs://") for f in job.xla_flags
    )
    if not wants_dump:
        return None
    hlo_dir = job.local.hlo_dir
    if hlo_dir == LOCAL_STATE / "hlo":  # the default, which the config leaves relative: the config's folder
        hlo_dir = job.base_dir / hlo_dir
    return hlo_dir.resolve()


def job_command(job: JobConfig, override: tuple[str, ...], cwd: Path) -> tuple[tuple[str, ...], Path]:
    """(command, working directory): an override runs in ``cwd``, the config's command beside the config file.

    A leading ``python``/``python3`` becomes the interpreter pwdeploy runs under, where jax is installed.
    """
    if override:
        command, where = override, cwd
    elif job.main.command:
        command, where = job.main.command, job.base_dir
    else:
        raise ConfigError("main.command", "is not set; set it in the config or pass a command after --")
    if command[0] in PYTHON_NAMES:
        command = (sys.executable, *command[1:])
    return command, where.resolve()


def gcs_cache_supported() -> bool:
    """Whether JAX can reach a gs:// compile cache (through etils.epath and gcsfs); looked up, not imported."""
    return find_spec("gcsfs") is not None and find_spec("etils") is not None


def _plan_notes(job: JobConfig, dropped: list[str]) -> list[str]:
    """What a local run leaves out or plays otherwise than the cluster: TPU-only XLA flags, the MTC driver, the
    volumes of main."""
    notes = []
    if dropped:
        notes.append(
            "TPU-only XLA flags are left out of local runs (the CPU backend does not know them): " + " ".join(dropped)
        )
    if job.mtc.enabled:
        notes.append(
            "mtc.enabled: `local run` gives the job a tmpfs folder as its MTC ramdisk (PWDEPLOY_MTC_DIR) and runs a "
            "stand-in of the MTC driver beside it; `local env` sets neither (docs/local.md)"
        )
    return notes + [
        f"volume {v.text} is not mounted in a local run: the program finds {v.path} only if this machine has it"
        for v in job.volumes
        if "main" in v.where
    ]


def plan(
    job: JobConfig,
    override: tuple[str, ...] = (),
    *,
    cwd: Path,
    cores: int,
    environ: Mapping[str, str] | None = None,
    gcs_supported: Callable[[], bool] = gcs_cache_supported,
) -> LocalPlan:
    devices, warnings = device_count(job, cores)
    hlo_dir = local_hlo_dir(job)
    cache = compile_cache_location(job)
    _, dropped = xla_flags(job, devices, hlo_dir)
    if cache is not None and cache.startswith("gs://") and not gcs_supported():
        warnings.append(
            f"local.compile_cache {cache} needs gcsfs (pip install gcsfs); without it JAX runs with no persistent cache"
        )
    command, where = job_command(job, override, cwd)
    notes = _plan_notes(job, dropped)
    outputs = local_outputs(job)
    named = tuple(named_locations(job, command, where))
    return LocalPlan(
        command=command,
        cwd=where,
        devices=devices,
        env=local_env(job, devices, hlo_dir=hlo_dir, compile_cache=cache, outputs=outputs, environ=environ),
        hlo_dir=hlo_dir,
        outputs=outputs,
        compile_cache=cache,
        dropped_flags=tuple(dropped),
        warnings=tuple(warnings),
        notes=tuple(notes),
        gcs=named,
    )
