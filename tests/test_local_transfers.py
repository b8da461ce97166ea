"""Transfers per training step, measured in the job's process by the probe `local run` puts on its PYTHONPATH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pwdeploy.local.transfers import PROBE_DIR, REPORT_ENV, WARN_BYTES_PER_STEP, measured, probed, warning
from tests.jobfiles import write_job


def report(folder: Path, pid: int, steps: list[tuple[int, int, int, int]]) -> None:
    (folder / f"{pid}.json").write_text(json.dumps({"steps": steps}), encoding="utf-8")


def test_the_first_step_holds_the_set_up_and_is_left_out(tmp_path: Path) -> None:
    report(tmp_path, 1, [(1, 5000, 0, 1), (2, 5100, 4, 2), (3, 5200, 8, 3)])
    found = measured(tmp_path)
    assert found is not None
    assert (found.steps, found.host_to_device_bytes_per_step, found.device_to_host_bytes_per_step) == (2, 100, 4)
    assert (found.host_syncs_per_step, found.max_bytes_per_step) == (1, 104)


def test_attempts_are_merged_and_a_torn_report_is_skipped(tmp_path: Path) -> None:
    report(tmp_path, 1, [(1, 10, 0, 0), (2, 20, 0, 0)])
    report(tmp_path, 2, [(3, 0, 0, 0), (4, 30, 0, 0)])
    (tmp_path / "3.json").write_text('{"steps": [[1, 2', encoding="utf-8")
    found = measured(tmp_path)
    assert found is not None and (found.steps, found.host_to_device_bytes_per_step) == (2, 20)


def test_one_step_alone_is_reported_as_it_is(tmp_path: Path) -> None:
    report(tmp_path, 1, [(1, 64, 4, 1)])
    found = measured(tmp_path)
    assert found is not None and (found.steps, found.host_to_device_bytes_per_step) == (1, 64)
    assert measured(tmp_path / "none") is None


def test_a_step_over_the_limit_is_warned_about(tmp_path: Path) -> None:
    report(tmp_path, 1, [(1, 0, 0, 0), (2, WARN_BYTES_PER_STEP, 1, 0)])
    found = measured(tmp_path)
    assert found is not None
    text = warning(found)
    assert text is not None and "IFRT proxy" in text
    assert warning(found, limit=WARN_BYTES_PER_STEP + 1) is None


def run_probed(tmp_path: Path, program: str, extra_path: str = "") -> tuple[subprocess.CompletedProcess[str], Path]:
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(program), encoding="utf-8")
    base = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (extra_path, os.environ.get("PYTHONPATH")) if p)}
    with probed(base) as (env, folder):
        env |= {"JAX_PLATFORMS": "cpu"}
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
        kept = tmp_path / "reports"
        kept.mkdir()
        for path in folder.glob("*.json"):
            (kept / path.name).write_bytes(path.read_bytes())
    return done, kept


def test_the_probe_keeps_the_program_s_own_sitecustomize(tmp_path: Path) -> None:
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import builtins\nbuiltins.OWN_SITE = True\n", encoding="utf-8")
    program = """\
    import builtins, sys
    from pwdeploy import runtime
    for step in (1, 2, 3):
        runtime.step_done(step)
    print(getattr(builtins, "OWN_SITE", False), "jax" in sys.modules)
    """
    done, reports = run_probed(tmp_path, program, extra_path=str(own))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]  # its sitecustomize ran; the probe imported no jax
    found = measured(reports)
    assert found is not None and (found.steps, found.host_to_device_bytes_per_step) == (2, 0)
    assert str(PROBE_DIR).endswith("transfer_probe") and REPORT_ENV == "PWDEPLOY_TRANSFER_REPORT"


@pytest.mark.slow
def test_the_probe_counts_jax_transfers_and_syncs_per_step(tmp_path: Path) -> None:
    program = """\
    import jax, numpy as np
    from pwdeploy import runtime
    total = jax.jit(lambda a: (a * 2).sum())
    for step in range(1, 5):
        x = jax.device_put(np.ones((256,), np.float32))  # 1024 bytes in
        y = total(x)
        float(y)  # 4 bytes out, one sync
        jax.block_until_ready(x)  # one sync
        runtime.step_done(step)
    """
    done, reports = run_probed(tmp_path, program)
    assert done.returncode == 0, done.stderr
    found = measured(reports)
    assert found is not None
    assert (found.steps, found.host_to_device_bytes_per_step, found.device_to_host_bytes_per_step) == (3, 1024, 4)
    assert found.host_syncs_per_step == 2


def test_local_run_writes_the_json_summary(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        "from pwdeploy import runtime\nfor step in (1, 2, 3):\n    runtime.step_done(step)\n", encoding="utf-8"
    )
    job = write_job(tmp_path, "sum", main={"image": "r.example/m:1", "command": "python3 train.py"})
    argv = [sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(job), "--summary-json", "s.json"]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "s.json").read_text(encoding="utf-8"))
    assert summary["attempts"] == 1 and summary["exit_status"] == 0
    assert (summary["host_to_device_bytes_per_step"], summary["device_to_host_bytes_per_step"]) == (0, 0)
    assert (summary["host_syncs_per_step"], summary["transfer_steps_measured"]) == (0, 2)
    assert summary["transfer_warning"] is None and summary["peak_memory_bytes"] > 0
    assert "per training step (2 measured): 0 B host-to-device, 0 B device-to-host, 0.00 host syncs" in done.stderr
