"""XLA flag filtering for local runs, checked against the XLA inside the installed jaxlib."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from pwdeploy.local.flags import is_tpu_only, split_cpu_flags

TPU_ONLY = [
    "--xla_tpu_enable_async_collective_fusion=true",
    "--xla_jf_spmd_threshold_for_windowed_einsum_mib=0",
    "--xla_sc_disable_megacore_partitioning=true",
    "--xla_enable_async_all_gather=true",
    "--xla_enable_async_collective_permute=true",
    "--xla_latency_hiding_scheduler_rerun=2",
    "--xla_should_allow_loop_variant_parameter_in_chain=enabled",
    "--xla_should_add_loop_invariant_op_in_chain=enabled",
    "--megascale_grpc_premap_memory_bytes=17179869184",
]
CPU_OK = [
    "--xla_dump_hlo_as_text=true",
    "--xla_backend_optimization_level=1",
    "--xla_gpu_enable_latency_hiding_scheduler=true",  # a GPU flag, but XLA's shared flag table knows it
    "--xla_cpu_enable_fast_math=false",
]


def test_split_keeps_order_and_names_what_it_drops() -> None:
    kept, dropped = split_cpu_flags([CPU_OK[0], TPU_ONLY[0], CPU_OK[1], TPU_ONLY[5]])
    assert kept == [CPU_OK[0], CPU_OK[1]]
    assert dropped == [TPU_ONLY[0], TPU_ONLY[5]]


def test_device_count_flag_from_the_config_is_left_to_local_run() -> None:
    kept, dropped = split_cpu_flags(["--xla_force_host_platform_device_count=3", CPU_OK[0]])
    assert (kept, dropped) == ([CPU_OK[0]], [])


def test_classification() -> None:
    assert all(is_tpu_only(f) for f in TPU_ONLY)
    assert not any(is_tpu_only(f) for f in CPU_OK)


def test_installed_xla_rejects_exactly_the_dropped_flags() -> None:
    """One CPU backend start with every flag: XLA names the unknown ones, which must be the TPU-only list."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": " ".join(CPU_OK + TPU_ONLY)}
    probe = subprocess.run(
        [sys.executable, "-c", "import jax; jax.numpy.ones(2).block_until_ready()"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    match = re.search(r"Unknown flags in XLA_FLAGS: (.*)", probe.stderr)
    assert probe.returncode != 0 and match, probe.stderr[-2000:]
    assert sorted(match.group(1).split()) == sorted(TPU_ONLY)


@pytest.mark.slow
def test_installed_xla_accepts_the_kept_flags() -> None:
    kept, _ = split_cpu_flags(CPU_OK + TPU_ONLY)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": " ".join(kept)}
    probe = subprocess.run(
        [sys.executable, "-c", "import jax; print(float(jax.numpy.ones(2).sum()))"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert probe.stdout.splitlines()[-1] == "2.0"  # --xla_dump_hlo_as_text alone dumps to stdout first
