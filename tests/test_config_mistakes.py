"""Config mistakes a new user makes: one line naming the field and the fix, exit 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from pwdeploy import envcontract
from pwdeploy.cli import cli
from pwdeploy.config.main_env import RESERVED_ENV, check_not_reserved
from pwdeploy.errors import ConfigError
from tests.conftest import REPO

EXAMPLE = str(REPO / "examples" / "data_parallel" / "job.yaml")


def test_every_variable_pointing_jax_at_the_proxy_is_reserved() -> None:
    for name in envcontract.proxy_env():
        assert name in RESERVED_ENV
        with pytest.raises(ConfigError):
            check_not_reserved(name, f"main.env.{name}")


@pytest.mark.parametrize("flag", ["--env", "--secret-env"], ids=["literal", "secret"])
@pytest.mark.parametrize("name", sorted(envcontract.proxy_env().keys() - {"JAX_PLATFORMS"}))
def test_main_env_cannot_override_what_pwdeploy_sets(runner: CliRunner, jax_version: str, flag: str, name: str) -> None:
    value = "my-secret/key" if flag == "--secret-env" else "1"
    result = runner.invoke(cli, ["render", "-f", EXAMPLE, flag, f"{name}={value}"])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    field = "main.env" if flag == "--env" else "main.secret_env"
    assert result.stderr.startswith(f"error: {field}.{name}: is set by pwdeploy"), result.stderr
    if name.startswith("IFRT_PROXY_"):
        assert "head.transfer_shm_size" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_bad_env_name_from_a_flag_is_reported_once(runner: CliRunner, jax_version: str) -> None:
    result = runner.invoke(cli, ["render", "-f", EXAMPLE, "--env", "A B=1", "--main-memory", "3Q"])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        "error: main.env.A B: is not a valid environment variable name (from --env)",
        "error: main.memory: '3Q' is not a Kubernetes quantity; use e.g. 8, 500m, 16Gi, 100G (from --main-memory)",
    ]


def test_headless_with_a_command_warns_that_it_does_not_run(runner: CliRunner, jax_version: str) -> None:
    result = runner.invoke(cli, ["render", "-f", EXAMPLE, "--headless"])
    assert result.exit_code == 0, result.output
    (warning,) = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert warning.startswith("warning: headless: main.command (python3 train.py --steps 200) does not run")
    bare = runner.invoke(
        cli, ["render", "--name", "nb", "--tpu-type", "v5p-8", "--gcs-scratch", "gs://bkt/s", "--headless"]
    )
    assert bare.exit_code == 0, bare.output
    assert "warning:" not in bare.stderr


@pytest.mark.parametrize("command", [["render"], ["local", "run"], ["image", "dockerfile"], ["preflight"]])
def test_no_config_hint_names_the_command_that_was_run(runner: CliRunner, command: list[str]) -> None:
    result = runner.invoke(cli, command)
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        "error: no job config given (-f FILE or flags)",
        f"  hint: e.g. pwdeploy {' '.join(command)} -f job.yaml",
    ]


def test_a_key_given_twice_is_refused_with_its_line(runner: CliRunner, jax_version: str, tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    text = (REPO / "examples" / "data_parallel" / "job.yaml").read_text(encoding="utf-8")
    config.write_text(text + "main:\n  cpu: 2\n", encoding="utf-8")  # a second main block would replace the first
    result = runner.invoke(cli, ["render", "-f", str(config)])
    assert result.exit_code == 2, result.output
    line = text.count("\n") + 1
    assert (
        result.stderr
        == f"error: {config}: invalid YAML at line {line}, column 1: 'main' appears twice in one mapping; keep one\n"
    )
    merged = tmp_path / "anchors.yaml"  # a YAML merge key is not a repeat
    merged.write_text(text.replace("main:\n", "base: &b {cpu: 8}\nmain:\n  <<: *b\n", 1), encoding="utf-8")
    assert "appears twice" not in runner.invoke(cli, ["render", "-f", str(merged)]).stderr


def test_an_env_entry_with_nothing_after_the_colon_says_so(runner: CliRunner, jax_version: str, tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    text = (REPO / "examples" / "data_parallel" / "job.yaml").read_text(encoding="utf-8")
    config.write_text(text.replace('TRAIN_SEED: "0"', "TRAIN_SEED:"), encoding="utf-8")
    result = runner.invoke(cli, ["render", "-f", str(config)])
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"error: main.env.TRAIN_SEED: must be a string, not a null value (nothing after the colon) (from {config})\n"
    )


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        (["--sidecar-image", "r.example/sc:1", "--worker-memory", "20Gi", "--sidecar-shm-size", "8Gi"],
         "sidecar.shm_size"),
        (["--image-registry", "https://us-docker.pkg.dev/cloud-tpu-v2-images/pathways"], "image_registry"),
        (["--head-node-pool", "CPU_pool"], "head.node_pool"),
        (["--num-slices", "4096"], "tpu.slices"),
        (["--secret-env", "HF_TOKEN=hf/my key"], "main.secret_env.HF_TOKEN"),
    ],
)  # fmt: skip
def test_grammar_and_fit_mistakes_are_config_errors(
    runner: CliRunner, jax_version: str, flags: list[str], field: str
) -> None:
    """Exit 2 naming the field, before any manifest is built (the sidecar's shared memory was a validation error,
    exit 3, after rendering)."""
    result = runner.invoke(cli, ["render", "-f", EXAMPLE, "--allow-version-mismatch", *flags])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {field}: ") and "Traceback" not in result.output
