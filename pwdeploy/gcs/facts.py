"""What a bucket tells us: metadata, granted permissions and probe outcomes. All GCS I/O of preflight is here."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pwdeploy.gcs.lifecycle_rules import Rules, read_rules
from pwdeploy.gcs.storage_client import TIMEOUT, GcsFailure, call, retry

# A permission that does not exist: a backend that claims to grant it does not evaluate IAM.
CANARY_PERMISSION = "storage.pwdeployPreflight.canary"
PROBE_BODY = b"pwdeploy preflight probe\n"

ProbeStep = Literal["write", "read", "compare"]


@dataclass(frozen=True)
class BucketMeta:
    location: str  # as GCS spells it, e.g. US-CENTRAL1, US, NAM4
    location_type: str | None  # region, dual-region, multi-region
    lifecycle_rules: int
    rules: Rules = field(default_factory=Rules)  # the Delete rules among them that can reach live objects
    hierarchical_namespace: bool | None = None  # hierarchicalNamespace.enabled; None: GCS did not say


@dataclass(frozen=True)
class IamAnswer:
    granted: frozenset[str] | None  # None: the backend did not answer credibly
    note: str | None = None  # why it is not credible / what failed


@dataclass(frozen=True)
class ProbeOutcome:
    uri: str  # the probe object
    failed_step: ProbeStep | None  # None: every step succeeded
    error: GcsFailure | None = None
    delete_error: GcsFailure | None = None  # the probe object may have been left behind


@dataclass(frozen=True)
class BucketFacts:
    name: str
    meta: BucketMeta | None
    meta_error: GcsFailure | None
    iam: IamAnswer | None  # None: not asked (the bucket is missing or unreachable)
    probes: dict[str, ProbeOutcome]  # by location URI


def gather(client: Any, name: str, permissions: Iterable[str], prefixes: Iterable[str]) -> BucketFacts:
    """Ask GCS everything preflight needs about one bucket, once, however many locations share it."""
    bucket = client.bucket(name)
    meta, meta_error = None, None
    try:
        meta = read_meta(bucket)
    except GcsFailure as failure:
        meta_error = failure
    if meta_error is not None and meta_error.kind in ("not_found", "unreachable", "credentials"):
        return BucketFacts(name, None, meta_error, None, {})
    iam = test_permissions(bucket, sorted(set(permissions)))
    probes = {}
    for prefix in dict.fromkeys(prefixes):
        outcome = probe(bucket, prefix)
        probes[_uri(name, prefix)] = outcome
    return BucketFacts(name, meta, meta_error, iam, probes)


def read_meta(bucket: Any) -> BucketMeta:
    call(lambda: bucket.reload(timeout=TIMEOUT, retry=retry()))
    try:
        rules = list(bucket.lifecycle_rules or [])
    except (KeyError, TypeError, AttributeError) as exc:  # the client library reads each rule's action type
        raise GcsFailure("error", f"the bucket's lifecycle rules are not in the expected form ({exc!r})") from None
    hns = getattr(bucket, "hierarchical_namespace_enabled", None)  # a stand-in bucket may not have the property
    return BucketMeta(
        str(bucket.location or "unknown"),
        bucket.location_type,
        len(rules),
        read_rules(rules),
        hns if isinstance(hns, bool) else None,
    )


def test_permissions(bucket: Any, permissions: list[str]) -> IamAnswer:
    """testIamPermissions; answers from a backend that grants a permission that does not exist are not credible."""
    try:
        granted = frozenset(call(lambda: bucket.test_iam_permissions(permissions, timeout=TIMEOUT, retry=retry())))
    except GcsFailure as failure:
        return IamAnswer(None, f"testIamPermissions failed: {failure}")
    if granted >= set(permissions):
        try:
            echoed = call(lambda: bucket.test_iam_permissions([CANARY_PERMISSION], timeout=TIMEOUT, retry=retry()))
        except GcsFailure:
            echoed = []  # rejecting an unknown permission is what a real IAM does
        if CANARY_PERMISSION in echoed:
            return IamAnswer(None, "the backend grants even a made-up permission: it does not evaluate IAM")
    return IamAnswer(granted)


def probe(bucket: Any, prefix: str) -> ProbeOutcome:
    """Write, read back and delete one small object under ``prefix``; the delete runs whatever happened."""
    name = f"{prefix}/" if prefix else ""
    name += f".pwdeploy-preflight-{uuid.uuid4().hex[:12]}"
    blob = bucket.blob(name)
    uri = _uri(bucket.name, name)
    step: ProbeStep | None = "write"
    error: GcsFailure | None = None
    try:
        call(lambda: blob.upload_from_string(PROBE_BODY, if_generation_match=0, timeout=TIMEOUT, retry=retry()))
        step = "read"
        body = call(lambda: blob.download_as_bytes(timeout=TIMEOUT, retry=retry()))
        step = "compare"
        if body != PROBE_BODY:
            raise GcsFailure("error", f"read back {len(body)} bytes that differ from the {len(PROBE_BODY)} written")
        step = None
    except GcsFailure as failure:
        error = failure
    finally:
        delete_error = _delete(blob)
    if step == "write" and delete_error is not None:
        # A refused write leaves nothing; only a write that timed out may have landed.
        maybe_written = error is not None and error.kind == "unreachable" and delete_error.kind != "not_found"
        delete_error = delete_error if maybe_written else None
    return ProbeOutcome(uri, step, error, delete_error)


def _delete(blob: Any) -> GcsFailure | None:
    try:
        call(lambda: blob.delete(timeout=TIMEOUT, retry=retry()))
    except GcsFailure as failure:
        return failure
    return None


def _uri(bucket: str, name: str) -> str:
    return f"gs://{bucket}/{name}" if name else f"gs://{bucket}"
