"""`pwdeploy render` and `pwdeploy schema` through click's CliRunner."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from pwdeploy.cli import cli
from tests.conftest import REPO

EXAMPLE = str(REPO / "examples" / "data_parallel" / "job.yaml")
FLAGS = [
    "--name", "demo", "--tpu-type", "v5p-8", "--num-slices", "2", "--image", "us-docker.pkg.dev/p/r/train:1",
    "--command", "python3 train.py", "--gcs-scratch", "gs://my-bucket/pathways",
]  # fmt: skip


def test_render_from_flags(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["render", *FLAGS, "--no-validate"])
    assert result.exit_code == 0, result.output
    (obj,) = yaml.safe_load_all(result.stdout)
    assert obj["kind"] == "JobSet" and obj["metadata"]["name"] == "demo"
    worker = obj["spec"]["replicatedJobs"][1]
    assert worker["replicas"] == 2


def test_render_json_and_flags_over_file(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["render", "-f", EXAMPLE, "-o", "json", "--num-slices", "3", "--no-validate"])
    assert result.exit_code == 0, result.output
    obj = json.loads(result.stdout)
    assert obj["spec"]["replicatedJobs"][1]["replicas"] == 3


def test_retry_exit_codes_from_the_repeated_flag_join_75_in_the_heads_pod_failure_policy(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["render", "-f", EXAMPLE, "--retry-exit-code", "76", "--retry-exit-code", "3"])
    assert result.exit_code == 0, result.output
    head = yaml.safe_load(result.stdout)["spec"]["replicatedJobs"][0]["template"]["spec"]
    fail_job = head["podFailurePolicy"]["rules"][1]
    assert fail_job["action"] == "FailJob" and fail_job["onExitCodes"]["values"] == [0, 3, 75, 76, 143]
    result = runner.invoke(cli, ["render", "-f", EXAMPLE], env={"PWDEPLOY_RETRY_EXIT_CODE": "80,81"})
    head = yaml.safe_load(result.stdout)["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert head["podFailurePolicy"]["rules"][1]["onExitCodes"]["values"] == [0, 75, 80, 81, 143]


def test_env_defaults(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["render", "-f", EXAMPLE, "--no-validate"], env={"PWDEPLOY_NAMESPACE": "team-a"})
    assert yaml.safe_load(result.stdout)["metadata"]["namespace"] == "team-a"


def test_output_dir(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["render", "-f", EXAMPLE, "--output-dir", str(tmp_path / "out"), "--no-validate"])
    assert result.exit_code == 0, result.output
    (written,) = (tmp_path / "out").iterdir()
    assert written.name == "jobset-dp-example.yaml"
    assert written.stat().st_mode & 0o044 == 0o044  # readable by others, like any file a user writes for review


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--num-slices", "0"], "tpu.slices: must be an integer >= 1, not '0' (from --num-slices)"),
        (["--num-slices", "-2"], "tpu.slices"),
        (["--tpu-type", "v6e-12"], "v6e-12 is not a v6e size; valid: v6e-1"),
        (["--shm-size", "64Gi", "--main-memory", "32Gi"], "main.shm_size: 64Gi does not fit inside main.memory"),
        (["--shm-size", "lots"], "main.shm_size: 'lots' is not a Kubernetes quantity"),
        (["--data-workers", "99", "--main-cpu", "8"], "main.data_workers: 99 exceeds"),
        (["--xla-flag", "xla_foo=1"], "xla_flags: 'xla_foo=1' is not a flag"),
        (["--gcs-scratch", "gs:/bucket"], "storage.scratch: 'gs:/bucket' is not a GCS location"),
        (["--hlo-dump", "/tmp/hlo"], "storage.hlo_dump"),
        (["--image", "train:latest"], "main.image: 'train:latest' is not pinned"),
        (["--env", "NOEQUALS"], "main.env: 'NOEQUALS' is not KEY=VALUE"),
        (["--pathways-version", "0.9.1"], "does not match the installed jax 0.10.2"),
        (["--name", "x" * 23], "coordinator=<name>-pathways-head-0-0.<name> (the coordinator's address"),
        (["--name", "x" * 23], "so the name can be at most 22 characters"),
        (["--name", "Demo"], "name: 'Demo' is not a DNS-1035 label"),
    ],
)
def test_bad_flags_exit_2_with_the_field(runner: CliRunner, args: list[str], message: str) -> None:
    result = runner.invoke(cli, ["render", *FLAGS, *args, "--no-validate"])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: [x\n", "invalid YAML"),
        ("[1, 2]\n", "top level must be a mapping"),
        ("name: demo\ntpu: v5p-8\n", "tpu: must be a mapping of fields, not a string"),
        ("name: demo\nmain: {imgae: x:1}\n", "main.imgae: unknown field (did you mean 'image'?)"),
        ("name: demo\ntpu: {type: v5p-8, slices: -1}\n", "tpu.slices: must be an integer >= 1"),
        ("name: demo\nmain: {cpu: 0}\n", "main.cpu: 0 must be greater than zero"),
    ],
)
def test_bad_files_exit_2(runner: CliRunner, tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    result = runner.invoke(cli, ["render", "-f", str(path), "--no-validate"])
    assert result.exit_code == 2
    assert message in result.stderr


def test_errors_name_the_file_that_set_the_value(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("name: demo\nnamespace: Team\ntpu: {type: v5p-8}\n")
    result = runner.invoke(cli, ["render", "-f", str(path)])
    assert "namespace: 'Team' is not a DNS-1123 label" in result.stderr and f"(from {path})" in result.stderr
    result = runner.invoke(cli, ["render", "-f", str(path), "--namespace", "Other"])
    assert "(from --namespace)" in result.stderr


def test_missing_file_and_debug(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["render", "-f", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2 and "does not exist" in result.stderr and "Traceback" not in result.stderr
    result = runner.invoke(cli, ["--debug", "render", "-f", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2 and "Traceback" in result.stderr


def test_output_dir_not_written_on_error(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(cli, ["render", *FLAGS, "--num-slices", "0", "--output-dir", str(out)])
    assert result.exit_code == 2 and not out.exists()


def test_schema_describes_every_field(runner: CliRunner) -> None:
    from pwdeploy.config.fields import FIELDS

    schema = json.loads(runner.invoke(cli, ["schema"]).stdout)
    for field in FIELDS:
        node = schema["properties"]
        for part in field.path.split("."):
            node = node[part]["properties"] if "properties" in node.get(part, {}) else node
        assert field.key in node, field.path


def test_schema_accepts_the_example() -> None:
    import jsonschema

    from pwdeploy.config.json_schema import job_schema

    jsonschema.validate(yaml.safe_load(Path(EXAMPLE).read_text()), job_schema())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "x", "tpu": {"typo": 1}}, job_schema())


def test_help_and_render_do_not_import_heavy_modules() -> None:
    code = (
        "import sys\n"
        "from pwdeploy.cli import cli\n"
        "for argv in (['--help'], ['render', '--help'], ['render', '-f', %r], ['validate', '--help']):\n"
        "    try:\n"
        "        cli.main(argv)\n"
        "    except SystemExit as e:\n"
        "        assert e.code == 0, (argv, e.code)\n"
        "heavy = ('jax', 'kubernetes', 'google.cloud.storage', 'pathwaysutils', 'docker')\n"
        "heavy = [m for m in heavy if m in sys.modules]\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    ).replace("%r", repr(EXAMPLE))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert "HEAVY []" in result.stderr, result.stderr


def test_schema_checks_image_references() -> None:
    import jsonschema

    from pwdeploy.config.json_schema import job_schema

    schema = job_schema()
    jsonschema.validate({"name": "x", "main": {"image": "us-docker.pkg.dev/p/r/train:1"}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "x", "main": {"image": "train:1 extra"}}, schema)


def test_file_flag_forms_parse_as_before(runner: CliRunner, jax_version: str) -> None:
    """``-f`` is matched at once by render's parser (no "did you mean" list built for it): ``-f FILE`` and
    ``--file FILE`` as before, ``-f=FILE`` as kubectl takes it, a missing value and an unknown flag as click says."""
    example = str(EXAMPLE)
    outputs = {runner.invoke(cli, ["render", *form]).stdout for form in (["-f", example], ["--file", example])}
    assert len(outputs) == 1 and "kind: JobSet" in next(iter(outputs))
    assert runner.invoke(cli, ["render", f"-f={example}"]).stdout in outputs
    missing = runner.invoke(cli, ["render", "-f"])
    assert missing.exit_code == 2 and "Option '-f' requires an argument" in missing.stderr
    unknown = runner.invoke(cli, ["render", "-f", example, "--num-slice", "2"])
    assert unknown.exit_code == 2 and "'--num-slices'" in unknown.stderr  # click's close matches, as before


def _commands(group: click.Group, ctx: click.Context, prefix: str = "") -> list[tuple[str, click.Command]]:
    found = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            found += _commands(command, ctx, f"{prefix}{name} ")
        else:
            found.append((f"{prefix}{name}", command))
    return found


def test_every_command_taking_a_job_file_parses_its_flag_as_render_does(runner: CliRunner) -> None:
    """``-f=FILE`` is kubectl's form: each command with the job flags takes it as render does (``local env`` once
    read it as the file ``=FILE``) and builds no "did you mean" list for ``-f``."""
    from pwdeploy.cli.options import JobCommand

    with click.Context(cli) as ctx:
        commands = _commands(cli, ctx)
    taking = [name for name, command in commands if any("--file" in p.opts for p in command.params)]
    assert {"render", "check", "preflight", "submit", "local run", "local env"} <= set(taking)
    assert [name for name, command in commands if name in taking and not isinstance(command, JobCommand)] == []
    example = str(EXAMPLE)
    spaced = runner.invoke(cli, ["local", "env", "-f", example])
    joined = runner.invoke(cli, ["local", "env", f"-f={example}"])
    assert spaced.exit_code == joined.exit_code == 0, joined.output
    assert joined.stdout == spaced.stdout and "export PWDEPLOY_JOB_NAME=" in joined.stdout
