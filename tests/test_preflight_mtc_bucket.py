"""mtc.backup_bucket and preflight's ``mtc-backup`` row: the bucket the CheckpointConfiguration backs up to has
hierarchical namespace, read as google-cloud-storage reads the bucket's JSON (``hierarchicalNamespace.enabled``)."""

from __future__ import annotations

from typing import Any

import pytest
from google.api_core import exceptions as api
from google.cloud.storage import Bucket

from pwdeploy.config import JobConfig
from pwdeploy.errors import ConfigError
from pwdeploy.preflight.gcs import check_gcs
from pwdeploy.preflight.mtc_bucket import mtc_backup_row
from pwdeploy.report import Status
from tests.kube_objects import small_job

MTC = {"mtc.enabled": True, "sidecar.image": "us-docker.pkg.dev/p/r/sidecar:1"}


class Answers:
    """A client whose buckets answer ``reload`` with the JSON GCS would return (or raise what it would)."""

    def __init__(self, **buckets: dict[str, Any] | Exception) -> None:
        self.buckets = buckets

    def bucket(self, name: str) -> Bucket:
        answer = self.buckets[name]
        bucket = Bucket(client=None, name=name)

        def reload(**_: Any) -> None:
            if isinstance(answer, Exception):
                raise answer
            bucket._properties = {"name": name, "location": "US-CENTRAL1", "locationType": "region", **answer}

        bucket.reload = reload
        return bucket


def job(bucket: str | None = "gs://mtc-backups", **more: Any) -> JobConfig:
    return small_job({**MTC, **({"mtc.backup_bucket": bucket} if bucket else {}), **more})


@pytest.mark.parametrize(
    ("answer", "status", "says"),
    [
        ({"hierarchicalNamespace": {"enabled": True}}, Status.OK, "has hierarchical namespace"),
        ({"hierarchicalNamespace": {"enabled": False}}, Status.FAILED, "has no hierarchical namespace"),
        ({}, Status.NOT_VERIFIED, "no hierarchicalNamespace"),
        (api.NotFound("no such bucket"), Status.FAILED, "does not exist"),
        (api.Forbidden("denied"), Status.NOT_VERIFIED, "not read (403 denied)"),
    ],
)
def test_the_row_says_what_gcs_says(answer: Any, status: Status, says: str) -> None:
    row = mtc_backup_row(job(), Answers(**{"mtc-backups": answer}), "us-central1")
    assert row is not None and (row.id, row.where, row.fields) == (
        "mtc-backup",
        "gs://mtc-backups",
        ("mtc.backup_bucket",),
    )
    assert row.status is status and says in row.message, row.message
    if status is Status.FAILED:
        assert "--enable-hierarchical-namespace" in row.fix and "--location=us-central1" in row.fix


def test_no_row_without_the_field() -> None:
    assert mtc_backup_row(job(None), Answers(), None) is None


def test_check_gcs_adds_it_after_the_locations() -> None:
    found: dict[str, dict[str, Any] | Exception] = {
        "stub-bucket": api.NotFound("x"),
        "mtc-backups": {"hierarchicalNamespace": {"enabled": True}},
    }
    answers = Answers(**found)
    report = check_gcs(job(), client_factory=lambda: answers, region="us-central1")
    assert report.results[-1].id == "mtc-backup" and report.results[-1].status is Status.OK


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"mtc.backup_bucket": "gs://bkt"}, "is checked only for a job with mtc.enabled"),
        ({**MTC, "mtc.backup_bucket": "gs://bkt/folder"}, "names a folder; the CheckpointConfiguration names a bucket"),
    ],
)
def test_the_field_is_a_bucket_of_a_job_with_mtc(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        small_job(values)
    assert caught.value.field == "mtc.backup_bucket" and message in str(caught.value)
