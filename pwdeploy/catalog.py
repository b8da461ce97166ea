"""The TPU catalog: from ``v6e-16`` (or a family and a topology) to what the manifests need.

v4, v5p and tpu7x names count TensorCores (two per chip); v5e (``v5litepod``) and v6e names count chips.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from pwdeploy.errors import ConfigError

_CUBE_SEQUENCE = (
    "2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x16", "8x16x16",
    "16x16x16", "16x16x24",
)  # fmt: skip
_PLANE_SEQUENCE = ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")


class TpuFamily(NamedTuple):
    name: str
    prefix: str  # the name prefix users type: ``v5litepod`` in ``v5litepod-32``
    accelerator: str  # node label cloud.google.com/gke-tpu-accelerator
    pathways_version: str  # first half of the resource manager's --instance_type
    cores_per_chip_in_name: int  # 2 where names count TensorCores, 1 where they count chips
    topologies: tuple[str, ...]  # the named sizes, smallest first

    @property
    def three_d(self) -> bool:
        return self.topologies[0].count("x") == 2


FAMILIES: dict[str, TpuFamily] = {
    f.name: f
    for f in (
        TpuFamily("v4", "v4", "tpu-v4-podslice", "tpuv4", 2, _CUBE_SEQUENCE[:10]),
        TpuFamily("v5e", "v5litepod", "tpu-v5-lite-podslice", "tpuv5e", 1, _PLANE_SEQUENCE),
        TpuFamily("v5p", "v5p", "tpu-v5p-slice", "tpuv5", 2, _CUBE_SEQUENCE),
        TpuFamily("v6e", "v6e", "tpu-v6e-slice", "tpuv6e", 1, _PLANE_SEQUENCE),
        TpuFamily("tpu7x", "tpu7x", "tpu7x", "tpu7x", 2, _CUBE_SEQUENCE[:11]),
    )
}
_BY_PREFIX = {f.prefix: f for f in FAMILIES.values()}
_MAX_CUBE_DIM = 24
_SINGLE_HOST_PLANES = {"1x1": 1, "2x2": 4}  # topology -> chips on its one VM


class TpuSlice(NamedTuple):
    """One TPU slice of the job: its family, topology and how it splits into VMs."""

    family: TpuFamily
    topology: str
    chips: int
    chips_per_vm: int

    @property
    def vms(self) -> int:
        return self.chips // self.chips_per_vm

    @property
    def accelerator(self) -> str:
        return self.family.accelerator

    @property
    def instance_type(self) -> str:
        return f"{self.family.pathways_version}:{self.topology}"

    @property
    def type_name(self) -> str:
        return f"{self.family.prefix}-{self.chips * self.family.cores_per_chip_in_name}"


def _chips(topology: str) -> int:
    return math.prod(int(d) for d in topology.split("x"))


def _valid_names(family: TpuFamily) -> str:
    return ", ".join(f"{family.prefix}-{_chips(t) * family.cores_per_chip_in_name}" for t in family.topologies)


def _check_topology(family: TpuFamily, topology: str, field: str) -> str:
    dims = 3 if family.three_d else 2
    if not re.fullmatch(r"[1-9][0-9]*" + r"x[1-9][0-9]*" * (dims - 1), topology):
        raise ConfigError(
            field,
            f"{topology!r} is not a {family.name} topology; "
            f"{family.name} topologies are {'AxBxC' if dims == 3 else 'AxB'}, "
            f"valid: {', '.join(family.topologies)}",
        )
    if topology in family.topologies:
        return topology
    sizes = [int(d) for d in topology.split("x")]
    # Larger 3-D slices come in any AxBxC of multiples of 4, dimensions ascending.
    if family.three_d and all(d % 4 == 0 and d <= _MAX_CUBE_DIM for d in sizes) and sizes == sorted(sizes):
        return topology
    rule = " or AxBxC with A<=B<=C, each a multiple of 4 up to 24" if family.three_d else ""
    raise ConfigError(
        field,
        f"{topology} is not a {family.name} topology; valid: {', '.join(family.topologies)}{rule}",
    )


def _chips_per_vm(family: TpuFamily, topology: str) -> int:
    if not family.three_d and topology in _SINGLE_HOST_PLANES:
        return _SINGLE_HOST_PLANES[topology]
    return 4


def family_of(name: str, field: str = "tpu.family") -> TpuFamily:
    family = FAMILIES.get(name) or _BY_PREFIX.get(name)
    if family is None:
        raise ConfigError(field, f"unknown TPU family {name!r}; valid: {', '.join(FAMILIES)}")
    return family


def from_topology(family_name: str, topology: str) -> TpuSlice:
    family = family_of(family_name)
    topology = _check_topology(family, topology, "tpu.topology")
    return TpuSlice(family, topology, _chips(topology), _chips_per_vm(family, topology))


def from_type(tpu_type: str, field: str = "tpu.type") -> TpuSlice:
    """Resolve a ``<prefix>-<N>`` name such as ``v5p-8`` or ``v6e-16``."""
    match = re.fullmatch(r"([a-z0-9]+)-([0-9]+)", tpu_type)
    if not match:
        raise ConfigError(
            field,
            f"{tpu_type!r} is not a TPU type; expected <family>-<size> such as v5p-8, v6e-16, "
            f"v5litepod-32, v4-16, tpu7x-8",
        )
    prefix, size = match.group(1), int(match.group(2))
    family = _BY_PREFIX.get(prefix) or FAMILIES.get(prefix)
    if family is None:
        prefixes = ", ".join(f.prefix for f in FAMILIES.values())
        raise ConfigError(field, f"unknown TPU family {prefix!r} in {tpu_type!r}; valid prefixes: {prefixes}")
    for topology in family.topologies:
        if _chips(topology) * family.cores_per_chip_in_name == size:
            return TpuSlice(family, topology, _chips(topology), _chips_per_vm(family, topology))
    raise ConfigError(
        field,
        f"{tpu_type} is not a {family.name} size; valid: {_valid_names(family)} "
        f"(or set tpu.family and tpu.topology for other shapes)",
    )
