"""`local run --lose-slice/--restore-slice`: the checks made before anything starts, the variables that carry the
events to the job, the slice layout of emulated devices, and the events file read back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pwdeploy import identifiers as ids
from pwdeploy import runtime
from pwdeploy.cli import cli
from pwdeploy.config import JobConfig, load_job
from pwdeploy.envcontract import job_env
from pwdeploy.errors import ConfigError, LocalRunError
from pwdeploy.local.elastic import SliceEvents, read_events, run_summary, slice_events
from pwdeploy.local.env import local_env
from pwdeploy.slices import ScheduleError, format_layout, parse_layout, parse_schedule, slice_to_devices
from tests.conftest import JAX_VERSION, REPO

EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"


def job(slices: int = 2, elastic: int = 1) -> JobConfig:
    values = {"tpu.slices": slices, "tpu.elastic_slices": elastic}
    return load_job(EXAMPLE, values, installed_jax=lambda: JAX_VERSION)


def refusal(config: JobConfig, lose: list[str], restore: tuple[str, ...] = (), devices: int = 8) -> str:
    with pytest.raises(ConfigError) as raised:
        slice_events(config, devices, lose, restore)
    return str(raised.value)


def test_a_loss_and_a_return_become_the_jobs_variables(tmp_path: Path) -> None:
    events = slice_events(job(), 8, ["1@40"], ["1@80"])
    assert events == SliceEvents(losses=((1, 40),), returns=((1, 80),))
    assert events.env(tmp_path / "e") == {
        ids.LOSE_SLICE_ENV: "1@40",
        ids.RESTORE_SLICE_ENV: "1@80",
        ids.ELASTIC_EVENTS_ENV: str(tmp_path / "e"),
    }
    assert not slice_events(job(elastic=0), 8, [], [])  # no flags: nothing to check, nothing to pass


def test_refused_without_elastic_slices() -> None:
    message = refusal(job(elastic=0), ["1@40"])
    assert "--lose-slice needs a job with elastic slices: tpu.elastic_slices is 0" in message
    assert "--fail-at-step" in message


def test_refused_for_a_slice_the_target_lacks_and_for_a_bad_value() -> None:
    assert "--lose-slice 2@5: the job has slices 0 to 1 (tpu.slices 2)" in refusal(job(), ["2@5"])
    assert "--restore-slice 3@9: the job has slices 0 to 1" in refusal(job(), ["1@5"], ("3@9",))
    for bad in ("1", "x@4", "1@0", "-1@3", "1@"):
        assert f"--lose-slice: {bad!r} is not SLICE@STEP" in refusal(job(), [bad])


def test_refused_when_a_loss_would_leave_too_few_slices() -> None:
    message = refusal(job(slices=3, elastic=1), ["1@5", "2@7"], devices=12)
    assert "--lose-slice 2@7 would leave 1 of 3 slices, fewer than tpu.slices - tpu.elastic_slices = 2" in message
    # Back before the next loss: never more than one lost at a time.
    assert slice_events(job(slices=3, elastic=1), 12, ["1@5", "2@7"], ["1@6"]).losses == ((1, 5), (2, 7))
    # Every slice lost would make the manager wait for ever: refused even with as many elastic slices as allowed.
    assert "would leave 0 of 2 slices" in refusal(job(), ["0@5", "1@5"])


def test_refused_for_returns_that_do_not_follow_a_loss_and_uneven_devices() -> None:
    assert "--restore-slice 1@3: slice 1 is not lost by then" in refusal(job(), ["1@5"], ("1@3",))
    assert "--lose-slice 1@9: slice 1 is already lost by then" in refusal(job(slices=3), ["1@5", "1@9"], devices=12)
    assert "pass --lose-slice SLICE@STEP too" in refusal(job(), [], ("1@3",))
    assert "7 emulated devices do not split into the 2 slices" in refusal(job(), ["1@5"], devices=7)


def test_cli_refuses_before_starting_anything_with_exit_2(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["local", "run", "-f", str(EXAMPLE), "--lose-slice", "1@4", "--", "true"])
    assert result.exit_code == 2  # a flag error (docs/errors.md)
    assert "--lose-slice needs a job with elastic slices" in result.output
    assert "Traceback" not in result.output and "CPU devices, in" not in result.output  # never started


def test_elastic_jobs_get_their_elastic_slices_and_every_local_run_its_layout() -> None:
    assert job_env(job())[ids.ELASTIC_SLICES_ENV] == "1"
    assert ids.ELASTIC_SLICES_ENV not in job_env(job(elastic=0))
    env = local_env(job(), 8, hlo_dir=None, compile_cache=None)
    assert env[ids.LOCAL_SLICE_LAYOUT_ENV] == "0-3 4-7"
    assert local_env(job(elastic=0), 8, hlo_dir=None, compile_cache=None)[ids.LOCAL_SLICE_LAYOUT_ENV] == "0-3 4-7"
    assert ids.LOCAL_SLICE_LAYOUT_ENV not in local_env(job(elastic=0), 1, hlo_dir=None, compile_cache=None)
    assert runtime.elastic_slices(env) == 1 and runtime.elastic_slices({}) == 0


class Device:
    """A stand-in device with what grouping reads: an id, and a slice_index on Pathways."""

    def __init__(self, id: int, slice_index: int | None = None) -> None:
        self.id = id
        if slice_index is not None:
            self.slice_index = slice_index


def test_devices_group_by_slice_index_else_by_the_supplied_layout() -> None:
    on_pathways = [Device(i, slice_index=i % 2) for i in range(4)]
    assert {k: [d.id for d in v] for k, v in slice_to_devices(on_pathways, {}).items()} == {0: [0, 2], 1: [1, 3]}
    emulated = [Device(i) for i in range(8)]
    layout = {ids.LOCAL_SLICE_LAYOUT_ENV: format_layout(2, 8)}
    grouped = slice_to_devices(emulated, layout)
    assert {k: [d.id for d in v] for k, v in grouped.items()} == {0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}
    assert list(slice_to_devices(emulated, {})) == [0]  # nothing says more: one slice
    with pytest.raises(ScheduleError, match=r"names devices \[8, 9\]"):
        slice_to_devices(emulated[:8], {ids.LOCAL_SLICE_LAYOUT_ENV: "0-4 5-9"})


def test_layout_and_schedule_round_trip() -> None:
    assert parse_layout(format_layout(4, 8)) == {0: [0, 1], 1: [2, 3], 2: [4, 5], 3: [6, 7]}
    assert parse_schedule("1@40, 0@90,") == [(1, 40), (0, 90)]


def test_events_are_read_as_untrusted_lines(tmp_path: Path) -> None:
    event: dict[str, Any] = {"event": "lost", "slice": 1, "step": 4, "active_slices": [0]}
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join([json.dumps(event), "not json", "[1, 2]", json.dumps({"step": "4"}), ""]))
    assert read_events(path) == [event]
    assert read_events(tmp_path / "missing") == []
    assert run_summary(1, 0, [event]) == {"attempts": 1, "restarts": 0, "exit_status": 0, "elastic_events": [event]}


STEPS = "from pwdeploy import runtime\nfor step in range(1, 6):\n    runtime.step_done(step)\n"


@pytest.mark.parametrize(
    ("program", "why"),
    [
        (STEPS, "or the program never built runtime.elastic_manager() (a program that is not elastic"),
        ("pass", "the program never called pwdeploy.runtime.step_done(step) after a step"),
    ],
    ids=["not-elastic", "no-steps"],
)
def test_a_slice_loss_that_never_happens_is_an_error_naming_why(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, program: str, why: str
) -> None:
    """The run asked to prove an elastic recovery; a job that ends 0 without it proved nothing: exit 7."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    (tmp_path / "job.py").write_text(program, encoding="utf-8")
    result = runner.invoke(
        cli,
        ["local", "run", "-f", str(EXAMPLE), "--num-slices", "2", "--elastic-slices", "1", "--compile-cache", "",
         "--no-check", "--lose-slice", "1@2", "--", "python3", "job.py"],
    )  # fmt: skip
    assert result.exit_code == LocalRunError.exit_code, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    said = "error: 1 of the 1 slice losses and returns asked for (--lose-slice, --restore-slice) never happened: "
    assert len(errors) == 1 and errors[0].startswith(said) and why in errors[0], result.stderr
    assert "hint: pass a STEP the job reaches" in result.stderr and "Traceback" not in result.stderr
