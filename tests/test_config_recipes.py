"""What a MaxText recipe (xpk's flags) needs from the job config: JAX_PLATFORMS=proxy,cpu in main.env, a switch
that restarts on any failure of main (xpk's --restart-on-user-code-failure), JOBSET_NAME in main's env, and an
xpk-style `export X=Y && python3 ...` command answered with main.env (and no shell script setting what pwdeploy
sets)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pwdeploy import identifiers as ids
from pwdeploy import manifests
from pwdeploy.advice import job_warnings
from pwdeploy.config import JobConfig, load_job
from pwdeploy.errors import ConfigError
from pwdeploy.manifests.failure_policy import Action, PodFailure, decide
from tests.jobfiles import write_job

BASE = {
    "name": "recipe",
    "tpu.type": "v5p-8",
    "main.image": "img/train:1",
    "main.command": "python3 train.py",
    "storage.scratch": "gs://bucket/scratch",
}


def job(**overrides: Any) -> JobConfig:
    return load_job(None, {**BASE, **overrides}, installed_jax=lambda: "0.10.2")


def main_container(config: JobConfig) -> dict[str, Any]:
    (jobset,) = manifests.build(config)
    head = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == ids.HEAD_JOB)
    pod = head["template"]["spec"]["template"]["spec"]
    found: dict[str, Any] = next(c for c in pod["containers"] if c["name"] == ids.MAIN_CONTAINER)
    return found


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_main_env_may_add_the_host_cpu_backend_beside_the_proxy() -> None:
    assert env_of(main_container(job(**{"main.env": {"JAX_PLATFORMS": "proxy,cpu"}})))["JAX_PLATFORMS"] == "proxy,cpu"
    assert env_of(main_container(job()))["JAX_PLATFORMS"] == "proxy"
    with pytest.raises(ConfigError) as refused:
        job(**{"main.env": {"JAX_PLATFORMS": "cpu,proxy"}})
    assert refused.value.field == "main.env.JAX_PLATFORMS" and "proxy,cpu" in str(refused.value)


def test_main_gets_the_jobset_s_name_and_may_not_set_it() -> None:
    annotation = {"fieldRef": {"fieldPath": f"metadata.annotations['{ids.JOBSET_NAME_LABEL}']"}}
    assert env_of(main_container(job()))["JOBSET_NAME"] == annotation
    with pytest.raises(ConfigError) as refused:
        job(**{"main.env": {"JOBSET_NAME": "other"}})
    assert refused.value.field == "main.env.JOBSET_NAME"


def test_restart_on_user_code_failure_restarts_every_exit_of_main_counted() -> None:
    switched = job(**{"scheduling.restart_on_user_code_failure": True, "scheduling.max_restarts": 2})
    (jobset,) = manifests.build(switched)
    for failure in (
        PodFailure(ids.HEAD_JOB, exit_code=1, container=ids.MAIN_CONTAINER),
        PodFailure(ids.HEAD_JOB, signal=signal.SIGKILL, container=ids.MAIN_CONTAINER),  # 137: an OOM kill too
    ):
        decided = decide(jobset, [failure], restarts=0)
        assert decided.action is Action.RESTART and decided.rule == ids.RETRY_EXIT_CODE_RULE, decided.why
        assert decide(jobset, [failure], restarts=2).action is Action.FAIL  # within maxRestarts
    (default,) = manifests.build(job(**{"scheduling.max_restarts": 2}))
    failed = decide(default, [PodFailure(ids.HEAD_JOB, exit_code=1, container=ids.MAIN_CONTAINER)])
    assert failed.action is Action.FAIL and failed.rule == ids.USER_PROGRAM_FAILED_RULE


def test_restart_on_user_code_failure_without_restarts_is_a_warning() -> None:
    warned = job_warnings(job(**{"scheduling.restart_on_user_code_failure": True}))
    assert any("scheduling.max_restarts is 0, so nothing is restarted" in line for line in warned)
    assert not any("nothing is restarted" in w for w in job_warnings(job()))


@pytest.mark.parametrize(
    ("command", "sets", "rest"),
    [
        (
            "export ENABLE_DEBUG=1 && python3 -m trainer.train base.yml",
            "ENABLE_DEBUG",
            "python3 -m trainer.train base.yml",
        ),
        ("export A=1 B='x y'; export C=3 && python3 t.py", "A, B, C", "python3 t.py"),
        ("LIBTPU_INIT_ARGS=--x=1 python3 t.py steps=3", "LIBTPU_INIT_ARGS", "python3 t.py steps=3"),
    ],
)
def test_an_xpk_style_export_command_is_answered_with_main_env(command: str, sets: str, rest: str) -> None:
    with pytest.raises(ConfigError) as refused:
        job(**{"main.command": command})
    assert refused.value.field == "main.command" and f"sets {sets} in a shell" in str(refused.value)
    assert "set them in main.env" in str(refused.value.hint) and repr(rest) in str(refused.value.hint)
    assert "bash" not in str(refused.value.hint)


@pytest.mark.parametrize(
    "name", ["JAX_PLATFORMS", "ENABLE_PATHWAYS_PERSISTENCE", "PWDEPLOY_DATA_WORKERS", "JOBSET_NAME"]
)
def test_a_shell_script_may_not_set_what_pwdeploy_sets(name: str) -> None:
    with pytest.raises(ConfigError) as refused:
        job(**{"main.command": ["bash", "-c", f"export {name}=cpu && python3 train.py"]})
    assert refused.value.field == "main.command" and f"its shell script sets {name}" in str(refused.value)
    assert job(**{"main.command": ["bash", "-c", "export MY_FLAG=1 && python3 train.py"]}).main.command[0] == "bash"


def test_local_run_restarts_a_failing_main_with_the_switch(tmp_path: Path) -> None:
    fails_once = "import os, sys; sys.exit(1 if os.environ['PWDEPLOY_RESTART_ATTEMPT'] == '0' else 0)"
    main = {"image": "r.example/m:1", "command": ["python3", "-c", fails_once]}
    scheduling = {"max_restarts": 1, "restart_on_user_code_failure": True}
    path = write_job(tmp_path, "restarts", main=main, scheduling=scheduling, local={"devices": 1})
    done = subprocess.run(
        [sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(path), "--no-limits-check"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "attempt 0 exited with status 1; rule retry_exit_code (RestartJobSet, restart 1 of 1)" in done.stderr
