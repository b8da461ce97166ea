"""The GCS source of preflight: check every GCS location of a job before anything is submitted.

Per bucket (once, however many locations share it): it exists and answers; testIamPermissions for what each
location needs; lifecycle rules against the cap when the compile cache lives there, and against the checkpoint
prefix when checkpoints live there (a rule that can delete them is a warning); its location against the
cluster's region. Per location: a probe object is written, read back and deleted. From the config alone: the
checkpoint location is not inside the scratch location.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pwdeploy.config import GcsPath, JobConfig
from pwdeploy.errors import ArgumentError
from pwdeploy.gcs import iam as perms
from pwdeploy.gcs import storage_client as gcs_client
from pwdeploy.gcs.facts import gather
from pwdeploy.preflight.gcs_evaluate import Context, evaluate, gcs_row, placement_row
from pwdeploy.preflight.mtc_bucket import mtc_backup_row
from pwdeploy.report import PreflightReport, PreflightRow, Status

REGION = re.compile(r"[a-z]+-[a-z]+[0-9]+")
WORKLOAD_NOTE = (
    "These checks run as you. On the cluster, GCS is reached as the node pool's service account: Pathways pods "
    "use the host network, and GKE gives host-network pods the node's service account, not Workload Identity "
    "(scheduling.service_account does not change that). Grant the bucket roles to the node pool's service "
    "account too: gcloud container node-pools describe POOL --cluster CLUSTER --format='value(config.serviceAccount)'."
)


def check_gcs(job: JobConfig, *, client_factory: Callable[[], Any], region: str | None) -> PreflightReport:
    """Check the job's GCS locations. ``client_factory`` builds the google.cloud.storage client (the seam);
    ``region`` is already checked (``check_region``)."""
    locations = job.storage.locations()
    placement = [row for row in (placement_row(locations),) if row is not None]  # from the config alone
    try:
        client = client_factory()
    except gcs_client.MissingCredentials as exc:
        return PreflightReport((_credentials_row(locations, str(exc)), *placement), notes=(WORKLOAD_NOTE,))
    principal = gcs_client.principal(client)
    email = getattr(getattr(client, "_credentials", None), "service_account_email", None)
    member = f"serviceAccount:{email}" if email and email != "default" else "MEMBER"
    ctx = Context(enable_olm=job.storage.enable_olm, region=region, member=member)
    results: list[PreflightRow] = []
    unreachable: str | None = None
    for bucket, uses in by_bucket(locations).items():
        if unreachable is not None:  # the same endpoint and credentials: do not wait for them again
            detail = f"not checked: GCS did not answer for {unreachable}"
            results.append(gcs_row("bucket", Status.NOT_VERIFIED, f"gs://{bucket}", detail, fields=tuple(uses)))
            continue
        needed = {p for field in uses for p in perms.needed(field, enable_olm=ctx.enable_olm)}
        facts = gather(client, bucket, needed, [path.prefix for path in uses.values()])
        results.extend(evaluate(facts, uses, ctx))
        if facts.meta_error is not None and facts.meta_error.kind in ("unreachable", "credentials"):
            unreachable = f"gs://{bucket}"
    backup = [r for r in (mtc_backup_row(job, client, region),) if r is not None] if unreachable is None else []
    return PreflightReport((*results, *placement, *backup), principal=principal, notes=(WORKLOAD_NOTE,))


def by_bucket(locations: dict[str, GcsPath]) -> dict[str, dict[str, GcsPath]]:
    """Locations grouped by bucket, buckets and fields in config order."""
    grouped: dict[str, dict[str, GcsPath]] = {}
    for field, path in locations.items():
        grouped.setdefault(path.bucket, {})[field] = path
    return grouped


def check_region(region: str | None) -> str | None:
    """A GCP region such as us-central1 (lower-cased), or an ArgumentError naming ``region``."""
    if region is None or not region.strip():
        return None
    value = region.strip().lower()
    if REGION.fullmatch(value):
        return value
    zone = re.fullmatch(r"([a-z]+-[a-z]+[0-9]+)-[a-z]", value)
    hint = f"pass the region {zone.group(1)}, not the zone" if zone else "e.g. `region=us-central1`"
    raise ArgumentError("region", f"{region!r} is not a GCP region", hint=hint)


def _credentials_row(locations: dict[str, GcsPath], message: str) -> PreflightRow:
    return gcs_row(
        "credentials",
        Status.FAILED,
        "-",
        f"no Application Default Credentials found ({message})",
        "run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a key file",
        fields=tuple(locations),
    )
