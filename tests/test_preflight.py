"""Preflight verdicts, roles, report rendering and GCS location parsing: pure functions, no GCS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pwdeploy.config import GcsPath, parse_gcs
from pwdeploy.errors import ConfigError
from pwdeploy.gcs import iam as perms
from pwdeploy.gcs.facts import BucketFacts, BucketMeta, IamAnswer, ProbeOutcome
from pwdeploy.gcs.storage_client import GcsFailure
from pwdeploy.preflight.gcs import by_bucket, check_region
from pwdeploy.preflight.gcs_evaluate import Context, evaluate
from pwdeploy.report import PreflightReport, PreflightRow, Status
from tests.gcs_emulator import free_port

SCRATCH = GcsPath("bkt", "pw/scratch")
HLO = GcsPath("bkt", "pw/hlo")
CTX = Context(enable_olm=True, region="us-central1", member="serviceAccount:sa@p.iam.gserviceaccount.com")
ALL = frozenset(perms.COMPILE_CACHE)
META = BucketMeta("US-CENTRAL1", "region", 3)


def facts(
    meta: BucketMeta | None = META,
    granted: frozenset[str] | None = ALL,
    probes: dict[str, ProbeOutcome] | None = None,
    meta_error: GcsFailure | None = None,
) -> BucketFacts:
    if probes is None:
        probes = {p.uri: ProbeOutcome(p.uri + "/.probe", None) for p in (SCRATCH, HLO)}
    iam = IamAnswer(granted, None if granted is not None else "backend did not answer")
    return BucketFacts("bkt", meta, meta_error, iam, probes)


def rows_by_check(rows: list[PreflightRow]) -> dict[tuple[str, tuple[str, ...]], PreflightRow]:
    return {(r.id, r.fields): r for r in rows}


USES = {"storage.scratch": SCRATCH, "storage.hlo_dump": HLO}


def test_all_good_is_ok_everywhere_and_one_bucket_row_for_shared_bucket() -> None:
    rows = evaluate(facts(), USES, CTX)
    assert {r.status for r in rows} == {Status.OK}
    assert [r.id for r in rows].count("bucket") == 1
    assert [r.id for r in rows].count("region") == 1
    probes = [r for r in rows if r.id == "probe"]
    assert [(r.where, r.fields) for r in probes] == [
        ("gs://bkt/pw/scratch", ("storage.scratch",)),
        ("gs://bkt/pw/hlo", ("storage.hlo_dump",)),
    ]


def test_missing_bucket_update_names_role_and_olm_escape() -> None:
    rows = rows_by_check(evaluate(facts(granted=ALL - {perms.BUCKETS_UPDATE}), USES, CTX))
    scratch = rows[("permissions", ("storage.scratch",))]
    assert scratch.status is Status.FAILED
    assert scratch.message == "missing storage.buckets.update"
    assert scratch.fix
    assert "--role=roles/storage.legacyBucketOwner" in scratch.fix
    assert "--member=serviceAccount:sa@p.iam.gserviceaccount.com" in scratch.fix
    assert "storage.enable_olm: false" in scratch.fix
    assert rows[("permissions", ("storage.hlo_dump",))].status is Status.OK


def test_bucket_update_not_needed_when_olm_disabled() -> None:
    ctx = Context(enable_olm=False, region=None, member="MEMBER")
    rows = rows_by_check(evaluate(facts(granted=ALL - {perms.BUCKETS_UPDATE}), USES, ctx))
    assert rows[("permissions", ("storage.scratch",))].status is Status.OK


def test_locations_with_the_same_needs_share_a_permissions_row() -> None:
    uses = {"storage.scratch": SCRATCH, "storage.hlo_dump": HLO, "storage.profiles": GcsPath("bkt", "prof")}
    probes = {p.uri: ProbeOutcome(p.uri, None) for p in uses.values()}
    rows = [r for r in evaluate(facts(probes=probes), uses, CTX) if r.id == "permissions"]
    assert [r.fields for r in rows] == [("storage.scratch",), ("storage.hlo_dump", "storage.profiles")]


@pytest.mark.parametrize(
    ("missing", "roles"),
    [
        ({perms.BUCKETS_UPDATE}, ["roles/storage.legacyBucketOwner"]),
        ({perms.OBJECTS_GET}, ["roles/storage.objectAdmin"]),
        ({perms.BUCKETS_GET}, ["roles/storage.legacyBucketReader"]),
        ({perms.BUCKETS_GET, perms.OBJECTS_CREATE}, ["roles/storage.objectAdmin", "roles/storage.legacyBucketReader"]),
        (set(perms.COMPILE_CACHE), ["roles/storage.legacyBucketOwner", "roles/storage.objectAdmin"]),
    ],
)
def test_roles_cover_what_is_missing(missing: set[str], roles: list[str]) -> None:
    assert perms.roles_for(missing) == roles
    granted = set().union(*(grants for role, grants in perms.ROLES if role in roles))
    assert missing <= granted


def test_needs_per_field() -> None:
    assert perms.needed("storage.scratch", enable_olm=True) == perms.COMPILE_CACHE
    assert perms.BUCKETS_UPDATE not in perms.needed("storage.scratch", enable_olm=False)
    assert perms.needed("storage.checkpoints", enable_olm=True) == perms.CHECKPOINTS  # Orbax deletes old steps


def test_unanswered_iam_is_not_verified_never_ok() -> None:
    rows = [r for r in evaluate(facts(granted=None), USES, CTX) if r.id == "permissions"]
    assert rows and all(r.status is Status.NOT_VERIFIED for r in rows)
    assert "backend did not answer" in rows[0].message


@pytest.mark.parametrize(
    ("used", "olm", "status"),
    [(49, True, Status.OK), (50, True, Status.FAILED), (50, False, Status.OK), (0, True, Status.OK)],
)
def test_lifecycle_cap(used: int, olm: bool, status: Status) -> None:
    ctx = Context(enable_olm=olm, region="us-central1", member="MEMBER")
    granted = ALL if olm else ALL - {perms.BUCKETS_UPDATE}
    row = rows_by_check(evaluate(facts(BucketMeta("US-CENTRAL1", "region", used), granted), USES, ctx))[
        ("lifecycle", ("storage.scratch",))
    ]
    assert row.status is status
    assert f"{used} of 50" in row.message


def test_no_lifecycle_row_without_scratch() -> None:
    rows = evaluate(facts(), {"storage.hlo_dump": HLO}, CTX)
    assert "lifecycle" not in [r.id for r in rows]


@pytest.mark.parametrize(
    ("location", "region", "status"),
    [
        ("US-CENTRAL1", "us-central1", Status.OK),
        ("US", "us-central1", Status.WARN),
        ("EUROPE-WEST4", "us-central1", Status.WARN),
        ("US-CENTRAL1", None, Status.NOT_VERIFIED),
    ],
)
def test_region(location: str, region: str | None, status: Status) -> None:
    ctx = Context(enable_olm=True, region=region, member="MEMBER")
    rows = evaluate(facts(BucketMeta(location, "region", 0)), USES, ctx)
    (row,) = [r for r in rows if r.id == "region"]
    assert row.status is status
    assert row.fields == ("storage.scratch", "storage.hlo_dump")


@pytest.mark.parametrize(
    ("location", "region", "says"),
    [
        ("US", "us-central1", "the US multi-region, which includes us-central1: no cross-region charge"),
        ("EU", "us-central1", "bucket in EU (multi-region), cluster in us-central1: cross-region traffic"),
        ("ASIA", "asia-southeast1", "the ASIA multi-region, which includes asia-southeast1"),
    ],
)
def test_multi_region_bucket_that_spans_the_cluster_region(location: str, region: str, says: str) -> None:
    ctx = Context(enable_olm=True, region=region, member="MEMBER")
    rows = evaluate(facts(BucketMeta(location, "multi-region", 0)), USES, ctx)
    (row,) = [r for r in rows if r.id == "region"]
    assert row.status is Status.WARN and says in row.message and row.fix == f"use a bucket in {region}"


def test_missing_bucket_is_one_failed_row_with_create_command() -> None:
    missing = BucketFacts("bkt", None, GcsFailure("not_found", "404 Not Found"), None, {})
    (row,) = evaluate(missing, USES, CTX)
    assert (row.id, row.status) == ("bucket", Status.FAILED)
    assert row.fix == "create it in the cluster's region: gcloud storage buckets create gs://bkt --location=us-central1"


@pytest.mark.parametrize(("fields", "status"), [(USES, Status.FAILED), ({"storage.hlo_dump": HLO}, Status.OK)])
def test_unreadable_metadata_fails_only_the_compile_cache(fields: dict[str, GcsPath], status: Status) -> None:
    denied = facts(meta=None, meta_error=GcsFailure("denied", "403 Forbidden"))
    rows = rows_by_check(evaluate(denied, fields, CTX))
    assert rows[("bucket", tuple(fields))].status is status
    assert rows[("region", tuple(fields))].status is Status.NOT_VERIFIED


def test_probe_outcomes() -> None:
    left = GcsFailure("denied", "403 delete denied")
    probes = {
        SCRATCH.uri: ProbeOutcome(SCRATCH.uri + "/.p", "read", GcsFailure("denied", "403 Forbidden")),
        HLO.uri: ProbeOutcome(HLO.uri + "/.p", None, None, left),
    }
    rows = rows_by_check(evaluate(facts(probes=probes), USES, CTX))
    read = rows[("probe", ("storage.scratch",))]
    assert read.status is Status.FAILED and "cannot read it back" in read.message
    assert read.fix and "roles/storage.objectAdmin" in read.fix
    undeleted = rows[("probe", ("storage.hlo_dump",))]
    assert undeleted.status is Status.WARN  # the compile cache needs no delete permission
    assert undeleted.fix == "remove it: gcloud storage rm gs://bkt/pw/hlo/.p"


def test_report_failed_table_and_json() -> None:
    results = (
        PreflightRow("bucket", Status.OK, "gs://b", "exists", fields=("storage.scratch",)),
        PreflightRow("region", Status.WARN, "gs://b", "far away", "move it", fields=("storage.scratch",)),
        PreflightRow("permissions", Status.NOT_VERIFIED, "gs://b", "no answer", fields=("storage.scratch",)),
    )
    report = PreflightReport(results, principal="me")
    assert not report.failed  # warnings and not verified do not fail
    data = json.loads(json.dumps(report.as_json()))
    assert data["summary"] == {"ok": 1, "warn": 1, "failed": 0, "not verified": 1}
    assert data["checks"][1] == {
        # the one shape of every finding (docs/output.md)
        "id": "region",
        "severity": "warning",
        "where": "gs://b",
        "message": "far away",
        "fix": "move it",
        "source": None,
        "count": 1,
        # and preflight's own keys from before it (a contract)
        "location": "gs://b",
        "fields": ["storage.scratch"],
        "check": "region",
        "status": "warn",
        "detail": "far away",
    }
    assert [row["severity"] for row in data["checks"]] == ["info", "warning", "warning"]
    assert data["checks"][0]["fix"] is None  # nothing to do
    table = report.format_table().splitlines()
    assert table[0].split() == ["LOCATION", "CHECK", "STATUS", "DETAIL"]
    assert table[2].split()[:4] == ["gs://b", "(scratch)", "region", "warn"]
    assert table[3].strip() == "fix: move it"
    assert "not verified" in table[4]
    failing = PreflightReport((*results, PreflightRow("probe", Status.FAILED, "gs://b", "no")))
    assert failing.failed and failing.as_json()["failed"] is True


def test_empty_report() -> None:
    report = PreflightReport(())
    assert not report.failed
    assert "nothing to check" in report.format_table()


def test_by_bucket_groups_in_config_order() -> None:
    locations = {"storage.scratch": SCRATCH, "storage.profiles": GcsPath("other", ""), "storage.hlo_dump": HLO}
    assert by_bucket(locations) == {
        "bkt": {"storage.scratch": SCRATCH, "storage.hlo_dump": HLO},
        "other": {"storage.profiles": GcsPath("other", "")},
    }


@pytest.mark.parametrize(
    ("given", "expected"),
    [("us-central1", "us-central1"), (" EUROPE-WEST4 ", "europe-west4"), (None, None), ("", None)],
)
def test_region_values(given: str | None, expected: str | None) -> None:
    assert check_region(given) == expected


@pytest.mark.parametrize(
    ("given", "hint"), [("us-central1-a", "us-central1, not the zone"), ("mars", "`region=us-central1`")]
)
def test_bad_region_names_the_argument(given: str, hint: str) -> None:
    with pytest.raises(ConfigError) as caught:
        check_region(given)
    assert caught.value.field == "region" and caught.value.exit_code == 2
    assert hint in str(caught.value)


# ------------------------------------------------------------------------------ gs:// parsing (config.parse_gcs)


@pytest.mark.parametrize(
    ("uri", "bucket", "prefix"),
    [
        ("gs://bkt", "bkt", ""),
        ("gs://bkt/", "bkt", ""),
        ("gs://bkt/a/b/", "bkt", "a/b"),
        ("gs://my.bucket_name-1/x", "my.bucket_name-1", "x"),
        (" gs://bkt/p ", "bkt", "p"),
        ("gs://" + "a" * 63, "a" * 63, ""),
        ("gs://" + ".".join(["a" * 63] * 3), ".".join(["a" * 63] * 3), ""),
    ],
)
def test_parse_gcs_accepts(uri: str, bucket: str, prefix: str) -> None:
    assert parse_gcs(uri, "storage.scratch") == GcsPath(bucket, prefix)


@pytest.mark.parametrize(
    "uri",
    [
        "s3://bkt/x",
        "gs://",
        "gs://ab",
        "gs://Bkt/x",
        "gs://-bkt",
        "gs://bkt-",
        "gs://bkt//x",
        "gs://a..b",
        "gs://bkt x",
        "bkt/x",
        "gs:/bkt",
        42,
        None,
        "gs://" + "a" * 64,
        "gs://" + "a" * 64 + ".com",
        "gs://goog-bucket",
        "gs://192.168.5.4",
        "gs://bkt/a\x00b",
    ],
)
def test_parse_gcs_rejects(uri: object) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_gcs(uri, "storage.hlo_dump")
    assert caught.value.field == "storage.hlo_dump" and caught.value.exit_code == 2
    assert repr(uri) in str(caught.value)


NO_ADC_PREFLIGHT = """
import json
from pwdeploy.config import load_job
from pwdeploy.preflight import run_preflight

