"""The TPU catalog: from ``v6e-16`` (or a family and a topology) to what the manifests need.

v4, v5p, tpu7 and tpu7x names count TensorCores (two per chip); v5e (``v5litepod``) and v6e names count chips.

Names resolve as xpk reads them (AI-Hypercomputer/xpk 367c838, one commit past v1.13.1, the newest stored here:
``src/xpk/core/system_characteristics.py``). 2-D families (v5e, v6e) have a fixed list of topologies. 3-D
families (v4, v5p, tpu7, tpu7x) take 2x2x1, 2x2x2, 2x2x4 and 2x4x4 (tpu7 and tpu7x also 1x1x1, a one-chip VM),
then any AxBxC of multiples of 4 (each at most 256) made of at most ``max_cubes`` 4x4x4 cubes, dimensions
ascending except on v4. A name ``v5p-N`` stands for the topology xpk's table gives it: of the topologies with
that chip count, the last of the family's default list (``named``) in xpk's order (A, then B, then C
ascending), else the first in that order. So v5p-384 is 4x4x12 and v4-768 is 4x4x24 (no default has its 384
chips). A name may also spell the topology itself, as xpk's do: ``v5p-4x4x28``.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from pwdeploy.errors import ConfigError

_SMALL_CUBOIDS = ("2x2x1", "2x2x2", "2x2x4", "2x4x4")  # below one 4x4x4 cube
_SINGLE_CHIP = "1x1x1"  # tpu7 and tpu7x: a one-chip VM (<family>-standard-1t)
_CUBE = 4  # chips along each side of a cube
_MAX_DIM = 256
_SIDE = _MAX_DIM // _CUBE  # cubes along one side, at most
_CHIPS_PER_VM = 4  # every multi-chip TPU VM here (xpk: compute_chips_per_vm)

# xpk's default_topologies: which topology a size name stands for where several have its chip count.
_V4_NAMED = ("4x4x4", "4x4x8", "4x8x8", "8x8x8", "8x8x12", "8x8x16", "8x16x16")
_V5P_NAMED = tuple(
    """4x4x4 4x4x8 4x4x12 4x4x20 4x4x28 4x4x44 4x4x52 4x4x68 4x4x76 4x4x92 4x4x116 4x4x124 4x4x148 4x4x164 4x4x172
    4x4x188 4x4x212 4x4x236 4x4x244 4x8x8 4x8x12 4x8x20 4x8x28 4x8x44 4x8x52 4x8x68 4x8x76 4x8x92 4x8x116 4x8x124
    4x8x148 4x8x164 4x8x172 4x8x188 4x12x12 4x12x20 4x12x28 4x12x44 4x12x52 4x12x68 4x12x76 4x12x92 4x12x116 4x12x124
    4x20x20 4x20x28 4x20x44 4x20x52 4x20x68 4x20x76 4x28x28 4x28x44 4x28x52 8x8x8 8x8x12 8x8x16 8x8x20 8x8x28 8x8x44
    8x8x52 8x8x68 8x8x76 8x8x92 8x12x12 8x12x16 8x12x20 8x12x28 8x12x44 8x12x52 8x16x16 8x16x20 8x16x28 8x16x44
    8x20x20 8x20x28 12x12x12 12x12x16 12x12x20 12x12x24 12x12x28 12x12x36 12x16x16 12x16x20 12x16x24 12x16x28
    12x20x20 12x20x24 12x24x24 16x16x16 16x16x20 16x16x24 16x20x28""".split()  # noqa: SIM905 (a table reads better)
)
_TPU7X_NAMED = (*_V5P_NAMED, "16x16x32", "16x24x24")
_TPU7_NAMED = ("4x4x4", "4x4x8", "4x4x12", "4x4x16", "4x8x8")


class TpuFamily(NamedTuple):
    name: str
    prefix: str  # the name prefix users type: ``v5litepod`` in ``v5litepod-32``
    accelerator: str  # node label cloud.google.com/gke-tpu-accelerator
    pathways_version: str  # first half of the resource manager's --instance_type
    cores_per_chip_in_name: int  # 2 where names count TensorCores, 1 where they count chips
    planes: tuple[str, ...] = ()  # 2-D families: every topology, smallest first
    max_cubes: int = 0  # 3-D families: the most 4x4x4 cubes in one slice
    any_order: bool = False  # 3-D: dimensions in any order (v4), else ascending
    named: tuple[str, ...] = ()  # 3-D: xpk's default topologies (see the module's docstring)
    single_chip: bool = False  # 3-D: 1x1x1 too
    # Multi-host slices select xpk's compact placement policy (requires_workload_policy in xpk's table).
    placement_policy: bool = False

    @property
    def three_d(self) -> bool:
        return not self.planes

    @property
    def small_topologies(self) -> tuple[str, ...]:
        """The named sizes below one cube (2-D: all of them), smallest first."""
        if not self.three_d:
            return self.planes
        return (_SINGLE_CHIP, *_SMALL_CUBOIDS) if self.single_chip else _SMALL_CUBOIDS

    def name_of(self, chips: int) -> str:
        return f"{self.prefix}-{chips * self.cores_per_chip_in_name}"


_PLANES = ("2x4", "4x4", "4x8", "8x8", "8x16", "16x16")
FAMILIES: dict[str, TpuFamily] = {
    f.name: f
    for f in (
        TpuFamily("v4", "v4", "tpu-v4-podslice", "tpuv4", 2, max_cubes=64, any_order=True, named=_V4_NAMED),
        # 2x2 is a single-host slice; no Pathways source runs a 1x1 v5e.
        TpuFamily("v5e", "v5litepod", "tpu-v5-lite-podslice", "tpuv5e", 1, planes=("2x2", *_PLANES)),
        TpuFamily("v5p", "v5p", "tpu-v5p-slice", "tpuv5", 2, max_cubes=140, named=_V5P_NAMED),
        TpuFamily("v6e", "v6e", "tpu-v6e-slice", "tpuv6e", 1, planes=("1x1", "2x2", *_PLANES)),
        TpuFamily(
            "tpu7", "tpu7", "tpu7", "tpu7", 2, max_cubes=4, named=_TPU7_NAMED, single_chip=True, placement_policy=True
        ),
        TpuFamily(
            "tpu7x",
            "tpu7x",
            "tpu7x",
            "tpu7x",
            2,
            max_cubes=144,
            named=_TPU7X_NAMED,
            single_chip=True,
            placement_policy=True,
        ),
    )
}
_BY_PREFIX = {f.prefix: f for f in FAMILIES.values()}


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
        return self.family.name_of(self.chips)

    @property
    def placement_policy(self) -> str | None:
        """The compact placement policy xpk gives a multi-host tpu7/tpu7x slice's node pool (and its workers
        select, label cloud.google.com/placement-policy-name): ``<type>-<topology>-placement-policy``
        (xpk ``core/scheduling.py``, ``get_placement_policy_name``); None where xpk selects none."""
        if not self.family.placement_policy or self.vms == 1:
            return None
        return f"{self.type_name}-{self.topology}-placement-policy"


def _dims(topology: str) -> list[int]:
    return [int(d) for d in topology.split("x")]


def _chips(topology: str) -> int:
    return math.prod(_dims(topology))


def _slice(family: TpuFamily, topology: str) -> TpuSlice:
    chips = _chips(topology)
    return TpuSlice(family, topology, chips, 1 if chips == 1 else _CHIPS_PER_VM)


def _rule(family: TpuFamily) -> str:
    if not family.three_d:
        return f"valid: {', '.join(family.planes)}"
    order = "in any order" if family.any_order else "with A<=B<=C"
    return (
        f"valid: {', '.join(family.small_topologies)}, or AxBxC {order}, each a multiple of 4 up to {_MAX_DIM}, "
        f"at most {family.max_cubes} cubes of 4x4x4 (e.g. 4x4x8, 8x8x12)"
    )


def _cuboid_problem(family: TpuFamily, dims: list[int]) -> str | None:
    """Why ``dims`` is not a large 3-D topology of ``family``; None when it is one."""
    if any(d % _CUBE or d > _MAX_DIM for d in dims):
        return "each dimension must be a multiple of 4 up to 256"
    if not family.any_order and dims != sorted(dims):
        return "dimensions must ascend (A<=B<=C)"
    cubes = math.prod(d // _CUBE for d in dims)
    if cubes > family.max_cubes:
        return f"it is {cubes} cubes of 4x4x4; {family.name} slices have at most {family.max_cubes}"
    return None


def check_topology(family: TpuFamily, topology: str, field: str = "tpu.topology") -> str:
    """``topology`` if ``family`` has it; else a ConfigError naming ``field`` and the rule."""
    dims = 3 if family.three_d else 2
    if not re.fullmatch(r"[1-9][0-9]*" + r"x[1-9][0-9]*" * (dims - 1), topology):
        shape = "AxBxC" if dims == 3 else "AxB"
        raise ConfigError(
            field,
            f"{topology!r} is not a {family.name} topology; {family.name} topologies are {shape}, {_rule(family)}",
        )
    if topology in family.small_topologies:
        return topology
    problem = _cuboid_problem(family, _dims(topology)) if family.three_d else None
    if family.three_d and problem is None:
        return topology
    why = f" ({problem})" if problem else ""
    raise ConfigError(field, f"{topology} is not a {family.name} topology{why}; {_rule(family)}")


def cuboids(family: TpuFamily, cubes: int) -> list[str]:
    """Every large topology of ``family`` made of ``cubes`` 4x4x4 cubes, in xpk's order: A, then B, then C
    ascending (dimensions ascending, except on v4)."""
    if not family.three_d or not 1 <= cubes <= family.max_cubes:
        return []
    found = []
    for a in range(1, _SIDE + 1):
        for b in range(1 if family.any_order else a, _SIDE + 1):
            c, rest = divmod(cubes, a * b)
            if rest == 0 and (family.any_order or b <= c) and 1 <= c <= _SIDE:
                found.append(f"{a * _CUBE}x{b * _CUBE}x{c * _CUBE}")
    return found


def topology_for_chips(family: TpuFamily, chips: int) -> str | None:
    """The topology a name with ``chips`` chips stands for, as xpk's table has it; None when there is none."""
    small = [t for t in family.small_topologies if _chips(t) == chips]
    if small:
        return small[0]
    cubes, rest = divmod(chips, _CUBE**3)
    shapes = cuboids(family, cubes) if rest == 0 else []
    named = [t for t in shapes if t in family.named]
    if named:
        return named[-1]  # xpk writes each default over the name's earlier entry
    return shapes[0] if shapes else None


