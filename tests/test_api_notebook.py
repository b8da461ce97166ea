"""docs/api-notebook.md runs as written: its cells, in order, in one namespace, from a copy of the example's folder
(the job's program, checked and run locally for three steps on two emulated CPU devices), then the cluster cell
against StubKubeApiServer (a loopback stub, not an API server); and ``api.run_local`` returns what `pwdeploy local
run` reports, raising the documented errors."""

from __future__ import annotations

import io
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from pwdeploy import api
from pwdeploy.errors import ConfigError, LocalRunError
from pwdeploy.local.outcome import LocalRun
from tests.conftest import REPO
from tests.kube_stub import StubKubeApiServer

PAGE = REPO / "docs" / "api-notebook.md"
EXAMPLE = REPO / "examples" / "data_parallel"
SMALL = {
    "tpu": {"type": "v5p-8"},
    "main": {"image": "python:3.12-slim", "command": "true"},
    "storage": {"scratch": "gs://stub-bucket/scratch"},
}


def cells() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)


@pytest.fixture
def job_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the example's folder (its .pwdeploy/ outputs stay out of the repository), the current one."""
    folder = tmp_path / "data_parallel"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns(".pwdeploy", "__pycache__"))
    monkeypatch.chdir(folder)
    return folder


def test_the_notebook_page_runs_as_written_locally_then_against_the_stub(
    job_folder: Path,
    kubeconfig: Path,
    stub: StubKubeApiServer,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    found = cells()
    assert len(found) == 5
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    namespace: dict[str, Any] = {}
    for cell in found[:4]:  # the fifth waits for running pods, which the stub never starts
        exec(compile(cell, str(PAGE), "exec"), namespace)
    shown = capfd.readouterr()  # the job writes to the file descriptors it inherits
    run = namespace["run"]
    assert isinstance(run, LocalRun)
    assert (run.exit_status, run.attempts, run.restarts, run.devices) == (0, 1, 0, 2)
    assert run.checkpoints == job_folder / ".pwdeploy" / "checkpoints" and run.checkpoints.is_dir()
    assert run.hlo_dir is None and run.profiles is None  # the mapping sets no storage.hlo_dump, no profiles
    assert run.compile_cache == str(job_folder / ".pwdeploy" / "jax-cache")
    assert run.transfers is not None and run.transfers.steps >= 1  # train.py calls runtime.step_done
    assert "dp-example 1 slice of v5p-8 - python3 train.py --steps 3" in shown.out
    assert "exit 0 after 1 attempt(s), 0 restart(s)" in shown.out
    trained = [json.loads(line) for line in shown.out.splitlines() if line.startswith('{"devices"')]
    assert [(t["devices"], t["steps"]) for t in trained] == [(2, 3)], "the job's own output: train.py's summary"
    assert "pwdeploy local: 2 CPU devices, in" in shown.err and "1 attempt;" in shown.err  # progress=sys.stderr
    assert namespace["outcome"].result == "created" and stub.get("jobsets", "default", "dp-example") is not None


def test_run_local_returns_a_failed_job_and_writes_the_commands_summary(job_folder: Path) -> None:
    job = api.load({**SMALL, "name": "fails"})
    progress = io.StringIO()
    summary = job_folder / "summary.json"
    run = api.run_local(
        job,
        [sys.executable, "-c", "import sys; sys.exit(3)"],
        api.LocalRunOptions(check_limits=False, summary_json=str(summary)),
        progress=progress,
    )
    assert (run.exit_status, run.attempts, run.ok, run.peaks) == (3, 1, False, None)
    assert run.ending == "the job exited with status 3" and run.checkpoints is None
    assert json.loads(summary.read_text()) == run.summary()
    assert run.summary()["exit_status"] == 3 and run.summary()["host_syncs_per_step"] is None
    assert progress.getvalue().splitlines()[-1] == "pwdeploy local: the job exited with status 3"


def test_run_local_raises_the_documented_errors(job_folder: Path) -> None:
    job = api.load({**SMALL, "name": "e"})
    with pytest.raises(LocalRunError, match="not found on PATH"):
        api.run_local(job, ["no-such-program-here"])
    with pytest.raises(ConfigError) as bad:
        api.run_local(job, options=api.LocalRunOptions(fail_at_step=0))
    assert bad.value.field == "fail_at_step"
    with pytest.raises(ConfigError) as headless:
        api.run_local(job._replace(headless=True))
    assert headless.value.field == "headless"
