"""Multislice meshes locally: the emulated CPU devices report the slice they stand for (``slice_index``), so a
program that builds its DCN x ICI mesh with ``jax.experimental.mesh_utils.create_hybrid_device_mesh`` over it, as
MaxText does, runs under `local run` as on Pathways (``tests/programs/hybrid_mesh.py``, a real job process)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pwdeploy import identifiers as ids
from pwdeploy.local.transfer_probe import sitecustomize as probe
from tests.jobfiles import write_job

PROGRAM = Path(__file__).resolve().parent / "programs" / "hybrid_mesh.py"


def test_the_probe_reads_the_layout_local_run_sets() -> None:
    assert probe.LAYOUT_ENV == ids.LOCAL_SLICE_LAYOUT_ENV
    assert probe._slices_of("0-3 4-7") == {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1}
    assert probe._slices_of("0 1") == {0: 0, 1: 1}


@pytest.mark.slow
def test_a_hybrid_mesh_over_two_emulated_slices_runs_under_local_run(tmp_path: Path) -> None:
    main = {"image": "r.example/m:1", "command": f"python3 {PROGRAM}"}
    job = write_job(tmp_path, "hybrid", tpu={"type": "v5p-8", "slices": 2}, main=main)
    done = subprocess.run(
        [sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(job), "--no-limits-check"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["slices"] == 2 and found["mesh"] == {"data": 2, "fsdp": 2, "tensor": 2}
    assert found["rows"] == [[0], [1]] and found["finite"]  # each row of the DCN axis is one slice
    assert "error" not in done.stderr.lower()


@pytest.mark.slow
def test_a_device_the_layout_does_not_name_has_no_slice_index(tmp_path: Path) -> None:
    code = "import jax\nd = jax.devices()\nprint([getattr(x, 'slice_index', None) for x in d])\n"
    env = {"PYTHONPATH": str(Path(probe.__file__).parent), probe.REPORT_ENV: str(tmp_path), "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=3", ids.LOCAL_SLICE_LAYOUT_ENV: "0 1"}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[0, 1, None]"
