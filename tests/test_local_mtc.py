"""`local run`'s stand-in of the MTC driver: what it answers to a replicator.yaml, proved against Orbax's own
multi-tier-checkpointing set-up (orbax-checkpoint's initialize_multi_tier_checkpointing, colocated Python on the
emulated CPU devices), and the example's --mtc run restarted from the step the stand-in handed back."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pwdeploy import identifiers as ids
from pwdeploy.local import mtc_stand_in as mtc
from tests.conftest import REPO

# Orbax's pattern for a restore marker (initialization.py _RESTORE_DIR_RE).
RESTORE_MARKER = re.compile(r"^.+-s(?P<step>\d+)-n\d+-w\d+\.restore$")
REQUEST = "job-name: demo\nframework: orbax\nassume-data-parallelism: 1\nnode-rank: 0\nnodes: 1\npeer-ranks: []\n"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (REQUEST, "exactly one of backup-interval-minutes, backup-interval-steps, not 0"),
        (REQUEST + "backup-interval-minutes: 5\nbackup-interval-steps: 9\n", "not 2"),
        (REQUEST.replace("job-name: demo", "job-name: ''") + "backup-interval-minutes: 5\n", "lacks job-name"),
        (REQUEST.replace("node-rank: 0", "node-rank: 1") + "backup-interval-minutes: 5\n", "node-rank 1 is not"),
        ("[1, 2]", "not a mapping"),
        ("job-name: [", "not YAML"),
    ],
)
def test_a_request_the_driver_would_refuse_is_refused(text: str, problem: str) -> None:
    found = mtc.read_request(text)
    assert isinstance(found, str) and problem in found


def test_with_no_step_the_no_checkpoint_marker_is_handed_back(tmp_path: Path) -> None:
    (tmp_path / mtc.REPLICATOR).write_text(REQUEST + "backup-interval-minutes: 5\n", encoding="utf-8")
    assert mtc.serve_once(tmp_path) == "found no checkpoint to hand back"
    (marker,) = tmp_path.iterdir()
    found = RESTORE_MARKER.fullmatch(marker.name)
    assert found and found["step"] == "0" and marker.is_file() and marker.stat().st_size == 0


def test_the_newest_step_is_handed_back_through_a_relative_link(tmp_path: Path) -> None:
    for step in (10, 20, 30):
        (tmp_path / str(step)).mkdir()
        (tmp_path / str(step) / "data").write_text(str(step), encoding="utf-8")
    (tmp_path / "30.orbax-checkpoint-tmp-1").mkdir()  # a save in progress: not a step
    (tmp_path / mtc.REPLICATOR).write_text(REQUEST + "backup-interval-steps: 100\n", encoding="utf-8")
    assert mtc.serve_once(tmp_path) == "handed back step 30"
    marker = next(p for p in tmp_path.iterdir() if p.name.endswith(".restore"))
    assert RESTORE_MARKER.fullmatch(marker.name)["step"] == "30"  # type: ignore[index]
    assert marker.is_symlink() and not os.readlink(marker).startswith("/")  # resolves in the job's namespace too
    assert (marker / "data").read_text(encoding="utf-8") == "30"
    assert mtc.steps(tmp_path) == [] and not (tmp_path / mtc.REPLICATOR).exists()


def test_the_stand_in_keeps_the_newest_steps(tmp_path: Path) -> None:
    for step in (1, 2, 3, 4):
        (tmp_path / str(step)).mkdir()
    mtc.serve_once(tmp_path)  # no request: it collects
    assert mtc.steps(tmp_path) == [3, 4]


ORBAX_AGAINST_STAND_IN = """
import os, pathlib, sys, threading
from pwdeploy import identifiers as ids
from pwdeploy.local import mtc_stand_in as mtc
from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import initialization

folder = pathlib.Path(sys.argv[1])
with mtc.serving(folder, print):
    initialization.initialize_multi_tier_checkpointing(
        folder, backup_interval_minutes=5, run_name="demo", use_colocated_python=True
    )
    (folder / "7").mkdir()
    (folder / "7" / "state").write_text("seven")
    initialization.initialize_multi_tier_checkpointing(
        folder, backup_interval_steps=50, run_name="demo", use_colocated_python=True
    )
print("RESULT", sorted(os.listdir(folder)), (folder / "7" / "state").read_text())
(folder / mtc.FAILED).write_text("no bucket\\n")
try:
    initialization._check_for_replicator_errors(folder)  # what Orbax reads once replicator.yaml is gone
