"""`pwdeploy check` over the patterns of a real trainer's repository (MaxText's, reproduced in small programs of our
own): a distributed initialize behind an early return on the config and in the helpers called after it, Orbax
checkpointers used only to read, a per-process split of gathered output, syntax of a newer Python than pwdeploy's,
a src/ layout run as `python3 -m pkg.module` with PYTHONPATH in main.env, the OCDBT default in the YAML config the
command names, and a text view that stays short over many repeats."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pwdeploy.cli import cli
from tests.jobfiles import write_job

IMAGE = "r.example/m:1"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # findings name files relative to the working directory


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def findings(runner: CliRunner, *args: str) -> tuple[int, dict[str, Any]]:
    result = runner.invoke(cli, ["check", *args, "-o", "json"])
    return result.exit_code, json.loads(result.stdout) if result.stdout.startswith("{") else {"output": result.output}


def rules_at(report: dict[str, Any]) -> list[tuple[str, int]]:
    return [(f["rule"], f["line"]) for f in report["findings"]]


STARTS_DISTRIBUTED = """\
import jax


def initialize_for_cpu(config):
    jax.distributed.initialize(coordinator_address=config["coordinator"], process_id=0, num_processes=1)


def maybe_initialize(config):
    if config["skip_distributed"]:
        return
    if config["enable_single_controller"]:
        print("single controller: no distributed system")
        return
    if config["hardware"] == "cpu":
        initialize_for_cpu(config)
        return
    jax.distributed.initialize(initialization_timeout=config["timeout"])
"""


def test_distributed_initialize_after_an_early_return_on_the_config_is_quiet(runner: CliRunner, tmp_path: Path) -> None:
    entry = write(tmp_path, "dist.py", STARTS_DISTRIBUTED)
    code, report = findings(runner, str(entry))
    assert code == 0 and rules_at(report) == [], report


def test_a_helper_also_called_without_the_guard_still_fires(runner: CliRunner, tmp_path: Path) -> None:
    text = STARTS_DISTRIBUTED + "\n\ndef other(config):\n    initialize_for_cpu(config)\n"
    code, report = findings(runner, str(write(tmp_path, "dist.py", text)))
    assert code == 11 and rules_at(report) == [("distributed-initialize", 5)], report


def test_an_early_return_that_asks_something_else_does_not_guard(runner: CliRunner, tmp_path: Path) -> None:
    text = STARTS_DISTRIBUTED.replace('config["enable_single_controller"]', 'config["verbose"]')
    _, report = findings(runner, str(write(tmp_path, "dist.py", text)))
    assert rules_at(report) == [("distributed-initialize", 5), ("distributed-initialize", 17)], report


READS_METADATA = """\
import orbax.checkpoint as ocp


def custom_metadata(path):
    return ocp.StandardCheckpointer().metadata(path).custom_metadata


def step_metadata(path):
    reader = ocp.StandardCheckpointer()
    found = reader.metadata(path)
    return found


def load_params(path):
    return ocp.PyTreeCheckpointer().restore(path, item=None)
"""


def test_orbax_ocdbt_is_quiet_for_checkpointers_that_only_read(runner: CliRunner, tmp_path: Path) -> None:
    _, report = findings(runner, str(write(tmp_path, "meta.py", READS_METADATA)))
    assert "orbax-ocdbt" not in {rule for rule, _ in rules_at(report)}, report


def test_orbax_ocdbt_fires_for_a_checkpointer_that_saves_or_is_handed_on(runner: CliRunner, tmp_path: Path) -> None:
    text = READS_METADATA + textwrap.dedent("""\


        def save(path, tree):
            writer = ocp.StandardCheckpointer()
            writer.metadata(path)
            writer.save(path, tree)


        def handed_on(path, keep):
            checkpointer = ocp.StandardCheckpointer()
            keep(checkpointer)
        """)
    _, report = findings(runner, str(write(tmp_path, "meta.py", text)))
    assert [r for r in rules_at(report) if r[0] == "orbax-ocdbt"] == [("orbax-ocdbt", 19), ("orbax-ocdbt", 25)]


SPLITS_GATHERED = """\
import jax
import numpy as np
from jax.experimental import multihost_utils


