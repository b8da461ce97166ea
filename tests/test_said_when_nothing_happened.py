"""Say it when nothing happened: a fault that never fired, a --resume with nothing to resume, a duration that
reads like a unit slip, spot or flex-start capacity that cannot recover, a YAML boolean as a label value, the same
key twice with different values, -f twice, a device count the target's mesh cannot have, and checkpoints inside
the scratch location at render."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pwdeploy.advice import job_warnings
from pwdeploy.cli import cli
from pwdeploy.config import JobConfig, load_job
from pwdeploy.errors import ConfigError

BASE = {
    "name": "demo",
    "tpu.type": "v5p-16",
    "main.image": "r.example/p/img:1",
    "main.command": "python3 train.py",
    "storage.scratch": "gs://bucket/scratch",
}
JOB = (
    "name: quiet\npathways_version: 0.10.2\ntpu: {type: v5p-8}\n"
    'main: {image: "r.example/none:0", command: "true"}\nstorage: {scratch: gs://bkt/s}\n'
)


def _job(**overrides: Any) -> JobConfig:
    return load_job(None, {**BASE, **overrides}, installed_jax=lambda: "0.10.2")


@pytest.fixture
def job_file(tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(JOB)
    return path


# ---------------------------------------------------------------------------------------------- local run


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--fail-at-step", "5"], "--fail-at-step 5 never fired: attempt 0 exited with status 0 without reaching"),
        (["--kill-after", "600"], "--kill-after 600 never fired: attempt 0 exited with status 0 before 600 s"),
    ],
)
def test_a_fault_that_never_fired_is_said(runner: CliRunner, job_file: Path, flags: list[str], said: str) -> None:
    result = runner.invoke(cli, ["local", "run", "-f", str(job_file), "--no-limits-check", *flags, "--", "true"])
    assert result.exit_code == 0, result.output
    assert f"warning: {said}" in result.stderr and "no restart was tested" in result.stderr


def test_resume_with_nothing_to_resume_is_said(runner: CliRunner, job_file: Path) -> None:
    result = runner.invoke(cli, ["local", "run", "-f", str(job_file), "--no-limits-check", "--resume", "--", "true"])
    assert result.exit_code == 0, result.output
    assert "warning: --resume has nothing to resume: the job sets no storage.checkpoints" in result.stderr
    with_checkpoints = ["--checkpoint-dir", "gs://bkt/ckpt"]
    argv = ["local", "run", "-f", str(job_file), "--no-limits-check", "--resume", *with_checkpoints, "--", "true"]
    empty = runner.invoke(cli, argv)
    assert "warning: --resume has nothing to resume: no earlier run left checkpoints in " in empty.stderr
    (job_file.parent / ".pwdeploy" / "checkpoints" / "3").mkdir(parents=True, exist_ok=True)
    kept = runner.invoke(cli, argv)
    assert kept.exit_code == 0 and "nothing to resume" not in kept.stderr


def test_a_device_count_the_target_mesh_cannot_have_warns(runner: CliRunner, job_file: Path) -> None:
    result = runner.invoke(cli, ["local", "env", "-f", str(job_file), "--devices", "3"])
    assert result.exit_code == 0
    assert "warning: local.devices 3: the target (1 x v5p-8) has 4 chips" in result.stderr
    assert "use --devices 4, or a divisor of it (1, 2)" in result.stderr
    assert "local.devices" not in runner.invoke(cli, ["local", "env", "-f", str(job_file), "--devices", "2"]).stderr


# ---------------------------------------------------------------------------------------------- the config


@pytest.mark.parametrize("bare", ["24", "59", 90, "600"])
def test_a_bare_duration_under_an_hour_is_a_unit_slip(bare: Any) -> None:
    with pytest.raises(ConfigError, match=r"has no unit, so it reads as .* seconds") as raised:
        _job(**{"tpu.capacity": "flex-start", "tpu.max_run_duration": bare})
    assert f"write {bare}h for hours or {bare}m for minutes" in str(raised.value)


@pytest.mark.parametrize(("given", "seconds"), [("24h", 86400), ("600s", 600), ("3600", 3600), (7200, 7200)])
def test_a_duration_with_a_unit_or_of_an_hour_or_more_is_taken(given: Any, seconds: int) -> None:
    assert _job(**{"tpu.capacity": "flex-start", "tpu.max_run_duration": given}).tpu.max_run_duration == seconds


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        ({"tpu.capacity": "spot"}, "tpu.capacity spot: a spot VM can be preempted at any time; with "
         "scheduling.max_restarts 0 that ends the job for good: pass --max-restarts N and --checkpoint-dir"),
        ({"tpu.capacity": "spot", "scheduling.max_restarts": 2}, "without storage.checkpoints each of the "
         "scheduling.max_restarts restarts starts again from step 0"),
        ({"tpu.capacity": "flex-start", "storage.checkpoints": "gs://bucket/ckpt", "scheduling.max_restarts": 0},
         "tpu.capacity flex-start: flex-start VMs are reclaimed"),
        ({"tpu.capacity": "queued", "scheduling.queue": "lq", "scheduling.max_restarts": 0},
         "tpu.capacity queued: queued-provisioning VMs are reclaimed at the end of their run duration"),
    ],
)  # fmt: skip
def test_capacity_that_cannot_recover_warns(overrides: dict[str, Any], said: str) -> None:
    assert (
        [w for w in job_warnings(_job(**overrides)) if w.startswith("tpu.capacity")]
        == [w for w in job_warnings(_job(**overrides)) if said in w]
        != []
    )


def test_capacity_that_can_recover_does_not_warn() -> None:
    job = _job(**{"tpu.capacity": "spot", "storage.checkpoints": "gs://bucket/ckpt"})  # max_restarts 3 by default
    assert not [w for w in job_warnings(job) if w.startswith("tpu.capacity")]


@pytest.mark.parametrize("value", ["yes", "on", "true", "no"])
def test_a_yaml_boolean_label_value_is_refused(tmp_path: Path, value: str) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(JOB.replace("tpu: {type: v5p-8}", f"tpu: {{type: v5p-8, node_selector: {{ml: {value}}}}}"))
    with pytest.raises(ConfigError, match=r"tpu.node_selector.ml: is the YAML boolean (true|false)") as raised:
        load_job(path, installed_jax=lambda: "0.10.2")
    assert 'quote the value as the node has it, e.g. ml: "yes"' in str(raised.value)
    path.write_text(JOB.replace("tpu: {type: v5p-8}", f'tpu: {{type: v5p-8, node_selector: {{ml: "{value}"}}}}'))
    assert dict(load_job(path, installed_jax=lambda: "0.10.2").tpu.node_selector) == {"ml": value}


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--tpu-node-selector", "team=a", "--tpu-node-selector", "team=b"],
         "tpu.node_selector.team: is given twice, as 'a' and 'b'"),
        (["--env", "MODE=fast", "--env", "MODE=slow"], "main.env.MODE: is given twice, as 'fast' and 'slow'"),
    ],
)  # fmt: skip
def test_the_same_key_twice_with_different_values_is_refused(
    runner: CliRunner, job_file: Path, flags: list[str], said: str
) -> None:
    result = runner.invoke(cli, ["render", "-f", str(job_file), *flags])
    assert result.exit_code == 2 and said in result.stderr, result.output
    same = runner.invoke(cli, ["render", "-f", str(job_file), *flags[:2], *flags[:2]])
    assert same.exit_code == 0, same.output


def test_f_given_twice_is_refused(runner: CliRunner, job_file: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text(JOB)
    result = runner.invoke(cli, ["render", "-f", str(job_file), "-f", str(other)])
    assert result.exit_code == 2
    assert f"-f/--file is given 2 times ({job_file}, {other}), but a job is one config file" in result.stderr
    assert runner.invoke(cli, ["render", "-f", str(job_file), "-f", str(job_file)]).exit_code == 0


def test_pwdeploy_file_with_a_space_is_one_path(runner: CliRunner, tmp_path: Path) -> None:
    spaced = tmp_path / "my job.yaml"
    spaced.write_text(JOB)
    assert runner.invoke(cli, ["render"], env={"PWDEPLOY_FILE": str(spaced)}).exit_code == 0


@pytest.mark.parametrize(
    ("checkpoints", "said"),
    [
        ("gs://bkt/s", "storage.checkpoints: gs://bkt/s is the scratch location (storage.scratch)"),
        ("gs://bkt/s/ckpt", "storage.checkpoints: gs://bkt/s/ckpt is inside the scratch location gs://bkt/s"),
    ],
)
def test_render_refuses_checkpoints_inside_the_scratch_location(
    runner: CliRunner, job_file: Path, checkpoints: str, said: str
) -> None:
    result = runner.invoke(cli, ["render", "-f", str(job_file), "--checkpoint-dir", checkpoints])
    assert result.exit_code == 2 and said in result.stderr, result.output
    assert "use a location outside gs://bkt/s, e.g. gs://bkt/checkpoints" in result.stderr
    apart = runner.invoke(cli, ["render", "-f", str(job_file), "--checkpoint-dir", "gs://bkt/s2"])
    assert apart.exit_code == 0, apart.output