except RuntimeError as error:
    print("FAILED", error)
"""


@pytest.mark.slow  # Orbax polls once a second, twice per set-up
def test_orbax_sets_up_multi_tier_checkpointing_against_the_stand_in(tmp_path: Path) -> None:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    done = subprocess.run(
        [sys.executable, "-c", ORBAX_AGAINST_STAND_IN, str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    said = "pwdeploy local: MTC stand-in: "
    assert f"{said}found no checkpoint to hand back" in lines and f"{said}handed back step 7" in lines
    result = next(line for line in lines if line.startswith("RESULT"))
    assert result == f"RESULT {sorted([mtc.RETAINED, '7'])!r} seven"  # Orbax renamed the marker to the step
    assert "FAILED Replicator fatal errors: no bucket" in lines


ORBAX_ON_EMULATED_SLICES = """
import pathlib, sys
import jax
from pwdeploy import runtime
from pwdeploy import identifiers as ids
from pwdeploy.local import mtc_stand_in as mtc
from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import initialization

print("SLICES", sorted({device.slice_index for device in jax.devices()}))
with mtc.serving(pathlib.Path(sys.argv[1]), print):
    initialization.initialize_multi_tier_checkpointing(**runtime.mtc_options())
print("SET UP")
"""


@pytest.mark.slow  # Orbax polls once a second
def test_orbax_sets_up_mtc_on_devices_that_report_two_slices(tmp_path: Path) -> None:
    """The emulated devices of 2 slices report their slice_index (local run's probe), so Orbax counts two workers,
    while JAX's CPU backend runs its colocated set-up once over both: runtime.mtc_options() makes it one node's."""
    probe = Path(mtc.__file__).parent / "transfer_probe"
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
        "PYTHONPATH": os.pathsep.join([str(probe), str(REPO)]),
        ids.LOCAL_SLICE_LAYOUT_ENV: "0-1 2-3",
        ids.LOCAL_DEVICES_ENV: "4",
        ids.MTC_DIR_ENV: str(tmp_path),
        ids.MTC_BACKUP_MINUTES_ENV: "5",
        "JOBSET_NAME": "demo",
        "PWDEPLOY_TRANSFER_REPORT": str(tmp_path / "transfers"),  # the probe's switch
    }
    done = subprocess.run(
        [sys.executable, "-c", ORBAX_ON_EMULATED_SLICES, str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "SLICES [0, 1]" and lines[-1] == "SET UP"
    assert "pwdeploy local: MTC stand-in: found no checkpoint to hand back" in lines


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_example_restarts_from_the_step_the_stand_in_hands_back(tmp_path: Path) -> None:
    """`local run` of examples/data_parallel/mtc with --fail-at-step: attempt 1 starts at the last complete step
    in the tmpfs and ends with the loss of a run never killed."""
    config = tmp_path / "job.yaml"
    text = (REPO / "examples" / "data_parallel" / "mtc" / "job.yaml").read_text(encoding="utf-8")
    train = REPO / "examples" / "data_parallel" / "train.py"
    config.write_text(text.replace("python3 ../train.py --mtc --steps 200", f"python3 {train} --mtc --steps 40"))
    base = [sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(config), "--no-check", "--devices", "4"]
    cache = ["--compile-cache", str(tmp_path / "cache")]
    killed = subprocess.run([*base, *cache, "--fail-at-step", "25"], capture_output=True, text=True, timeout=280)
    assert killed.returncode == 0, killed.stderr[-3000:]
    handed = re.search(r"MTC stand-in: handed back step (\d+)", killed.stderr)
    assert handed is not None, killed.stderr[-3000:]
    # Saves are asynchronous: step 20's may still be in its temporary folder when step 25 kills the job.
    assert int(handed[1]) in (10, 20)
    resumed = json.loads(killed.stdout.splitlines()[-1])
    assert (resumed["restarts"], resumed["start_step"]) == (1, int(handed[1]))
    whole = subprocess.run([*base, *cache], capture_output=True, text=True, timeout=280)
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert resumed["final_loss"] == json.loads(whole.stdout.splitlines()[-1])["final_loss"]
    assert not [p for p in Path("/dev/shm").iterdir() if p.name.startswith("pwdeploy-mtc-")]
    assert not list((tmp_path / ".pwdeploy").glob("mtc-ramdisk-*"))