def write_local_part(tokens, extra, writer):
    gathered = multihost_utils.process_allgather(tokens, tiled=True)
    optional = {}
    for key in extra:
        optional[key] = multihost_utils.process_allgather(extra[key], tiled=True)
    rows = np.array(gathered)
    optional_np = {k: np.array(v) for k, v in optional.items()}
    per_process = rows.shape[0] // jax.process_count()
    start = jax.process_index() * per_process
    end = start + per_process
    writer(rows[start:end], {k: v[start:end] for k, v in optional_np.items()})


def load_my_part(rows):
    per_process = len(rows) // jax.process_count()
    start = jax.process_index() * per_process
    return rows[start : start + per_process]
"""


def test_a_per_process_split_of_gathered_output_is_not_input_sharding(runner: CliRunner, tmp_path: Path) -> None:
    _, report = findings(runner, str(write(tmp_path, "gathered.py", SPLITS_GATHERED)))
    assert rules_at(report) == [("process-sharding", 22)], report  # the input split of load_my_part alone


NEWER_SYNTAX = """\
type Pair = tuple[int, int]


def label(row: dict[str, str]) -> str:
    return f"{row["name"]}"
"""


def test_syntax_of_the_job_s_newer_python_is_a_note_not_an_error(runner: CliRunner, tmp_path: Path) -> None:
    write(tmp_path, "pyproject.toml", '[project]\nname = "t"\nrequires-python = ">=3.12"\n')
    write(tmp_path, "newer.py", NEWER_SYNTAX)
    entry = write(tmp_path, "train.py", "import newer\nimport jax\njax.distributed.initialize()\n")
    job = write_job(tmp_path, "chk", main={"image": IMAGE, "command": "python3 train.py"})
    _, report = findings(runner, "-f", str(job))
    assert "syntax-error" not in {rule for rule, _ in rules_at(report)}, report
    assert rules_at(report) == [("distributed-initialize", 3)]
    if sys.version_info < (3, 12):  # pwdeploy's Python cannot parse it: a note says which Python and why
        (note,) = report["notes"]
        assert note.startswith("newer.py: Python 3.11, which runs pwdeploy, cannot parse it, and the job runs")
        assert "requires-python >=3.12" in note and entry.name not in note
    else:
        assert "newer.py" in str(report["files"])


def test_syntax_newer_than_the_job_s_python_is_an_error_naming_that_python(runner: CliRunner, tmp_path: Path) -> None:
    write(tmp_path, "train.py", "try:\n    pass\nexcept* ValueError:\n    pass\n")
    main = {"image": IMAGE, "command": "python3 train.py"}
    job = write_job(tmp_path, "chk", main=main, sidecar={"image": "r.example/s:1", "python_version": "3.10"})
    code, report = findings(runner, "-f", str(job))
    (finding,) = [f for f in report["findings"] if f["rule"] == "syntax-error"]
    assert code == 11 and finding["line"] in (3, 4)  # where the parser stops: except* or the block after it
    assert finding["message"].startswith("Python 3.10 (sidecar.python_version) cannot parse this file")


def src_layout(tmp_path: Path, env: dict[str, str] | None) -> Path:
    write(tmp_path, "src/trainer/__init__.py", "")
    write(tmp_path, "src/trainer/utils.py", "import jax\n\ndef start():\n    jax.distributed.initialize()\n")
    write(tmp_path, "src/trainer/train.py", "from trainer import utils\n\nutils.start()\n")
    write(tmp_path, "src/trainer/configs/base.yml", "steps: 10\ncheckpoint_use_ocdbt: true\n")
    command = "python3 -m trainer.train src/trainer/configs/base.yml steps=5"
    main = {"image": IMAGE, "command": command, **({"env": env} if env is not None else {})}
    return write_job(tmp_path, "chk", main=main)


@pytest.mark.parametrize("env", [{"PYTHONPATH": "src"}, {"PYTHONPATH": "/app/src"}, None])
def test_a_src_layout_run_as_a_module_is_found(runner: CliRunner, tmp_path: Path, env: dict[str, str] | None) -> None:
    code, report = findings(runner, "-f", str(src_layout(tmp_path, env)))
    assert code == 11, report
    assert sorted(report["files"]) == ["src/trainer/__init__.py", "src/trainer/train.py", "src/trainer/utils.py"]
    assert rules_at(report) == [("distributed-initialize", 4)]  # no Orbax in the program: the YAML key is not read


def test_the_ocdbt_default_in_the_yaml_config_the_command_names(runner: CliRunner, tmp_path: Path) -> None:
    job = src_layout(tmp_path, {"PYTHONPATH": "src"})
    write(
        tmp_path,
        "src/trainer/ckpt.py",
        "import orbax.checkpoint as ocp\n\ndef manager(d, h):\n    return ocp.CheckpointManager(d, item_handlers=h)\n",
    )
    write(tmp_path, "src/trainer/train.py", "from trainer import utils, ckpt\n\nutils.start()\n")
    _, report = findings(runner, "-f", str(job))
    hits = [f for f in report["findings"] if f["rule"] == "orbax-ocdbt"]
    assert [(f["file"], f["line"]) for f in hits] == [("src/trainer/configs/base.yml", 2)], report
    assert "checkpoint_use_ocdbt=false" in hits[0]["fix"]
    text = job.read_text(encoding="utf-8").replace("steps=5", "steps=5 checkpoint_use_ocdbt=False")
    job.write_text(text, encoding="utf-8")
    _, report = findings(runner, "-f", str(job))
    assert "orbax-ocdbt" not in {rule for rule, _ in rules_at(report)}


def test_a_module_the_job_s_python_would_not_find_is_bad_input(runner: CliRunner, tmp_path: Path) -> None:
    job = src_layout(tmp_path, {"PYTHONPATH": "src"})
    job.write_text(job.read_text(encoding="utf-8").replace("trainer.train", "trainer.missing"), encoding="utf-8")
    result = runner.invoke(cli, ["check", "-f", str(job)])
    assert result.exit_code == 2, result.output
    assert "main.command" in result.output and "module trainer.missing" in result.output


def test_reading_nothing_is_exit_2_and_a_local_run_says_it_read_nothing(runner: CliRunner, tmp_path: Path) -> None:
    job = write_job(tmp_path, "chk", main={"image": IMAGE, "command": "bash run.sh"})
    result = runner.invoke(cli, ["check", "-f", str(job)])
    assert result.exit_code == 2 and "nothing to check" in result.output, result.output
    write(tmp_path, "run.sh", "exit 0\n")
    done = subprocess.run(
        [sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(job), "--no-limits-check"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "pwdeploy check: read no file, so checked nothing" in done.stderr
    assert "note: main.command runs bash, not Python: the program was not checked" in done.stderr


def test_the_text_view_groups_repeats_and_many_infos(runner: CliRunner, tmp_path: Path) -> None:
    guards = "".join(f"    if jax.process_index() == 0:\n        print({i})\n" for i in range(5))
    write(tmp_path, "guards.py", f"import jax\n\n\ndef report():\n{guards}")
    write(tmp_path, "split.py", "import jax\n\n\ndef part(a, b):\n" + "".join(
        f"    x{i} = a[jax.process_index() :: jax.process_count()]\n" for i in range(3)))  # fmt: skip
    for name in ("one", "two", "three"):
        (tmp_path / f"{name}.ipynb").write_text("{}", encoding="utf-8")
    result = runner.invoke(cli, ["check", "."])
    lines = result.output.splitlines()
    (split,) = [line for line in lines if "process-sharding" in line]
    assert split.endswith("(also at lines 6, 7)"), split
    (info,) = [line for line in lines if "process-index-guard" in line]
    assert info.startswith("info process-index-guard: 5 findings in 1 file, the first at guards.py:5: ")
    (notebooks,) = [line for line in lines if "notebook" in line]
    assert notebooks.startswith("note: 3 files, a notebook: not read") and notebooks.endswith(
        "one.ipynb, three.ipynb, two.ipynb"
    )
    _, report = findings(runner, ".")
    assert len(report["findings"]) == 8 and len(report["notes"]) == 3
