"""Preflight against a real GCS JSON API (gcp-storage-emulator) through the official client."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import pytest
from click.testing import CliRunner

from pwdeploy.cli import cli
from pwdeploy.config import JobConfig, load_job
from pwdeploy.gcs import storage_client as gcs_client
from pwdeploy.preflight import run_preflight
from pwdeploy.report import PreflightReport, Status
from tests import gcs_emulator as emulator
from tests.gcs_emulator import GcsEmulator, free_port

# The emulator's fixtures, made visible to this module's tests.
gcs_emulator = emulator.gcs_emulator
emulator_env = emulator.emulator_env

pytestmark = pytest.mark.gcs

BASE = {"name": "pf", "tpu.type": "v5p-8", "main.image": "r/img:1", "main.command": "python3 train.py"}


def job(**storage: Any) -> JobConfig:
    values = {**BASE, **{f"storage.{key}": value for key, value in storage.items()}}
    return load_job(None, values, installed_jax=lambda: "0.10.2")


def gcs_preflight(job: JobConfig, **options: Any) -> PreflightReport:
    """The GCS rows only: these tests are about buckets, not the images the job names."""
    return run_preflight(job, check_images=False, **options)


def rows(report: PreflightReport) -> dict[tuple[str, str], Status]:
    return {(r.id, r.where): r.status for r in report.results}


def lifecycle(rules: int) -> dict[str, Any]:
    return {"lifecycle": {"rule": [{"action": {"type": "Delete"}, "condition": {"age": n + 1}} for n in range(rules)]}}


def test_existing_bucket_checks_and_leaves_nothing_behind(emulator_env: GcsEmulator) -> None:
    bucket = emulator_env.create_bucket()
    report = gcs_preflight(
        job(scratch=f"gs://{bucket}/pw/scratch", hlo_dump=f"gs://{bucket}/pw/hlo", checkpoints=f"gs://{bucket}")
    )
    found = rows(report)
    assert found[("bucket", f"gs://{bucket}")] is Status.OK
    assert found[("lifecycle", f"gs://{bucket}")] is Status.OK
    for uri in (f"gs://{bucket}/pw/scratch", f"gs://{bucket}/pw/hlo", f"gs://{bucket}"):
        assert found[("probe", uri)] is Status.OK
    assert not report.failed
    assert emulator_env.list_objects(bucket) == []


def test_emulator_iam_is_measured_as_not_verified(emulator_env: GcsEmulator) -> None:
    # The emulator answers testIamPermissions by granting whatever is asked, a made-up permission included.
    bucket = emulator_env.create_bucket()
    report = gcs_preflight(job(scratch=f"gs://{bucket}/s", profiles=f"gs://{bucket}/p"))
    permission_rows = [r for r in report.results if r.id == "permissions"]
    assert len(permission_rows) == 2
    assert all(r.status is Status.NOT_VERIFIED for r in permission_rows)
    assert "made-up permission: it does not evaluate IAM" in permission_rows[0].message


def test_missing_bucket_fails(emulator_env: GcsEmulator) -> None:
    present = emulator_env.create_bucket()
    report = gcs_preflight(job(scratch=f"gs://{present}/s", profiles="gs://pwd-test-no-such-bucket/p"))
    missing = [r for r in report.results if r.where.startswith("gs://pwd-test-no-such-bucket")]
    assert [(r.id, r.status, r.fields) for r in missing] == [("bucket", Status.FAILED, ("storage.profiles",))]
    assert report.failed
    assert rows(report)[("probe", f"gs://{present}/s")] is Status.OK  # other buckets are still checked


@pytest.mark.parametrize(
    ("rules", "olm", "status"), [(49, True, Status.OK), (50, True, Status.FAILED), (50, False, Status.OK)]
)
def test_lifecycle_rules_counted(emulator_env: GcsEmulator, rules: int, olm: bool, status: Status) -> None:
    bucket = emulator_env.create_bucket()
    emulator_env.patch_bucket(bucket, lifecycle(rules))
    report = gcs_preflight(job(scratch=f"gs://{bucket}/s", enable_olm=olm))
    (row,) = [r for r in report.results if r.id == "lifecycle"]
    assert row.status is status
    assert row.message.startswith(f"{rules} of 50")
    assert report.failed is (status is Status.FAILED)


def test_bucket_location_against_region(emulator_env: GcsEmulator) -> None:
    near, far = emulator_env.create_bucket(), emulator_env.create_bucket()
    emulator_env.patch_bucket(near, {"location": "US-CENTRAL1", "locationType": "region"})
    report = gcs_preflight(job(scratch=f"gs://{near}/s", hlo_dump=f"gs://{far}/h"), region="us-central1")
    found = rows(report)
    assert found[("region", f"gs://{near}")] is Status.OK
    assert found[("region", f"gs://{far}")] is Status.WARN  # the emulator's default: multi-region US
    assert not report.failed  # warnings do not fail


class CountingClient:
    """The real emulator client, counting bucket-level calls; ``refuse_reads`` makes downloads fail with a 403."""

    def __init__(self, refuse_reads: bool = False) -> None:
        self.real = gcs_client.default_client()
        self.calls: Counter[str] = Counter()
        self.refuse_reads = refuse_reads

    def bucket(self, name: str) -> Any:
        return _CountingBucket(self.real.bucket(name), self)


class _CountingBucket:
    def __init__(self, bucket: Any, owner: CountingClient) -> None:
        self._bucket, self._owner = bucket, owner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._bucket, name)
        if name in ("reload", "test_iam_permissions"):
            self._owner.calls[name] += 1
        if name == "blob":
            return lambda blob_name: _RefusingBlob(attr(blob_name), self._owner)
        return attr


class _RefusingBlob:
    def __init__(self, blob: Any, owner: CountingClient) -> None:
        self._blob, self._owner = blob, owner

    def __getattr__(self, name: str) -> Any:
        self._owner.calls[f"blob.{name}"] += 1
        if name == "download_as_bytes" and self._owner.refuse_reads:
            from google.api_core.exceptions import Forbidden

            def refuse(**_: Any) -> bytes:
                raise Forbidden("refused by the test wrapper")

            return refuse
        return getattr(self._blob, name)


def test_shared_bucket_is_asked_once(emulator_env: GcsEmulator) -> None:
    bucket = emulator_env.create_bucket()
    counting = CountingClient()
    locations = {"scratch": f"gs://{bucket}/s", "hlo_dump": f"gs://{bucket}/h", "profiles": f"gs://{bucket}/h"}
    report = gcs_preflight(job(**locations), client_factory=lambda: counting)
    assert counting.calls["reload"] == 1
    assert counting.calls["test_iam_permissions"] == 2  # the needed set, then the made-up permission
    assert counting.calls["blob.upload_from_string"] == 2  # one probe per distinct location
    (probe,) = [r for r in report.results if r.id == "probe" and r.where.endswith("/h")]
    assert probe.fields == ("storage.hlo_dump", "storage.profiles")


def test_probe_object_deleted_when_read_back_is_refused_by_wrapper(emulator_env: GcsEmulator) -> None:
    bucket = emulator_env.create_bucket()
    report = gcs_preflight(job(scratch=f"gs://{bucket}/s"), client_factory=lambda: CountingClient(refuse_reads=True))
    (probe,) = [r for r in report.results if r.id == "probe"]
    assert probe.status is Status.FAILED and "cannot read it back" in probe.message
    assert report.failed
    assert emulator_env.list_objects(bucket) == []  # the real delete ran after the failure


@pytest.mark.slow
def test_unreachable_endpoint_fails_within_the_retry_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    report = gcs_preflight(job(scratch="gs://pwd-test-bucket/s", profiles="gs://pwd-test-other/p"))
    assert time.monotonic() - started < gcs_client.RETRY_SECONDS + 5  # the client's own retries end in time
    first, second = report.results
    assert (first.id, first.status) == ("bucket", Status.FAILED)
    assert "cannot reach GCS" in first.message
    assert (second.where, second.status) == ("gs://pwd-test-other", Status.NOT_VERIFIED)  # not waited for again


def test_cli_json_and_exit_codes(emulator_env: GcsEmulator) -> None:
    bucket = emulator_env.create_bucket()
    runner = CliRunner()
    closed = f"127.0.0.1:{free_port()}"  # a registry that does not answer, whatever network CI has
    flags = ["--name", "pf", "--tpu-type", "v5p-8", "--image", f"{closed}/img:1", "--command", "python3 t.py",
             "--server-image", f"{closed}/server:1", "--proxy-server-image", f"{closed}/proxy_server:1",
             "--pathways-version", "0.10.2", "--allow-version-mismatch", "--gcs-scratch"]  # fmt: skip
    good = runner.invoke(cli, ["preflight", *flags, f"gs://{bucket}/s", "-o", "json", "--region", "us-central1"])
    assert good.exit_code == 0, good.output
    data = json.loads(good.stdout)
    assert data["failed"] is False and data["summary"]["failed"] == 0
    assert {c["check"] for c in data["checks"]} == {"bucket", "permissions", "lifecycle", "region", "probe", "image"}
    # No registry answers there: the image rows are not verified, and do not fail the run.
    images = [c for c in data["checks"] if c["check"] == "image"]
    assert {c["status"] for c in images} == {"not verified"} and len(images) == 3

    bad = runner.invoke(cli, ["preflight", *flags, "gs://pwd-test-no-such-bucket/s"])
    assert bad.exit_code == 6
    table = " ".join(bad.stdout.split())
    assert (
        "does not exist" in table and "fix: create it in the cluster's region: gcloud storage buckets create" in table
    )
    assert "1 preflight check(s) failed" in bad.stderr

    zone = runner.invoke(cli, ["preflight", *flags, f"gs://{bucket}/s", "--region", "us-central1-b"])
    assert zone.exit_code == 2 and "--region" in zone.stderr


def test_emulator_fixture_starts_answers_and_stops() -> None:
    emulator = GcsEmulator()
    emulator.start()
    try:
        assert emulator.answers()
    finally:
        emulator.stop()
    assert emulator.process is not None and emulator.process.poll() is not None
    assert not emulator.answers()


def test_preflight_modules_do_not_import_the_gcs_client() -> None:
    code = "import sys, pwdeploy.preflight, pwdeploy.cli.preflight; print('google.cloud.storage' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
