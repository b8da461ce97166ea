"""How `--help` reads: own options first, job flags under headings, defaults, value types, an example each."""

from __future__ import annotations

import os
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from pwdeploy.cli import cli
from pwdeploy.cli.commands import COMMANDS, TABLE
from tests.conftest import REPO

HEADINGS = [
    "Options:",
    "Job (",
    "TPU:",
    "Main container:",
    "Head (IFRT proxy and resource manager):",
    "Storage (GCS):",
    "Scheduling:",
    "Colocated-Python sidecar:",
    "Job image:",
    "Local runs:",
    "Example:",
]


def _help(runner: CliRunner, *argv: str) -> str:
    result = runner.invoke(cli, [*argv, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return result.stdout


def _line(text: str, start: str) -> str:
    return next(line.strip() for line in text.splitlines() if line.strip().startswith(start))


def test_render_help_groups_job_flags_under_headings_after_own_options(runner: CliRunner) -> None:
    text = _help(runner, "render")
    positions = [text.index(heading) for heading in HEADINGS]
    assert positions == sorted(positions), positions
    own = text[text.index("Options:") : text.index("Job (")]
    assert "--output-dir" in own and "--num-slices" not in own
    tpu = text[text.index("TPU:") : text.index("Main container:")]
    assert "--num-slices" in tpu and "--worker-flag" in tpu and "--image " not in tpu
    assert "-f, --file FILE" in text[text.index("Job (") : text.index("TPU:")]


def test_help_shows_defaults_and_value_types(runner: CliRunner) -> None:
    text = _help(runner, "render")
    assert _line(text, "-o, --output").endswith("[default: yaml]")
    assert _line(text, "--worker-shm-size QUANTITY").endswith("[default: 16Gi]")
    assert _line(text, "--num-slices INTEGER").endswith("[default: 1]")
    assert _line(text, "--gcs-olm / --no-gcs-olm").endswith("[default: --gcs-olm]")
    for option in (
        "--gcs-scratch GCS URI",
        "--env KEY=VALUE",
        "--secret-env NAME=SECRET/KEY",
        "--xla-flag --NAME=VALUE",
        "--restart-strategy [BlockingRecreate|Recreate]",
        "--image IMAGE",
        "--main-memory QUANTITY",
        "--tpu-type TYPE",
        "--sidecar-source-dir PATH",
    ):
        assert _line(text, option.split(" ")[0] + " ").startswith(option), option
    job_part = text[text.index("Job (") : text.index("Example:")]
    assert " TEXT " not in job_part


def _commands() -> list[tuple[str, ...]]:
    found: list[tuple[str, ...]] = []
    ctx = click.Context(cli)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        if command is None:
            continue
        found.append((name,))
        if isinstance(command, click.Group):
            found += [(name, sub) for sub in command.commands]
    return found


@pytest.mark.parametrize("argv", _commands(), ids=" ".join)
def test_every_command_has_its_example(runner: CliRunner, argv: tuple[str, ...]) -> None:
    text = _help(runner, *argv)
    example = TABLE[" ".join(argv)].example
    assert f"Example:\n    {example}\n" in text
    assert example.startswith("pwdeploy " + argv[0])


def test_top_level_help_documents_completion(runner: CliRunner) -> None:
    text = _help(runner)
    assert "_PWDEPLOY_COMPLETE=bash_source pwdeploy" in text


def test_bash_completion_completes_job_flags() -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "_PWDEPLOY_COMPLETE": "bash_complete",
        "COMP_WORDS": "pwdeploy render --num-sl",
        "COMP_CWORD": "2",
    }
    code = "from pwdeploy.cli import main; main()"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0 and result.stdout.strip() == "plain,--num-slices", result
