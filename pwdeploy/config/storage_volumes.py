"""The user's volumes (``volumes``, ``--volume``): GCS FUSE buckets and memory-backed ramdisks.

Each is mounted at a path in main, in the workers, or both, as xpk's ``--storage`` (a GCS FUSE bucket) and
``--ramdisk-directory`` give a recipe; a mapping in the file, or ``KIND:SOURCE:PATH[@WHERE][:ro]`` as a flag:

- ``gcsfuse:my-bucket:/gcs/data`` (``{gcsfuse: my-bucket, path: /gcs/data}``; ``mount_options`` in the file);
- ``ramdisk:16Gi:/ramdisk@workers`` (``{ramdisk: 16Gi, path: /ramdisk, where: workers}``);
- ``@main,workers`` (``where: [main, workers]``) mounts it in both; the default is main; ``:ro`` read-only.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from pwdeploy import identifiers as ids
from pwdeploy import quantity
from pwdeploy.config.model import Volume
from pwdeploy.config.mtc_constraints import RESERVED
from pwdeploy.config.values import kind_name, parse_gcs
from pwdeploy.errors import ConfigError

KINDS = ("gcsfuse", "ramdisk")
WHERE = ("main", "workers")
KEYS = frozenset({*KINDS, "path", "where", "read_only", "mount_options"})  # not "on": YAML 1.1 reads it as true
EXAMPLE = "e.g. gcsfuse:my-bucket:/gcs/data, ramdisk:16Gi:/ramdisk@workers"


def parse_volumes(value: Any, path: str) -> tuple[Volume, ...]:
    items = [value] if isinstance(value, (str, Mapping)) else value
    if not isinstance(items, (list, tuple)):
        raise ConfigError(path, f"must be a list of volumes, not a {kind_name(value)}; {EXAMPLE}")
    volumes = tuple(_volume(item, f"{path}[{i}]") for i, item in enumerate(items))
    paths = [v.path for v in volumes]
    if repeated := sorted({p for p in paths if paths.count(p) > 1}):
        raise ConfigError(path, f"two volumes are mounted at {repeated[0]}", hint="give each its own path")
    return volumes


def _volume(item: Any, where: str) -> Volume:
    if isinstance(item, str):
        return _from_text(item, where)
    if not isinstance(item, Mapping):
        raise ConfigError(where, f"must be a mapping or KIND:SOURCE:PATH, not a {kind_name(item)}; {EXAMPLE}")
    if True in item:  # YAML 1.1 reads an "on:" key as true
        raise ConfigError(where, "has a key that YAML reads as true (on:?)", hint="write where: [main, workers]")
    unknown = sorted(set(map(str, item)) - KEYS)
    kinds = [k for k in KINDS if k in item]
    if unknown or len(kinds) != 1:
        what = f"unknown key {unknown[0]!r}" if unknown else "needs exactly one of gcsfuse or ramdisk"
        raise ConfigError(where, f"{what}; keys: {', '.join(sorted(KEYS))}", hint=EXAMPLE)
    on = item.get("where", ["main"])
    return _checked(
        kinds[0],
        str(item[kinds[0]]),
        str(item.get("path", "")),
        tuple([on] if isinstance(on, str) else map(str, on)),
        bool(item.get("read_only", False)),
        None if item.get("mount_options") is None else str(item["mount_options"]),
        where,
    )


def _from_text(text: str, where: str) -> Volume:
    read_only = text.endswith(":ro")
    body = text.removesuffix(":ro")
    body, at, on = body.partition("@")
    kind, _, rest = body.partition(":")
    scheme = "gs://" if rest.startswith("gs://") else ""  # its own colon is not a separator
    source, _, mount = rest.removeprefix(scheme).partition(":")
    source = scheme + source
    return _checked(kind, source, mount, tuple(on.split(",")) if at else ("main",), read_only, None, where)


def _checked(
    kind: str, source: str, path: str, on: tuple[str, ...], read_only: bool, options: str | None, where: str
) -> Volume:
    if kind not in KINDS:
        raise ConfigError(where, f"{kind!r} is not a volume kind ({', '.join(KINDS)}); {EXAMPLE}")
    if not path.startswith("/") or posixpath.normpath(path) in ("/", "//"):
        raise ConfigError(where, f"the mount path {path!r} must be an absolute path below /", hint=EXAMPLE)
    if not on or any(w not in WHERE for w in on):
        raise ConfigError(where, f"mounted on {','.join(on) or 'nothing'}: say main, workers or both", hint=EXAMPLE)
    if kind == "gcsfuse":  # gs://bucket/prefix mounts the prefix alone (GCS FUSE's only-dir)
        bucket = parse_gcs(source if source.startswith("gs://") else f"gs://{source}", where)
        source = bucket.bucket
        if bucket.prefix:
            options = ",".join(filter(None, [options, f"only-dir={bucket.prefix}"]))
    else:
        source = str(quantity.canonical(source, where))
        if quantity.is_bare_number(source):
            raise ConfigError(where, f"a ramdisk of {source} has no unit (bytes to Kubernetes)", hint="e.g. 16Gi")
    return Volume(kind, source, posixpath.normpath(path), tuple(dict.fromkeys(on)), read_only, options)


CHECK_FIELDS = ("volumes", "headless", "mtc.enabled", "mtc.ramdisk_dir")
# What pwdeploy itself mounts in main or the workers, by where (pwdeploy.manifests.head, .worker and .variants).
OWN_MOUNTS = {
    ids.SHM_DIR: "/dev/shm (main.shm_size, tpu.shm_size)",
    ids.TRANSFER_DIR: "the client-proxy transfer directory",
    ids.SIDECAR_SHM_DIR: "the sidecar's shared memory",
    ids.HLO_DIR: "the HLO dump folder",
}


def check_volumes(parsed: Mapping[str, Any]) -> None:
    """Each volume's path is a folder of its own, not a system folder or another mount (as Cluster Toolkit checks
    its mount paths: ``pwdeploy.config.mtc_constraints``), and main has it only where there is a main."""
    taken = dict(OWN_MOUNTS)
    if parsed["mtc.enabled"] and parsed["mtc.ramdisk_dir"]:
        taken[posixpath.normpath(parsed["mtc.ramdisk_dir"])] = "mtc.ramdisk_dir"
    for index, volume in enumerate(parsed["volumes"]):
        where = f"volumes[{index}]"
        clash = taken.get(volume.path) or next(
            (f"the system folder {r}" for r in RESERVED if volume.path == r or volume.path.startswith(r + "/")), None
        )
        if clash is not None:
            raise ConfigError(where, f"is mounted at {volume.path}, which is {clash}", hint="mount it elsewhere")
        if parsed["headless"] and "main" in volume.where:
            raise ConfigError(where, "is mounted in main, but a headless job has no main", hint="mount it @workers")
