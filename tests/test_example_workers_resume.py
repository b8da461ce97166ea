"""The example resumes from checkpoints written with another `--data-workers`: a Grain iterator state records how
batches were spread over its workers (set on another count it is a KeyError, or the wrong batch), so the example
goes on at the checkpoint's batch by index, says so, and ends with the loss of a run never interrupted."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_example_resume import job_env, result, train


@pytest.mark.slow
@pytest.mark.parametrize(("before", "after"), [(2, 0), (0, 2)])
def test_checkpoints_of_another_worker_count_resume_by_index(tmp_path: Path, before: int, after: int) -> None:
    state = tmp_path / "state"
    common = ("--data-dir", str(state / "data"), "--checkpoint-every", "3")
    checkpoints = tmp_path / "ckpt"
    first = result(train(job_env(state, 2, before), checkpoints, "--steps", "6", *common))
    assert first["checkpoints_saved"] == [3, 6]
    extended = train(job_env(state, 2, after), checkpoints, "--steps", "9", *common)
    resumed = result(extended)
    assert resumed["start_step"] == 6 and resumed["data_workers"] == after
    assert f"written with {before} data workers and this run has {after}" in extended.stderr
    uninterrupted = result(train(job_env(state, 2, after), None, "--steps", "9", *common))
    assert abs(resumed["final_loss"] - uninterrupted["final_loss"]) <= 1e-5
