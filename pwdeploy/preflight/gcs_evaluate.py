"""From what a bucket told us (``BucketFacts``) to report rows. Pure: no I/O, so every verdict is unit-testable."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pwdeploy.config import GcsPath
from pwdeploy.config.storage_constraints import checkpoints_apart_fix
from pwdeploy.gcs import iam as perms
from pwdeploy.gcs.facts import BucketFacts, ProbeOutcome
from pwdeploy.gcs.lifecycle_rules import describe, reaches
from pwdeploy.gcs.storage_client import GcsFailure
from pwdeploy.report import PreflightRow, Status

LIFECYCLE_RULE_CAP = 50  # GCS allows at most 50 lifecycle rules per bucket
# What each GCS row rests on (its ``source``): the Cloud Storage page of the request it makes or the rule it applies.
GCS_DOCS = "https://cloud.google.com/storage/docs/"
SOURCES = {
    "credentials": "https://cloud.google.com/docs/authentication/application-default-credentials",
    "bucket": GCS_DOCS + "json_api/v1/buckets/get",
    "permissions": GCS_DOCS + "json_api/v1/buckets/testIamPermissions",
    "lifecycle": GCS_DOCS + "lifecycle",
    "retention": GCS_DOCS + "lifecycle",
    "region": GCS_DOCS + "locations",
    "probe": GCS_DOCS + "json_api/v1/objects",
    "placement": GCS_DOCS + "lifecycle",
    # mtc.backup_bucket has hierarchical namespace, as GKE's MTC page requires (pwdeploy.preflight.mtc_bucket)
    "mtc-backup": "https://cloud.google.com/kubernetes-engine/docs/how-to/machine-learning/training/multi-tier-checkpointing",
}
OLM_ESCAPE = (
    "or set storage.enable_olm: false (--no-gcs-olm; Pathways --enable_gcs_olm=false) so the cache sets no rule"
)


def gcs_row(
    kind: str, status: Status, where: str, detail: str, fix: str | None = None, *, fields: tuple[str, ...] = ()
) -> PreflightRow:
    """A GCS row of ``kind`` (a key of ``SOURCES``), with the page it rests on."""
    return PreflightRow(kind, status, where, detail, fix, SOURCES[kind], fields)


@dataclass(frozen=True)
class Context:
    enable_olm: bool
    region: str | None  # the cluster's region, lower case, when known
    member: str  # IAM member for fix commands, e.g. serviceAccount:x@y or MEMBER


def evaluate(facts: BucketFacts, uses: Mapping[str, GcsPath], ctx: Context) -> list[PreflightRow]:
    """The rows for one bucket; ``uses`` are the config fields located in it, in config order."""
    bucket_uri = f"gs://{facts.name}"
    fields = tuple(uses)
    first = _bucket_row(facts, bucket_uri, fields, ctx)
    if facts.meta is None and facts.meta_error is not None and facts.iam is None:
        return [first]  # missing or unreachable: nothing else can be asked
    rows = [first, *_permission_rows(facts, bucket_uri, uses, ctx)]
    if perms.SCRATCH_FIELD in uses:
        rows.append(_lifecycle_row(facts, bucket_uri, ctx))
    if perms.CHECKPOINTS_FIELD in uses:
        rows.append(_retention_row(facts, uses[perms.CHECKPOINTS_FIELD]))
    rows.append(_region_row(facts, bucket_uri, fields, ctx))
    rows.extend(_probe_rows(facts, uses, ctx))
    return rows


def _bucket_row(facts: BucketFacts, uri: str, fields: tuple[str, ...], ctx: Context) -> PreflightRow:
    def row(status: Status, detail: str, fix: str | None = None) -> PreflightRow:
        return gcs_row("bucket", status, uri, detail, fix, fields=fields)

    if facts.meta is not None:
        kind = f", {facts.meta.location_type}" if facts.meta.location_type else ""
        return row(Status.OK, f"exists ({facts.meta.location}{kind})")
    error = facts.meta_error
    assert error is not None
    if error.kind == "not_found":
        where = ctx.region or "REGION"
        return row(
            Status.FAILED,
            "does not exist",
            f"create it in the cluster's region: gcloud storage buckets create {uri} --location={where}",
        )
    if error.kind in ("unreachable", "credentials"):
        return row(Status.FAILED, str(error), _connection_fix(error))
    if error.kind == "denied":
        if perms.SCRATCH_FIELD in fields:
            return row(
                Status.FAILED,
                f"exists, but its metadata is not readable ({error}); the compile cache needs {perms.BUCKETS_GET}",
                _grant_fix(uri, {perms.BUCKETS_GET}, ctx),
            )
        return row(Status.OK, f"exists (metadata not readable with these credentials: {error})")
    return row(Status.NOT_VERIFIED, f"bucket metadata could not be read: {error}")


def _permission_rows(facts: BucketFacts, uri: str, uses: Mapping[str, GcsPath], ctx: Context) -> list[PreflightRow]:
    # Locations with the same needs share one row.
    groups: dict[tuple[str, ...], list[str]] = {}
    for field in uses:
        groups.setdefault(perms.needed(field, enable_olm=ctx.enable_olm), []).append(field)
    rows = []
    for needed, fields in groups.items():
        iam = facts.iam
        if iam is None or iam.granted is None:
            note = iam.note if iam is not None and iam.note else "not asked"
            rows.append(gcs_row("permissions", Status.NOT_VERIFIED, uri, note, fields=tuple(fields)))
            continue
        missing = [p for p in needed if p not in iam.granted]
        if not missing:
            detail = "has " + ", ".join(needed)
            rows.append(gcs_row("permissions", Status.OK, uri, detail, fields=tuple(fields)))
            continue
        fix = _grant_fix(uri, set(missing), ctx)
        if perms.BUCKETS_UPDATE in missing:
            fix += f"; {OLM_ESCAPE}"
        detail = "missing " + ", ".join(missing)
        rows.append(gcs_row("permissions", Status.FAILED, uri, detail, fix, fields=tuple(fields)))
    return rows


def _lifecycle_row(facts: BucketFacts, uri: str, ctx: Context) -> PreflightRow:
    fields = (perms.SCRATCH_FIELD,)
    if facts.meta is None:
        why = f": {facts.meta_error}" if facts.meta_error else ""
        return gcs_row("lifecycle", Status.NOT_VERIFIED, uri, f"lifecycle rules not readable{why}", fields=fields)
    used = facts.meta.lifecycle_rules
    if not ctx.enable_olm:
        detail = f"{used} of {LIFECYCLE_RULE_CAP} rules used; the cache adds none (storage.enable_olm is false)"
        return gcs_row("lifecycle", Status.OK, uri, detail, fields=fields)
    if used >= LIFECYCLE_RULE_CAP:
        return gcs_row(
            "lifecycle",
            Status.FAILED,
            uri,
            f"{used} of {LIFECYCLE_RULE_CAP} lifecycle rules used; the compile cache needs one free to set its TTL",
            f"delete unused rules or share a bucket that has room, {OLM_ESCAPE}",
            fields=fields,
        )
    detail = f"{used} of {LIFECYCLE_RULE_CAP} rules used; room for the compile cache's TTL rule"
    return gcs_row("lifecycle", Status.OK, uri, detail, fields=fields)


def _retention_row(facts: BucketFacts, checkpoints: GcsPath) -> PreflightRow:
    """Whether a lifecycle rule of the bucket can delete checkpoints: a warning, since an age rule longer than
    the job is harmless, but a resumed job that finds its latest checkpoint deleted starts over."""
    fields = (perms.CHECKPOINTS_FIELD,)
    uri = checkpoints.uri
    if facts.meta is None:
        why = f": {facts.meta_error}" if facts.meta_error else ""
        return gcs_row("retention", Status.NOT_VERIFIED, uri, f"lifecycle rules not readable{why}", fields=fields)
    rules = facts.meta.rules
    reaching = [describe(rule) for rule in rules.deletes if reaches(rule, checkpoints.prefix)]
    if reaching:
        detail = (
            f"{len(reaching)} lifecycle rule(s) of gs://{facts.name} can delete checkpoints here ("
            + "), (".join(reaching)
            + "): a restarted job may find its latest checkpoint gone or incomplete and start over"
        )
        where = "in a bucket without such rules"
        fix = (
            f"give the rule(s) matchesPrefix conditions that leave {checkpoints.prefix}/ out (gcloud storage "
            f"buckets update gs://{facts.name} --lifecycle-file=FILE), or keep storage.checkpoints {where}"
            if checkpoints.prefix
            else f"put storage.checkpoints under a prefix the rule(s) do not match, or {where}"
        )
        return gcs_row("retention", Status.WARN, uri, detail, fix, fields=fields)
    if rules.unreadable:
        detail = f"{len(rules.unreadable)} lifecycle rule(s) of gs://{facts.name} not understood"
        return gcs_row("retention", Status.NOT_VERIFIED, uri, detail, fields=fields)
    detail = f"no lifecycle rule deletes live objects here ({facts.meta.lifecycle_rules} rule(s) in the bucket)"
    return gcs_row("retention", Status.OK, uri, detail, fields=fields)


def _region_row(facts: BucketFacts, uri: str, fields: tuple[str, ...], ctx: Context) -> PreflightRow:
    if facts.meta is None:
        return gcs_row("region", Status.NOT_VERIFIED, uri, "bucket location not readable", fields=fields)
    location = facts.meta.location
    if ctx.region is None:
        detail = f"bucket in {location}; the cluster's region is unknown (pass --region to compare)"
        return gcs_row("region", Status.NOT_VERIFIED, uri, detail, fields=fields)
    if location.lower() == ctx.region:
        return gcs_row("region", Status.OK, uri, f"bucket in {ctx.region}, the cluster's region", fields=fields)
    fix = f"use a bucket in {ctx.region}"
    if _multi_region_holds(location, ctx.region):
        detail = (
            f"bucket in the {location} multi-region, which includes {ctx.region}: no cross-region charge, "
            f"but a regional bucket in {ctx.region} answers with less latency"
        )
        return gcs_row("region", Status.WARN, uri, detail, fix, fields=fields)
    kind = f" ({facts.meta.location_type})" if facts.meta.location_type else ""
    return gcs_row(
        "region",
        Status.WARN,
        uri,
        f"bucket in {location}{kind}, cluster in {ctx.region}: cross-region traffic adds latency and cost",
        fix,
        fields=fields,
    )


# The GCS multi-regions and the prefix of the regions each one spans.
MULTI_REGIONS = {"US": "us-", "EU": "europe-", "ASIA": "asia-"}


def _multi_region_holds(location: str, region: str) -> bool:
    prefix = MULTI_REGIONS.get(location.upper())
    return prefix is not None and region.startswith(prefix)


def _probe_rows(facts: BucketFacts, uses: Mapping[str, GcsPath], ctx: Context) -> list[PreflightRow]:
    by_uri: dict[str, list[str]] = {}
    for field, path in uses.items():
        by_uri.setdefault(path.uri, []).append(field)
    rows = []
    for uri, fields in by_uri.items():
        outcome = facts.probes.get(uri)
        if outcome is None:
            rows.append(gcs_row("probe", Status.NOT_VERIFIED, uri, "no probe was run", fields=tuple(fields)))
            continue
        rows.append(_probe_row(outcome, uri, tuple(fields), f"gs://{facts.name}", ctx))
    return rows


def _probe_row(outcome: ProbeOutcome, uri: str, fields: tuple[str, ...], bucket: str, ctx: Context) -> PreflightRow:
    left = f"; the probe object {outcome.uri} may be left behind" if outcome.delete_error else ""
    cleanup = f"remove it: gcloud storage rm {outcome.uri}" if outcome.delete_error else None
    error = outcome.error
    if outcome.failed_step is None:
        if outcome.delete_error is None:
            return gcs_row("probe", Status.OK, uri, "wrote, read back and deleted a probe object", fields=fields)
        detail = f"wrote and read back a probe object, but could not delete it ({outcome.delete_error})"
        return gcs_row("probe", Status.WARN, uri, detail, cleanup, fields=fields)
    assert error is not None
    if outcome.failed_step == "write":
        detail = f"cannot write under this prefix: {error}{left}"
        fix: str = _connection_fix(error) or _grant_fix(bucket, {perms.OBJECTS_CREATE}, ctx)
    elif outcome.failed_step == "read":
        detail = f"wrote a probe object but cannot read it back: {error}{left}"
        fix = _connection_fix(error) or _grant_fix(bucket, {perms.OBJECTS_GET}, ctx)
    else:
        detail = f"wrote a probe object but {error}{left}"
        fix = cleanup or "check the bucket's object settings (retention, encryption) and rerun"
    return gcs_row("probe", Status.FAILED, uri, detail, fix, fields=fields)


def _grant_fix(bucket_uri: str, missing: set[str], ctx: Context) -> str:
    roles = perms.roles_for(missing)
    commands = "; ".join(
        f"gcloud storage buckets add-iam-policy-binding {bucket_uri} --member={ctx.member} --role={role}"
        for role in roles
    )
    return f"grant {' and '.join(roles)}: {commands}"


def _connection_fix(error: GcsFailure) -> str | None:
    if error.kind == "credentials":
        return "refresh Application Default Credentials: gcloud auth application-default login"
    if error.kind == "unreachable":
        return "check network access to storage.googleapis.com (or STORAGE_EMULATOR_HOST)"
    return None


def placement_row(locations: Mapping[str, GcsPath]) -> PreflightRow | None:
    """storage.checkpoints apart from storage.scratch (None when no checkpoints are set). Inside it, checkpoints
    share the compile cache's lifecycle (TTL) rule and whatever Pathways does with its scratch location."""
    checkpoints = locations.get(perms.CHECKPOINTS_FIELD)
    if checkpoints is None:
        return None
    scratch = locations.get(perms.SCRATCH_FIELD)
    fields = (perms.CHECKPOINTS_FIELD, perms.SCRATCH_FIELD) if scratch else (perms.CHECKPOINTS_FIELD,)
    if scratch is None or not checkpoints.within(scratch):
        return gcs_row("placement", Status.OK, checkpoints.uri, "apart from the scratch location", fields=fields)
    fix = checkpoints_apart_fix(scratch)
    detail = f"inside the scratch location {scratch.uri}: the compile cache's lifecycle rule may delete checkpoints"
    return gcs_row("placement", Status.FAILED, checkpoints.uri, detail, fix, fields=fields)
