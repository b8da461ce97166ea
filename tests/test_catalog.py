"""The TPU catalog: named sizes, explicit topologies, and the invariants between them."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pwdeploy import catalog
from pwdeploy.errors import ConfigError

# Examples as the reference renders them: type -> (instance_type, VMs per slice, chips per VM)
KNOWN = {
    "v5p-8": ("tpuv5:2x2x1", 1, 4),
    "v4-16": ("tpuv4:2x2x2", 2, 4),
    "v5litepod-32": ("tpuv5e:4x8", 8, 4),
    "v6e-16": ("tpuv6e:4x4", 4, 4),
    "v6e-256": ("tpuv6e:16x16", 64, 4),
    "v6e-8": ("tpuv6e:2x4", 2, 4),
    "v6e-4": ("tpuv6e:2x2", 1, 4),
    "v6e-1": ("tpuv6e:1x1", 1, 1),
    "tpu7x-8": ("tpu7x:2x2x1", 1, 4),
    "v5p-384": ("tpuv5:4x4x12", 48, 4),
    "v4-1536": ("tpuv4:8x8x12", 192, 4),
    "v5p-1536": ("tpuv5:8x8x12", 192, 4),
    "v5p-17920": ("tpuv5:16x20x28", 2240, 4),
}

XPK_NAMES = Path(__file__).parent / "fixtures" / "xpk_tpu_names.txt"


def _xpk_rows() -> list[list[str]]:
    lines = XPK_NAMES.read_text(encoding="utf-8").splitlines()
    return [line.split() for line in lines if line and not line.startswith("#")]


def test_every_xpk_name_resolves_as_xpk_resolves_it() -> None:
    """Every TPU name in xpk's table (the facts written down in fixtures/xpk_tpu_names.txt): the same topology,
    chips, VMs, node label, Pathways instance type and placement policy."""
    rows = _xpk_rows()
    assert len(rows) == 2020  # the whole table: a truncated file cannot pass
    wrong = []
    for name, topology, chips, per_vm, vms, accelerator, version, policy in rows:
        tpu = catalog.from_type(name)
        got = (tpu.topology, tpu.chips, tpu.chips_per_vm, tpu.vms, tpu.accelerator, tpu.instance_type)
        want = (topology, int(chips), int(per_vm), int(vms), accelerator, f"{version}:{topology}")
        if got != want or (tpu.placement_policy is not None) != (policy == "1"):
            wrong.append((name, got, want))
    assert wrong == []


def test_names_xpk_reads_otherwise_than_the_most_cube_like() -> None:
    # No default of xpk's has v4-768's 384 chips: the first shape its generator yields.
    assert catalog.from_type("v4-768").topology == "4x4x24"
    # tpu7 lists both 256-chip shapes as defaults: the later one wins.
    assert catalog.from_type("tpu7-512").topology == "4x8x8"
    assert catalog.from_type("v5p-384").topology == "4x4x12"


@pytest.mark.parametrize("name", ["tpu7-2", "tpu7x-2", "tpu7-8", "tpu7-4x4x8"])
def test_tpu7_and_single_chip_tpu7x(name: str) -> None:
    tpu = catalog.from_type(name)
    assert tpu.family.name == name.split("-")[0]
    assert tpu.chips_per_vm == (1 if tpu.chips == 1 else 4)


def test_placement_policy_on_multi_host_tpu7x_only() -> None:
    assert catalog.from_type("tpu7x-128").placement_policy == "tpu7x-128-4x4x4-placement-policy"
    assert catalog.from_type("tpu7-32").placement_policy == "tpu7-32-2x2x4-placement-policy"
    assert catalog.from_type("tpu7x-8").placement_policy is None  # one VM
    assert catalog.from_type("v5p-128").placement_policy is None


def test_tpu7_has_at_most_four_cubes() -> None:
    with pytest.raises(ConfigError, match="at most 4"):
        catalog.from_topology("tpu7", "4x8x12")


# What each family accepts, restated from xpk's rule: (max cubes, any order) for 3-D, the list for 2-D.
CUBE_RULES = {"v4": (64, True), "v5p": (140, False), "tpu7": (4, False), "tpu7x": (144, False)}
PLANES = {
    "v5e": ("2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"),
    "v6e": ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"),
}
SMALL = ("2x2x1", "2x2x2", "2x2x4", "2x4x4")


def _accepted(family: str, dims: list[int]) -> bool:
    if family in PLANES:
        return "x".join(map(str, dims)) in PLANES[family]
    if "x".join(map(str, dims)) in SMALL:
        return True
    if dims == [1, 1, 1]:
        return family.startswith("tpu7")  # a one-chip VM
    max_cubes, any_order = CUBE_RULES[family]
    return (
        all(d % 4 == 0 and 4 <= d <= 256 for d in dims)
        and (any_order or dims == sorted(dims))
        and math.prod(d // 4 for d in dims) <= max_cubes
    )


@pytest.mark.parametrize("name", KNOWN)
def test_known_types(name: str) -> None:
    tpu = catalog.from_type(name)
    assert (tpu.instance_type, tpu.vms, tpu.chips_per_vm) == KNOWN[name]
    assert tpu.type_name == name


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("v6e-12", "valid: v6e-1, v6e-4, v6e-8"),
        ("v9-8", "unknown TPU family 'v9'"),
        ("v5p", "expected <family>-<size>"),
        ("v5p-7", "is not a v5p size"),
        ("v5p-136", "is not a v5p size; valid: v5p-8, v5p-16, v5p-32, v5p-64, or a multiple of 128 up to v5p-17920"),
        ("v5p-8576", "is not a v5p size"),  # 67 cubes: only 4x4x268, longer than 256
        ("v4-8320", "is not a v4 size"),  # 65 cubes: more than 64
        ("v5litepod-1", "is not a v5e size; valid: v5litepod-4, v5litepod-8"),
    ],
)
def test_unknown_types_list_the_valid_ones(name: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        catalog.from_type(name)
    assert err.value.field == "tpu.type"


def test_names_may_spell_the_topology() -> None:
    tpu = catalog.from_type("v5p-4x4x28")
    assert (tpu.topology, tpu.vms, tpu.type_name) == ("4x4x28", 112, "v5p-896")
    with pytest.raises(ConfigError, match="at most 64") as err:
        catalog.from_type("v4-16x16x24")
    assert err.value.field == "tpu.type"


def test_explicit_topology() -> None:
    tpu = catalog.from_topology("v5p", "4x4x12")
    assert (tpu.chips, tpu.vms, tpu.instance_type) == (192, 48, "tpuv5:4x4x12")
    assert catalog.from_topology("v5litepod", "2x4").accelerator == "tpu-v5-lite-podslice"
    assert catalog.from_topology("v4", "8x4x4").instance_type == "tpuv4:8x4x4"  # v4 takes any order


@pytest.mark.parametrize(
    ("family", "topology", "message"),
    [
        ("v6e", "4x5", "is not a v6e topology; valid: 1x1, 2x2"),
        ("v6e", "2x2x2", "AxB"),
        ("v5p", "4x4", "AxBxC"),
        ("v5p", "12x4x4", "A<=B<=C"),
        ("v7", "2x2", "unknown TPU family"),
        ("v5e", "1x1", "valid: 2x2, 2x4"),
        ("v4", "16x16x24", "96 cubes of 4x4x4; v4 slices have at most 64"),
        ("v5p", "4x4x260", "up to 256"),
        ("tpu7x", "4x4x580", "up to 256"),
        ("tpu7x", "12x12x68", "153 cubes"),
    ],
)
def test_bad_topologies(family: str, topology: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        catalog.from_topology(family, topology)
    assert err.value.field == ("tpu.family" if family == "v7" else "tpu.topology")


@pytest.mark.parametrize(
    ("family", "topology"),
    [("v5p", "4x4x28"), ("v5p", "16x20x28"), ("tpu7x", "12x12x64"), ("v4", "16x16x16"), ("v6e", "1x1"), ("v5e", "2x2")],
)
def test_largest_and_smallest_accepted(family: str, topology: str) -> None:
    assert catalog.from_topology(family, topology).topology == topology


_DIM = st.integers(1, 300)


@given(st.sampled_from(list(CUBE_RULES)), st.lists(_DIM | st.sampled_from([1, 2, 4]), min_size=3, max_size=3))
def test_three_d_families_accept_exactly_the_rule(family: str, dims: list[int]) -> None:
    topology = "x".join(map(str, dims))
    if _accepted(family, dims):
        tpu = catalog.from_topology(family, topology)
        assert tpu.chips == math.prod(dims) == tpu.vms * tpu.chips_per_vm
        assert tpu.chips_per_vm == (1 if tpu.chips == 1 else 4)
    else:
        with pytest.raises(ConfigError):
            catalog.from_topology(family, topology)


@given(st.sampled_from(list(CUBE_RULES)), st.lists(st.integers(1, 64), min_size=3, max_size=3))
def test_multiples_of_four_near_the_cube_limit(family: str, sides: list[int]) -> None:
    dims = [4 * s for s in sides]
    accepted = _accepted(family, dims)
    try:
        catalog.from_topology(family, "x".join(map(str, dims)))
    except ConfigError:
        assert not accepted
    else:
        assert accepted


@given(st.sampled_from(list(PLANES)), st.lists(st.sampled_from([1, 2, 4, 8, 16, 32]), min_size=2, max_size=2))
def test_two_d_families_accept_exactly_their_list(family: str, dims: list[int]) -> None:
    topology = "x".join(map(str, dims))
    if topology in PLANES[family]:
        assert catalog.from_topology(family, topology).topology == topology
    else:
        with pytest.raises(ConfigError):
            catalog.from_topology(family, topology)


@given(st.sampled_from(list(CUBE_RULES)), st.integers(1, 150))
def test_every_cube_count_with_a_topology_has_a_name(family_name: str, cubes: int) -> None:
    """A name resolves whenever some accepted topology has its chip count: to the last of xpk's defaults among
    them, else to the first in xpk's order (the table test checks every name against xpk's own answer)."""
    family = catalog.FAMILIES[family_name]
    shapes = catalog.cuboids(family, cubes)
    name = family.name_of(cubes * 64)
    if not shapes:
        with pytest.raises(ConfigError, match="is not a"):
            catalog.from_type(name)
        return
    tpu = catalog.from_type(name)
    assert tpu.topology in shapes and tpu.type_name == name and tpu.chips == cubes * 64
    named = [s for s in shapes if s in family.named]
    assert tpu.topology == (named[-1] if named else shapes[0])
    assert shapes == sorted(shapes, key=lambda s: [int(d) for d in s.split("x")])  # xpk's order
    assert all(_accepted(family_name, list(map(int, s.split("x")))) for s in shapes)


@given(
    st.sampled_from(list(catalog.FAMILIES.values())).flatmap(
        lambda f: st.tuples(st.just(f), st.sampled_from(f.small_topologies))
    )
)
def test_every_small_size_round_trips(pair: tuple[catalog.TpuFamily, str]) -> None:
    family, topology = pair
    by_topology = catalog.from_topology(family.name, topology)
    by_name = catalog.from_type(by_topology.type_name)
    assert by_name == by_topology
    assert by_name.vms * by_name.chips_per_vm == by_name.chips == math.prod(map(int, topology.split("x")))
    assert by_name.chips_per_vm in (1, 4)
