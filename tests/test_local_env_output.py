"""`pwdeploy local env` as scripts read it: `eval "$(pwdeploy local env ...)"` runs the exports and nothing else,
whatever main.command holds, and `-o json` / `-o yaml` are one document of the documented shape."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml
from click.testing import CliRunner

from pwdeploy.cli import cli


def job_with_command(tmp_path: Path, command: list[str]) -> Path:
    path = tmp_path / "job.yaml"
    job = {
        "name": "env-test",
        "pathways_version": "0.10.2",
        "tpu": {"type": "v5p-8"},
        "main": {"image": "registry.example/none:0", "command": command},
        "storage": {"scratch": "gs://bkt/s"},
    }
    path.write_text(yaml.safe_dump(job), encoding="utf-8")
    return path


def test_eval_of_local_env_never_runs_a_command_line_after_a_newline(runner: CliRunner, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    planted = f"print(1)\ntouch {marker}\n\x1b]0;title\x07"
    path = job_with_command(tmp_path, ["python3", "-c", planted])
    printed = runner.invoke(cli, ["local", "env", "-f", str(path)])
    assert printed.exit_code == 0, printed.output
    comment = printed.stdout.splitlines()[-1]
    assert comment.startswith("# cd ") and "\x1b" not in printed.stdout
    subprocess.run(["bash", "-c", printed.stdout], check=True, cwd=tmp_path)
    assert not marker.exists(), "eval ran the line after the newline of main.command"
    words = comment.split(" && ", 1)[1]
    echoed = subprocess.run(["bash", "-c", f"printf '%s\\0' {words}"], capture_output=True, text=True, check=True)
    assert echoed.stdout.split("\0")[-2] == planted, "the comment still reads as the exact command"


def test_env_as_json_and_yaml_is_one_document_of_the_documented_shape(runner: CliRunner, tmp_path: Path) -> None:
    path = job_with_command(tmp_path, ["python3", "train.py"])
    as_json = runner.invoke(cli, ["local", "env", "-f", str(path), "--devices", "2", "-o", "json"])
    as_yaml = runner.invoke(cli, ["local", "env", "-f", str(path), "--devices", "2", "-o", "yaml"])
    assert as_json.exit_code == 0 and as_yaml.exit_code == 0, as_json.output + as_yaml.output
    document = json.loads(as_json.stdout)
    assert document == yaml.safe_load(as_yaml.stdout)
    assert list(document) == ["cwd", "command", "devices", "env"]
    assert document["cwd"] == str(tmp_path) and document["command"][1:] == ["train.py"] and document["devices"] == 2
    assert document["env"]["JAX_PLATFORMS"] == "cpu"
    text = runner.invoke(cli, ["local", "env", "-f", str(path), "--devices", "2"])
    exports = [line for line in text.stdout.splitlines() if line.startswith("export ")]
    assert len(exports) == len(document["env"])
