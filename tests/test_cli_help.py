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


def _headings(text: str) -> list[str]:
    return [line.split(" (")[0].rstrip(":") for line in text.splitlines() if line and not line.startswith(" ")][1:]


@pytest.mark.parametrize(
    ("argv", "headings"),
    [
        (("render",), ["Options", "Job", "TPU", "Main container", "Head", "Storage", "Scheduling",
                       "Colocated-Python sidecar", "Multi-tier checkpointing", "Job image", "Other job flags"]),
        (("submit",), ["Options", "Job", "TPU", "Main container", "Head", "Storage", "Scheduling",
                       "Colocated-Python sidecar", "Multi-tier checkpointing", "Job image", "Other job flags"]),
        (("local", "run"), ["Options", "Job", "TPU", "Main container", "Storage", "Scheduling",
                            "Colocated-Python sidecar", "Multi-tier checkpointing", "Local runs", "Other job flags"]),
        (("sidecar", "dockerfile"), ["Options", "Job", "Colocated-Python sidecar", "Multi-tier checkpointing",
                                     "Other job flags"]),
        (("image", "build"), ["Options", "Job", "Colocated-Python sidecar", "Job image", "Other job flags"]),
    ],
)  # fmt: skip
def test_a_command_shows_the_job_flag_headings_that_apply_to_it(
    runner: CliRunner, argv: tuple[str, ...], headings: list[str]
) -> None:
    assert _headings(_help(runner, *argv)) == headings


def test_hidden_job_flags_are_still_accepted(runner: CliRunner) -> None:
    example = str(REPO / "examples" / "data_parallel" / "job.yaml")
    result = runner.invoke(cli, ["local", "env", "-f", example, "--proxy-cpu", "4", "--", "true"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("argv", [("render",), ("local", "run"), ("submit",), ("validate",), ("sidecar", "build")])
def test_defaults_never_wrap_inside_a_value(runner: CliRunner, argv: tuple[str, ...]) -> None:
    result = runner.invoke(cli, [*argv, "--help"], terminal_width=80)
    notes = [line for line in result.stdout.splitlines() if "[default:" in line]
    assert notes and all("]" in line.split("[default:")[1] for line in notes), notes
    if argv == ("render",):
        assert "[default: us-docker.pkg.dev/cloud-tpu-v2-images/pathways]" in result.stdout
        assert "[default: google/cloud-sdk:" in result.stdout


def test_the_command_argument_is_not_an_option_row(runner: CliRunner) -> None:
    for argv in (("local", "run"), ("local", "env")):
        text = _help(runner, *argv)
        assert text.startswith(f"Usage: cli {' '.join(argv)} [OPTIONS] [-- COMMAND...]\n")
        assert "[-- COMMAND...]" not in text.split("Options:")[1]


def test_timeout_reads_seconds(runner: CliRunner) -> None:
    assert _line(_help(runner, "submit"), "--timeout").startswith("--timeout SECONDS ")


def test_sidecar_dockerfile_options_do_not_say_build(runner: CliRunner) -> None:
    text = _help(runner, "sidecar", "dockerfile")
    own = text[text.index("Options:") : text.index("Job (")]
    assert "--allow-base-mismatch" in own and "build" not in own.lower()


def _every_command(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    found = []
    for name in group.list_commands(click.Context(group)):
        command = group.get_command(click.Context(group), name)
        assert command is not None
        if isinstance(command, click.Group):
            found += _every_command(command, (*path, name))
        else:
            found.append(((*path, name), command))
    return found


def test_help_names_every_option_a_command_takes(runner: CliRunner) -> None:
    """`local run --help` once left out --max-restarts, which its own text names."""
    missing = {}
    for argv, command in _every_command(cli):
        text = _help(runner, *argv)
        flags = [name for p in command.params if isinstance(p, click.Option) and not p.hidden for name in p.opts]
        if absent := [flag for flag in flags if flag not in text]:
            missing[" ".join(argv)] = absent
    assert not missing
    assert "--max-restarts" in _help(runner, "local", "run").split("Scheduling")[1]


def test_a_flag_reads_its_pwdeploy_variable_in_every_command_that_has_it() -> None:
    """PWDEPLOY_NAMESPACE once set submit's namespace but not status's or list's."""
    from pwdeploy.cli.options import FIELD_OF_PARAM

    read: dict[str, dict[str, str | None]] = {}
    for argv, command in _every_command(cli):
        for param in command.params:
            if not isinstance(param, click.Option):
                continue
            field = FIELD_OF_PARAM.get(param.name or "")
            envvar = field.env_name if field is not None else param.envvar
            for flag in (o for o in param.opts if o.startswith("--")):
                read.setdefault(flag, {})[" ".join(argv)] = envvar if isinstance(envvar, str) else None
    uneven = {flag: by for flag, by in read.items() if len(set(by.values())) > 1}
    assert not uneven
    assert read["--namespace"]["status"] == read["--namespace"]["list"] == "PWDEPLOY_NAMESPACE"


@pytest.mark.parametrize(
    ("argv", "used"),
    [
        (("render",), ["--mtc", "--mtc-backup-bucket"]),
        (("preflight",), ["--mtc", "--mtc-backup-bucket"]),
        (("submit",), ["--mtc"]),
        (("local", "run"), ["--mtc", "--mtc-backup-steps", "--share-process-namespace"]),
        (("sidecar", "build"), ["--mtc"]),
    ],
)
def test_help_never_lists_a_flag_the_command_reads_as_unused(
    runner: CliRunner, argv: tuple[str, ...], used: list[str]
) -> None:
    """render pins the MTC volume, preflight checks its bucket, local run serves its stand-in and plays main's PID,
    sidecar build's import test wants orbax with MTC: none of these flags is 'accepted; not used'."""
    unused = _help(runner, *argv).split("Other job flags")[-1].split("Example:")[0]
    assert not [flag for flag in used if f"{flag}," in unused or f"{flag}\n" in unused], unused