def family_of(name: str, field: str = "tpu.family") -> TpuFamily:
    family = FAMILIES.get(name) or _BY_PREFIX.get(name)
    if family is None:
        raise ConfigError(field, f"unknown TPU family {name!r}; valid: {', '.join(FAMILIES)}")
    return family


def from_topology(family_name: str, topology: str) -> TpuSlice:
    family = family_of(family_name)
    return _slice(family, check_topology(family, topology))


def _valid_sizes(family: TpuFamily) -> str:
    named = ", ".join(family.name_of(_chips(t)) for t in family.small_topologies)
    if not family.three_d:
        return named
    per_cube = family.name_of(_CUBE**3).split("-")[1]
    return (
        f"{named}, or a multiple of {per_cube} up to {family.name_of(_CUBE**3 * family.max_cubes)} that forms an "
        "AxBxC of 4x4x4 cubes"
    )


def from_type(tpu_type: str, field: str = "tpu.type") -> TpuSlice:
    """Resolve ``<prefix>-<N>`` (``v5p-8``, ``v6e-16``) or ``<prefix>-<topology>`` (``v5p-4x4x28``)."""
    match = re.fullmatch(r"([a-z0-9]+)-([0-9][0-9x]*)", tpu_type)
    if not match:
        raise ConfigError(
            field,
            f"{tpu_type!r} is not a TPU type; expected <family>-<size> such as v5p-8, v6e-16, "
            f"v5litepod-32, v4-16, tpu7x-8",
        )
    prefix, size = match.groups()
    family = _BY_PREFIX.get(prefix) or FAMILIES.get(prefix)
    if family is None:
        prefixes = ", ".join(f.prefix for f in FAMILIES.values())
        raise ConfigError(field, f"unknown TPU family {prefix!r} in {tpu_type!r}; valid prefixes: {prefixes}")
    if "x" in size:
        return _slice(family, check_topology(family, size, field))
    chips, rest = divmod(int(size), family.cores_per_chip_in_name)
    topology = topology_for_chips(family, chips) if rest == 0 else None
    if topology is None:
        raise ConfigError(
            field,
            f"{tpu_type} is not a {family.name} size; valid: {_valid_sizes(family)} "
            f"(or set tpu.family and tpu.topology)",
        )
    return _slice(family, topology)
