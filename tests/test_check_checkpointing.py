"""`pwdeploy check` on how a program checkpoints against the job that runs it: colocated-Python checkpointing and
multi-tier checkpointing need the sidecar and the MTC volume; a controller-side handler is judged by main.memory."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from pwdeploy.check import check
from pwdeploy.config import load_job
from pwdeploy.finding import Finding
from tests.jobfiles import write_job

INIT = "import jax\nimport pathwaysutils\npathwaysutils.initialize()\n"
SIDECAR = {"image": "us-docker.pkg.dev/p/r/sidecar:1"}
MTC_INIT = (
    "from orbax.checkpoint.experimental.emergency.multi_tier_checkpointing import initialization\n"
    "initialization.initialize_multi_tier_checkpointing('/local', use_colocated_python=True)\n"
)
V0_DEFAULT = "from orbax.checkpoint import pathways as ocp_pathways\nocp_pathways.register_type_handlers()\n"
V1_COLOCATED = (
    "from orbax.checkpoint import pathways as ocp_pathways\nfrom orbax.checkpoint import v1 as ocp\n"
    "ctx = ocp.Context()\n"
    "ctx.pathways.checkpointing_impl = ocp_pathways.CheckpointingImpl.from_options(use_colocated_python=True)\n"
)
V0_COLOCATED = (
    "import orbax.checkpoint as ocp\n"
    "ocp.pathways.register_type_handlers(checkpointing_impl=ocp.pathways.CheckpointingImpl.COLOCATED_PYTHON)\n"
)


def findings(tmp_path: Path, source: str, **fields: Any) -> list[Finding]:
    (tmp_path / "train.py").write_text(textwrap.dedent(source), encoding="utf-8")
    main = {"image": "r.example/m:1", "command": "python3 train.py", "memory": "96Gi"}
    job = load_job(write_job(tmp_path, "chk", main=main, **fields), {}, installed_jax=lambda: "0.10.2")
    return list(check(job, [], cwd=tmp_path).findings)


def rules(found: list[Finding]) -> list[str]:
    return [f.id for f in found]


@pytest.mark.parametrize("program", [V0_DEFAULT, V0_COLOCATED, V1_COLOCATED, MTC_INIT])
def test_colocated_python_checkpointing_needs_the_sidecar(tmp_path: Path, program: str) -> None:
    found = [f for f in findings(tmp_path, INIT + program) if f.id == "colocated-no-sidecar"]
    assert len(found) == 1 and found[0].severity == "error" and "sidecar" in found[0].fix
    assert "colocated-no-sidecar" not in rules(findings(tmp_path, INIT + program, sidecar=SIDECAR))


def test_the_persistence_handler_needs_no_sidecar(tmp_path: Path) -> None:
    program = INIT + V0_COLOCATED.replace("COLOCATED_PYTHON", "PERSISTENCE")
    assert "colocated-no-sidecar" not in rules(findings(tmp_path, program))


def test_mtc_needs_the_mtc_volume(tmp_path: Path) -> None:
    found = [f for f in findings(tmp_path, INIT + MTC_INIT, sidecar=SIDECAR) if f.id == "mtc-no-volume"]
    assert len(found) == 1 and "600 s" in found[0].message and "mtc.enabled" in found[0].fix
    with_volume = findings(tmp_path, INIT + MTC_INIT, sidecar=SIDECAR, mtc={"enabled": True})
    assert "mtc-no-volume" not in rules(with_volume)


def test_a_controller_side_handler_is_a_warning_sized_by_main_memory(tmp_path: Path) -> None:
    program = INIT + V0_COLOCATED.replace("COLOCATED_PYTHON", "NO_DISPATCHER")
    (found,) = [f for f in findings(tmp_path, program) if f.id == "orbax-array-handler"]
    assert found.severity == "warning"
    assert "main.memory 96Gi takes arrays up to about 8.0 GiB each" in found.message


def test_without_a_job_the_job_rules_say_nothing(tmp_path: Path) -> None:
    entry = tmp_path / "train.py"
    entry.write_text(INIT + V0_DEFAULT + MTC_INIT, encoding="utf-8")
    found = rules(list(check(None, [entry], cwd=tmp_path).findings))
    assert "colocated-no-sidecar" not in found and "mtc-no-volume" not in found


@pytest.mark.parametrize(
    "program",
    [
        "if config.enable_multi_tier_checkpointing:\n    " + MTC_INIT.splitlines()[1] + "\n",  # MaxText decides
        "from pwdeploy import runtime\noptions = runtime.mtc_options()\n"
        "initialization.initialize_multi_tier_checkpointing(**options)\n",  # the job decides
    ],
)
def test_mtc_the_program_decides_at_run_time_is_not_judged_against_the_job(tmp_path: Path, program: str) -> None:
    source = INIT + MTC_INIT.splitlines()[0] + "\n" + program
    found = rules(findings(tmp_path, source))
    assert "mtc-no-volume" not in found and "colocated-no-sidecar" not in found