values = {"name": "pf", "tpu.type": "v5p-8", "main.image": "r/i:1", "main.command": "x",
          "storage.scratch": "gs://bkt/s", "storage.profiles": "gs://other/p"}
report = run_preflight(load_job(None, values, installed_jax=lambda: "0.10.2"), check_images=False)
rows = [[r.id, r.status.value, list(r.fields), r.message, r.fix] for r in report.results]
print(json.dumps({"failed": report.failed, "rows": rows}))
"""


def test_no_application_default_credentials_is_a_failed_row(tmp_path: Path) -> None:
    # In a fresh process: google-auth reads NO_GCE_CHECK when it is imported (it skips ~3 s of metadata pings).
    env = {k: v for k, v in os.environ.items() if k not in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS")}
    env |= {
        "CLOUDSDK_CONFIG": str(tmp_path),  # no gcloud ADC file here
        "GCE_METADATA_HOST": f"127.0.0.1:{free_port()}",  # and no metadata server
        "GCE_METADATA_IP": f"127.0.0.1:{free_port()}",
        "NO_GCE_CHECK": "true",
    }
    done = subprocess.run(
        [sys.executable, "-c", NO_ADC_PREFLIGHT], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    ((check, status, fields, detail, fix),) = report["rows"]
    assert (check, status, fields) == ("credentials", Status.FAILED.value, ["storage.scratch", "storage.profiles"])
    assert "no Application Default Credentials" in detail
    assert "gcloud auth application-default login" in fix
    assert report["failed"] is True


def test_long_locations_get_their_own_line_and_references_stay_whole() -> None:
    image = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:20260730-jax_0.10.2"
    digest = "sha256:" + "ab" * 32
    rows = (
        PreflightRow("bucket", Status.OK, "gs://b", "exists", fields=("storage.scratch",)),
        PreflightRow("image", Status.OK, image, f"exists, digest {digest}", fields=("images.server",)),
    )
    lines = PreflightReport(rows).format_table(width=100).splitlines()
    assert lines[1].split()[:3] == ["gs://b", "(scratch)", "bucket"]
    assert lines[2] == f"{image} (images.server)"
    assert lines[3].split() == ["image", "ok", "exists,", "digest"] and lines[4].strip() == digest
    assert lines[0].index("CHECK") == lines[3].index("image") <= 100 // 3 + 2
