"""End-to-end: submit, list, status and delete against a real cluster (opt-in).

Set PWDEPLOY_E2E_KUBECONFIG to a kubeconfig whose cluster runs the JobSet controller (kind + JobSet, or GKE).
Optional: PWDEPLOY_E2E_CONTEXT, PWDEPLOY_E2E_NAMESPACE (default "default"), PWDEPLOY_E2E_TPU_TYPE (v5p-8),
PWDEPLOY_E2E_IMAGE (a pinned image), PWDEPLOY_E2E_SCRATCH (gs://...; without it the GCS preflight is skipped),
PWDEPLOY_E2E_WAIT_RUNNING=1 to wait for every pod to run (needs TPU node pools and a CPU pool for the head).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from pwdeploy.cli import cli

KUBECONFIG = os.environ.get("PWDEPLOY_E2E_KUBECONFIG")
if not KUBECONFIG:
    pytest.skip(
        "PWDEPLOY_E2E_KUBECONFIG is not set: the end-to-end suite needs a real cluster with JobSet (see README)",
        allow_module_level=True,
    )

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
NAMESPACE = os.environ.get("PWDEPLOY_E2E_NAMESPACE", "default")
CLUSTER = ["--kubeconfig", KUBECONFIG] + (
    ["--context", os.environ["PWDEPLOY_E2E_CONTEXT"]] if os.environ.get("PWDEPLOY_E2E_CONTEXT") else []
)


@pytest.fixture(scope="module")
def name() -> Iterator[str]:
    job_name = f"e2e-{secrets.token_hex(3)}"
    yield job_name
    CliRunner().invoke(cli, ["delete", job_name, "-n", NAMESPACE, "--yes", *CLUSTER])  # leave nothing behind


def job_flags(name: str, slices: int = 1) -> list[str]:
    scratch = os.environ.get("PWDEPLOY_E2E_SCRATCH")
    flags = [
        "--name", name, "--namespace", NAMESPACE, "--tpu-type", os.environ.get("PWDEPLOY_E2E_TPU_TYPE", "v5p-8"),
        "--num-slices", str(slices), "--image", os.environ.get("PWDEPLOY_E2E_IMAGE", "python:3.11.9-slim"),
        "--command", "python3 -c 'print(1)'", "--gcs-scratch", scratch or "gs://pwdeploy-e2e-unset/scratch",
    ]  # fmt: skip
    return flags if scratch else [*flags, "--skip-preflight"]


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_server_dry_run_is_admitted_and_persists_nothing(name: str) -> None:
    code, out = run("submit", *job_flags(name), *CLUSTER, "--dry-run=server")
    assert code == 0, out
    assert "the API server accepted it" in out
    code, out = run("status", name, "-n", NAMESPACE, *CLUSTER)
    assert code == 4 and "not found" in out


def test_submit_resubmit_list_status_delete(name: str) -> None:
    code, out = run("submit", *job_flags(name), *CLUSTER)
    assert code == 0 and ") created" in out, out
    code, out = run("submit", *job_flags(name), *CLUSTER)
    assert code == 0 and ") unchanged" in out, out
    code, out = run("submit", *job_flags(name, slices=2), *CLUSTER)
    assert code == 4 and "different config" in out, out
    code, out = run("list", "-n", NAMESPACE, *CLUSTER)
    assert code == 0 and name in out, out
    code, out = run("status", name, "-n", NAMESPACE, *CLUSTER)
    assert code == 0 and f"jobset {name}" in out, out
    if os.environ.get("PWDEPLOY_E2E_WAIT_RUNNING") == "1":
        code, out = run("submit", *job_flags(name), *CLUSTER, "--wait", "--timeout", "900")
        assert code == 0 and ("is Running" in out or "is Completed" in out), out
    code, out = run("delete", name, "-n", NAMESPACE, "--yes", "--wait", *CLUSTER)
    assert code == 0 and f"jobset {name} deleted" in out, out
