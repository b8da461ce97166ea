"""Flag environment defaults (PWDEPLOY_<FLAG>) never read the variables a job's program is given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pwdeploy import identifiers as ids
from pwdeploy.cli import cli
from pwdeploy.config import load_job
from pwdeploy.config.fields import FIELDS
from pwdeploy.envcontract import job_env

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"


def test_the_env_contract_and_the_flag_defaults_share_no_name() -> None:
    values = {"storage.profiles": "gs://bkt/p", "storage.checkpoints": "gs://bkt/c"}
    job = load_job(EXAMPLE, values, installed_jax=lambda: "0.10.2")
    contract = set(job_env(job)) - {name for name, _ in job.main.env}
    assert contract <= ids.JOB_ENV_NAMES
    flag_defaults = {f.env_name for f in FIELDS if f.env_name}
    assert not flag_defaults & ids.JOB_ENV_NAMES
    # the names that used to collide are still the ones the job gets
    assert {ids.NUM_SLICES_ENV, ids.TPU_TYPE_ENV, ids.DATA_WORKERS_ENV, ids.PROFILE_DIR_ENV} <= contract


def test_a_shell_with_a_jobs_variables_renders_another_config_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After `eval "$(pwdeploy local env ...)"` of a 2-slice job, a 4-slice config still renders 4 slices."""
    env = CliRunner().invoke(cli, ["local", "env", "-f", str(EXAMPLE)])
    assert env.exit_code == 0, env.output
    exported = dict(
        line.removeprefix("export ").split("=", 1) for line in env.stdout.splitlines() if line.startswith("export ")
    )
    assert exported[ids.NUM_SLICES_ENV].strip("'\"") == "2"
    for name, value in exported.items():
        monkeypatch.setenv(name, value.strip("'\""))
    config = tmp_path / "four.yaml"
    config.write_text(EXAMPLE.read_text().replace("slices: 2", "slices: 4"), encoding="utf-8")
    from_file = CliRunner().invoke(cli, ["render", "-f", str(config), "-o", "json"])
    assert from_file.exit_code == 0, from_file.output
    jobset = json.loads(from_file.stdout)
    replicas = {rj["name"]: rj["replicas"] for rj in jobset["spec"]["replicatedJobs"]}
    assert replicas[ids.WORKER_JOB] == 4
