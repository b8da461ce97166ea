"""The example, elastic: 2 slices with `tpu.elastic_slices: 1`, slice 1 lost mid-run and back later, through
`pwdeploy local run --lose-slice/--restore-slice` as a user runs it. The job is never restarted.

The reference: the example keeps the global batch whatever the slices, so the schedule of active slices does not
change what a step computes; the reference is the same elastic job with every slice active throughout and no
failure. A step skipped or done twice would move the loss trajectory far more than the 1e-5 allowed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"
SIDECAR_EXAMPLE = REPO / "examples" / "data_parallel" / "sidecar" / "job.yaml"
TRAIN = EXAMPLE.parent / "train.py"
STEPS = "16"
LOST, BACK = "1@4", "1@9"
LINES = [
    "pwdeploy local: step 4: slice 1 lost (emulated); training goes on with slices [0]",
    "pwdeploy local: step 9: slice 1 is back; training goes on with slices [0, 1]",
]


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("elastic-state")


def local_run(
    state: Path, *flags: str, train: tuple[str, ...] = (), workers: int = 0, config: Path = EXAMPLE
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(config), "--elastic-slices", "1",
            "--compile-cache", str(state / "cache"), "--local-hlo-dir", str(state / "hlo"),
            "--data-workers", str(workers), "--summary-json", str(state / "summary.json"), *flags, "--",
            *train, sys.executable, str(TRAIN), "--data-dir", str(state / "data"), "--steps", STEPS,
        ],
        cwd=config.parent, capture_output=True, text=True, timeout=280,
    )  # fmt: skip


def result_of(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def assert_survived(state: Path, workers: int = 0, config: Path = EXAMPLE) -> None:
    reference = result_of(local_run(state, workers=workers, config=config))
    elastic_run = local_run(state, "--lose-slice", LOST, "--restore-slice", BACK, workers=workers, config=config)
    lost = result_of(elastic_run)
    assert [line for line in elastic_run.stderr.splitlines() if "step " in line and "slice 1" in line] == LINES
    assert reference["elastic_meshes"] == [{"slice": 2, "data": 4}]
    assert lost["elastic_meshes"] == [{"slice": 2, "data": 4}, {"slice": 1, "data": 4}, {"slice": 2, "data": 4}]
    assert len(lost["losses"]) == len(reference["losses"]) == int(STEPS)  # every step, each once
    assert max(abs(a - b) for a, b in zip(lost["losses"], reference["losses"], strict=True)) <= 1e-5
    assert lost["restarts"] == 0
    summary = json.loads((state / "summary.json").read_text())
    assert (summary["attempts"], summary["restarts"], summary["exit_status"]) == (1, 0, 0)
    events = [(e["event"], e["slice"], e["step"], e["active_slices"]) for e in summary["elastic_events"]]
    assert events == [("lost", 1, 4, [0]), ("returned", 1, 9, [0, 1])]
    assert all(e["seconds_to_next_step"] > 0 and e["steps_redone"] == 0 for e in summary["elastic_events"])


@pytest.mark.slow
def test_the_example_loses_slice_1_trains_on_slice_0_and_takes_it_back(state: Path) -> None:
    assert_survived(state)


@pytest.mark.slow
def test_the_example_survives_with_colocated_python(state: Path) -> None:
    assert_survived(state, config=SIDECAR_EXAMPLE)


@pytest.mark.slow
def test_the_example_survives_with_grain_workers(state: Path) -> None:
    assert_survived(state, workers=2)


@pytest.mark.slow
def test_losing_more_slices_than_allowed_ends_with_the_managers_error(state: Path) -> None:
    """pwdeploy refuses it up front; a program that loses them all the same (here: the variables set by hand) ends
    with the manager's timeout and the example's message, not a hang."""
    done = subprocess.run(
        [sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(EXAMPLE), "--elastic-slices", "1",
         "--data-workers", "0", "--max-restarts", "0", "--", "/usr/bin/env", "PWDEPLOY_LOSE_SLICE=0@3,1@3",
         sys.executable, str(TRAIN), "--data-dir", str(state / "data"), "--steps", "8", "--elastic-timeout", "1",
         "--elastic-poll", "0.2"],
        cwd=EXAMPLE.parent, capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    assert "train.py: error: fewer than tpu.slices - tpu.elastic_slices slices were healthy" in done.stderr
    assert "(pathwaysutils: Timed out waiting for 1 slices. Only 0 active" in done.stderr
