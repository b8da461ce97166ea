"""Job-level warnings: what they catch, what they leave alone, and how render prints them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pwdeploy.advice import job_warnings
from pwdeploy.cli import cli
from pwdeploy.config import JobConfig, load_job
from tests.kube_stub import StubKubeApiServer

BASE = {
    "name": "demo",
    "tpu.type": "v6e-16",
    "main.image": "r.example/p/img:1",
    "main.command": "python3 train.py",
    "storage.scratch": "gs://bucket/scratch",
}
FLAGS = [
    "--name", "demo", "--tpu-type", "v6e-16", "--image", "r.example/p/img:1", "--command", "python3 t.py",
    "--gcs-scratch", "gs://bucket/scratch", "--pathways-version", "0.10.2", "--allow-version-mismatch",
]  # fmt: skip


def _job(**overrides: Any) -> JobConfig:
    return load_job(None, {**BASE, **overrides}, installed_jax=lambda: "0.10.2")


def test_a_plain_job_has_no_warnings() -> None:
    assert job_warnings(_job(**{"main.env": {"WANDB_MODE": "offline", "MONKEY": "1"}})) == []


def test_worker_memory_through_kueue() -> None:
    assert job_warnings(_job(**{"tpu.worker_memory": "200Gi"})) == []
    assert job_warnings(_job(**{"scheduling.queue": "tpu-queue"})) == []
    (warning,) = job_warnings(_job(**{"tpu.worker_memory": "200Gi", "scheduling.queue": "tpu-queue"}))
    assert warning.startswith("tpu.worker_memory (200Gi) with scheduling.queue (tpu-queue)")
    assert "--worker-memory" in warning


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "WANDB_API_KEY",
        "DB_PASSWORD",
        "AWS_SECRET",
        "GCP_CREDENTIALS",
        "TOKEN",
        "openai_api_key",
        "GITHUB_PAT",
        "OPENAI_APIKEY",
        "APIKEY_PROD",
        "MY_APIKEY_FILE",
        "AWS_CREDENTIALS",
    ],
)
def test_literal_credentials_point_to_secret_env(name: str) -> None:
    (warning,) = job_warnings(_job(**{"main.env": {name: "s3cr3t"}}))
    assert warning.startswith(f"main.env.{name} looks like a credential")
    assert f"--secret-env {name}=SECRET/KEY" in warning and "s3cr3t" not in warning


@pytest.mark.parametrize("name", ["HF_TOKEN", "GITHUB_PAT", "SERVICE_APIKEY", "AWS_CREDENTIALS"])
def test_literal_credentials_in_worker_env_are_warned_about(name: str) -> None:
    (warning,) = job_warnings(_job(worker_env={name: "s3cr3t"}))
    assert warning.startswith(f"worker_env.{name} (--worker-env) looks like a credential")
    assert "s3cr3t" not in warning


@pytest.mark.parametrize("name", ["PATH_PREFIX", "KEYBOARD", "PATIENCE", "MONKEY", "TPU_STDERR_LOG_LEVEL"])
def test_names_that_only_contain_a_credential_word_are_not_warned_about(name: str) -> None:
    assert job_warnings(_job(**{"main.env": {name: "1"}}, worker_env={name: "1"})) == []


def test_render_warns_about_worker_env_credentials_on_stderr() -> None:
    result = CliRunner().invoke(cli, ["render", *FLAGS, "--worker-env", "GITHUB_PAT=ghp_x"])
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("warning: worker_env.GITHUB_PAT (--worker-env) looks like a credential")
    assert "ghp_x" not in result.stderr


def test_secret_env_is_not_warned_about() -> None:
    assert job_warnings(_job(**{"main.secret_env": {"HF_TOKEN": "hf/token"}})) == []


def test_gcs_dump_flag_points_to_storage_hlo_dump() -> None:
    (warning,) = job_warnings(_job(xla_flags=["--xla_dump_to=gs://bucket/hlo"]))
    assert "storage.hlo_dump" in warning and "--hlo-dump" in warning
    assert job_warnings(_job(xla_flags=["--xla_dump_to=/tmp/hlo"])) == []


def test_render_prints_warnings_on_stderr_only() -> None:
    result = CliRunner().invoke(
        cli, ["render", *FLAGS, "--worker-memory", "200Gi", "--queue", "q", "--env", "X_TOKEN=1"]
    )
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert [line.split(" ")[1] for line in lines] == ["tpu.worker_memory", "main.env.X_TOKEN"]
    assert all(line.startswith("warning: ") for line in lines)
    assert "warning" not in result.stdout and result.stdout.startswith("---\n")


def test_submit_prints_the_same_warnings_against_the_stub_api_server(tmp_path: Path) -> None:
    """Against StubKubeApiServer (a loopback stub, not an API server): warnings come before anything is sent."""
    with StubKubeApiServer(namespaces=("default",)) as stub:
        kubeconfig = stub.write_kubeconfig(tmp_path / "kubeconfig", {"stub": ("stub-token", None)}, current="stub")
        args = ["submit", *FLAGS, "--env", "X_TOKEN=1", "--kubeconfig", str(kubeconfig), "--skip-preflight",
                "--dry-run=client"]  # fmt: skip
        result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    announced, warning = result.stderr.splitlines()[:2]  # a write names its context and server first
    assert announced == f"pwdeploy: context stub, server {stub.url}"
    assert warning.startswith("warning: main.env.X_TOKEN looks like a credential")
    assert stub.writes() == []


def test_flex_start_with_a_run_duration_warns_of_the_node_label_it_selects() -> None:
    base = {
        "name": "flex",
        "tpu.type": "v5p-8",
        "main.image": "us-docker.pkg.dev/p/r/train:1",
        "main.command": "python3 train.py",
        "storage.scratch": "gs://bucket-a/scratch",
        "tpu.capacity": "flex-start",
    }
    plain = load_job(None, base, installed_jax=lambda: "0.10.2")
    timed = load_job(None, {**base, "tpu.max_run_duration": "24h"}, installed_jax=lambda: "0.10.2")
    assert not [w for w in job_warnings(plain) if "max_run_duration" in w]
    (warning,) = [w for w in job_warnings(timed) if "max_run_duration" in w]
    assert "cloud.google.com/gke-max-run-duration-seconds=86400" in warning and "--max-run-duration" in warning


def test_main_as_pid_1_is_named_with_what_a_stop_does_to_it() -> None:
    (warning,) = job_warnings(_job(**{"head.share_process_namespace": False}))
    assert warning.startswith("head.share_process_namespace is off: main is PID 1 of its container")
    assert "(exit 137) and fails the JobSet" in warning and "stop_on_sigterm" in warning
    assert job_warnings(_job(**{"head.share_process_namespace": False, "headless": True, "main.command": None})) == []


def test_render_prints_the_pid_1_warning(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["render", *FLAGS, "--no-share-process-namespace"])
    assert result.exit_code == 0, result.output
    assert "warning: head.share_process_namespace is off: main is PID 1" in result.stderr
