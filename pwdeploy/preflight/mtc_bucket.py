"""The ``mtc-backup`` GCS row: with ``mtc.backup_bucket``, the bucket the cluster's CheckpointConfiguration backs up
to exists and has hierarchical namespace, which GKE's multi-tier checkpointing page requires of it ("without it
backups fail") and which can only be chosen when a bucket is created (Cloud Storage, "Create buckets with
hierarchical namespace enabled"). GCS says so in the bucket's ``hierarchicalNamespace.enabled``. Whether the MTC
driver may write there is its own identity's to show (readiness's ``mtc-configuration`` row), not these
credentials'."""

from __future__ import annotations

from typing import Any

from pwdeploy.config import JobConfig
from pwdeploy.gcs.facts import read_meta
from pwdeploy.gcs.storage_client import GcsFailure
from pwdeploy.preflight.gcs_evaluate import gcs_row
from pwdeploy.report import PreflightRow, Status

KIND = "mtc-backup"
FIELDS = ("mtc.backup_bucket",)


def create_command(uri: str, region: str | None) -> str:
    return (
        f"gcloud storage buckets create {uri} --location={region or 'REGION'} --uniform-bucket-level-access "
        "--enable-hierarchical-namespace"
    )


def mtc_backup_row(job: JobConfig, client: Any, region: str | None) -> PreflightRow | None:
    """The row, or None when the job names no backup bucket."""
    path = job.mtc.backup_bucket
    if path is None:
        return None
    uri = path.uri

    def row(status: Status, detail: str, fix: str | None = None) -> PreflightRow:
        return gcs_row(KIND, status, uri, detail, fix, fields=FIELDS)

    try:
        meta = read_meta(client.bucket(path.bucket))
    except GcsFailure as failure:
        if failure.kind == "not_found":
            return row(
                Status.FAILED, "does not exist", "create it with hierarchical namespace: " + create_command(uri, region)
            )
        return row(Status.NOT_VERIFIED, f"not read ({failure}): whether it has hierarchical namespace is unknown")
    if meta.hierarchical_namespace is None:
        detail = (
            "GCS's answer has no hierarchicalNamespace: a bucket created without it may say nothing (as may a "
            "stand-in of GCS), so it most likely has none; MTC's backups need it"
        )
        return row(Status.NOT_VERIFIED, detail, "gcloud storage buckets describe " + uri)
    if not meta.hierarchical_namespace:
        fix = (
            "hierarchical namespace cannot be turned on for an existing bucket: create another with it ("
            + create_command(f"gs://{path.bucket}-mtc", region)
            + "), and name it in the CheckpointConfiguration and mtc.backup_bucket"
        )
        return row(Status.FAILED, "has no hierarchical namespace: the MTC driver's backups to it fail", fix)
    return row(Status.OK, "has hierarchical namespace, as MTC's backups need")
