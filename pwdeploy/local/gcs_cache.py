"""Whether a local run's gs:// compile cache can be used, asked once before the job starts.

JAX reaches a gs:// cache through gcsfs and only warns when it cannot: with no credentials or no route to GCS,
each cache read and write of the job retries first (measured: a 5-step example took 86 s instead of 3 s, and
over 400 s with gcsfs's zonal-bucket lookup off). One listing here, with a short timeout, decides instead.
"""

from __future__ import annotations

from typing import Any

from pwdeploy.config.values import parse_gcs
from pwdeploy.gcs.storage_client import ClientFactory, GcsFailure, MissingCredentials, call, default_client

# (connect, read) seconds, one attempt: the cache is an optimisation, a local run must not wait long for it.
PROBE_TIMEOUT = (3.0, 10.0)
LOGIN = "gcloud auth application-default login"


def split_uri(uri: str) -> tuple[str, str]:
    """``gs://bucket/some/prefix`` -> (bucket, ``some/prefix/``); the prefix is empty for a bare bucket."""
    location = parse_gcs(uri, "local.compile_cache")
    return location.bucket, f"{location.prefix}/" if location.prefix else ""


def cache_problem(uri: str, *, client_factory: ClientFactory = default_client) -> str | None:
    """Why the job could not use the compile cache at ``uri`` (one line), or None when it can list it.

    The listing needs storage.objects.list, which the cache needs too; writes are left to JAX, which warns.
    """
    bucket, prefix = split_uri(uri)
    try:
        client = client_factory()
    except MissingCredentials as exc:
        return f"no Google credentials found ({exc}); run `{LOGIN}`"
    try:
        call(lambda: _list_one(client, bucket, prefix))
    except GcsFailure as failure:
        return _reason(failure, bucket)
    return None


def _list_one(client: Any, bucket: str, prefix: str) -> list[Any]:
    return list(client.list_blobs(bucket, prefix=prefix, max_results=1, timeout=PROBE_TIMEOUT, retry=None))


def _reason(failure: GcsFailure, bucket: str) -> str:
    if failure.kind == "not_found":
        return f"bucket {bucket} does not exist"
    if failure.kind == "denied":
        return f"listing gs://{bucket} was refused ({failure}); the cache needs storage.objects.list, get and create"
    if failure.kind == "credentials":
        return f"{failure}; run `{LOGIN}`"
    return str(failure)
