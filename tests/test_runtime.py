"""pwdeploy.runtime: the helpers job code imports, against fake cgroup files and real JAX devices."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pwdeploy import envcontract, runtime


def cgroup(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "sys/fs/cgroup" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n", encoding="ascii")
    return root


def never(*_: object) -> int:
    raise AssertionError("the affinity mask must not be consulted when a quota is set")


def test_the_env_var_wins(tmp_path: Path) -> None:
    root = cgroup(tmp_path, {"cpu.max": "400000 100000"})
    assert runtime.data_workers({"PWDEPLOY_DATA_WORKERS": "3"}, root=root, affinity=never) == 3
    assert runtime.data_workers({"PWDEPLOY_DATA_WORKERS": "0"}, root=root, affinity=never) == 0
    assert runtime.DATA_WORKERS == envcontract.DATA_WORKERS


@pytest.mark.parametrize(
    ("files", "workers"),
    [
        ({"cpu.max": "400000 100000"}, 3),  # 4 CPUs, one left for the training loop
        ({"cpu.max": "250000 100000"}, 2),  # 2.5 CPUs round up to 3
        ({"cpu.max": "50000 100000"}, 1),  # half a CPU still gets one worker
        ({"cpu/cpu.cfs_quota_us": "800000", "cpu/cpu.cfs_period_us": "100000"}, 7),  # cgroup v1
        ({"cpu,cpuacct/cpu.cfs_quota_us": "200000", "cpu,cpuacct/cpu.cfs_period_us": "50000"}, 3),
    ],
)
def test_cgroup_quota(tmp_path: Path, files: dict[str, str], workers: int) -> None:
    assert runtime.data_workers({}, root=cgroup(tmp_path, files), affinity=never) == workers


@pytest.mark.parametrize(
    "files",
    [
        {"cpu.max": "max 100000"},  # v2, no quota
        {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"},  # v1, no quota
        {"cpu.max": "garbage"},
        {},  # no cgroup files at all
    ],
)
def test_without_a_quota_the_affinity_mask_counts(tmp_path: Path, files: dict[str, str]) -> None:
    assert runtime.data_workers({}, root=cgroup(tmp_path, files), affinity=lambda: 6) == 5


def test_bad_env_value_names_the_variable() -> None:
    with pytest.raises(ValueError, match="PWDEPLOY_DATA_WORKERS='many' is not a whole number"):
        runtime.data_workers({"PWDEPLOY_DATA_WORKERS": "many"})


def test_on_pathways() -> None:
    assert runtime.on_pathways({"JAX_PLATFORMS": "proxy"})
    assert runtime.on_pathways({"JAX_PLATFORMS": "cpu,proxy"})
    assert not runtime.on_pathways({"JAX_PLATFORMS": "cpu"})
    assert not runtime.on_pathways({})


def python(code: str, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()[-1]


def test_initialize_locally_neither_imports_pathwaysutils_nor_jax() -> None:
    code = "import sys; from pwdeploy import runtime; print(runtime.initialize(), sorted(m for m in sys.modules if m.split('.')[0] in ('pathwaysutils', 'jax', 'click', 'yaml')))"  # noqa: E501
    assert python(code, JAX_PLATFORMS="cpu") == "False []"


def test_data_mesh_over_all_devices_and_slices() -> None:
    code = (
        "import json; from pwdeploy import runtime; a = runtime.data_mesh(); b = runtime.data_mesh(slices=True); "
        "print(json.dumps([dict(a.shape), dict(b.shape), [d.id for d in b.devices.flat]]))"
    )
    out = python(
        code, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4", PWDEPLOY_NUM_SLICES="2"
    )
    assert json.loads(out) == [{"data": 4}, {"slice": 2, "data": 2}, [0, 1, 2, 3]]


def test_slice_count_from_devices_or_env() -> None:
    class Dev:
        def __init__(self, slice_index: int | None) -> None:
            if slice_index is not None:
                self.slice_index = slice_index

    assert runtime.slice_count([Dev(0), Dev(0), Dev(1), Dev(1)], {}) == 2
    assert runtime.slice_count([Dev(None)], {"PWDEPLOY_NUM_SLICES": "4"}) == 4
    assert runtime.slice_count([Dev(None)], {}) == 1


def test_initialize_on_pathways_calls_pathwaysutils_stub(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stub pathwaysutils: the real one would connect to a proxy that does not exist here."""
    calls: list[str] = []
    stub = type(sys)("pathwaysutils")
    stub.initialize = lambda: calls.append("initialize")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pathwaysutils", stub)
    monkeypatch.setenv("JAX_PLATFORMS", "proxy")
    assert runtime.initialize() is True
    assert calls == ["initialize"]
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    assert runtime.initialize() is False
    assert calls == ["initialize"]
