"""The TPU catalog: named sizes, explicit topologies, and the invariants between them."""

from __future__ import annotations

import math

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
}


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
    ],
)
def test_unknown_types_list_the_valid_ones(name: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        catalog.from_type(name)
    assert err.value.field == "tpu.type"


def test_explicit_topology() -> None:
    tpu = catalog.from_topology("v5p", "4x4x12")
    assert (tpu.chips, tpu.vms, tpu.instance_type) == (192, 48, "tpuv5:4x4x12")
    assert catalog.from_topology("v5litepod", "2x4").accelerator == "tpu-v5-lite-podslice"


@pytest.mark.parametrize(
    ("family", "topology", "message"),
    [("v6e", "4x5", "is not a v6e topology; valid: 1x1, 2x2"), ("v6e", "2x2x2", "AxB"), ("v5p", "4x4", "AxBxC"),
     ("v5p", "12x4x4", "A<=B<=C"), ("v7", "2x2", "unknown TPU family")],
)  # fmt: skip
def test_bad_topologies(family: str, topology: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        catalog.from_topology(family, topology)


@given(
    st.sampled_from(list(catalog.FAMILIES.values())).flatmap(
        lambda f: st.tuples(st.just(f), st.sampled_from(f.topologies))
    )
)
def test_every_named_size_round_trips(pair: tuple[catalog.TpuFamily, str]) -> None:
    family, topology = pair
    by_topology = catalog.from_topology(family.name, topology)
    by_name = catalog.from_type(by_topology.type_name)
    assert by_name == by_topology
    assert by_name.vms * by_name.chips_per_vm == by_name.chips == math.prod(map(int, topology.split("x")))
    assert by_name.chips_per_vm in (1, 4)


@given(st.lists(st.integers(1, 6), min_size=3, max_size=3))
def test_large_cubes_need_multiples_of_four(dims: list[int]) -> None:
    topology = "x".join(str(4 * d) for d in sorted(dims))
    tpu = catalog.from_topology("v5p", topology)
    assert tpu.vms == tpu.chips // 4
