"""Pathways: what the proxy, resource manager, workers and the user's program say in their last log lines, and
components whose images carry different versions.

Texts matched (stable parts):
- ``Unable to initialize backend 'proxy'`` (jax-ml/jax jax/_src/xla_bridge.py; the Pathways troubleshooting page,
  docs.cloud.google.com/ai-hypercomputer/docs/workloads/pathways-on-cloud/troubleshooting-pathways, shows it with
  ``Unable to establish connection to ifrt_proxy server``), and gRPC's ``Connection refused`` to the proxy port.
- ``IFRT Proxy client and server failed to agree on the protocol version`` (same page): client and proxy versions.
- ``Megascale detects a hang`` / ``Megascale hang detected`` (AI-Hypercomputer/maxtext
  docs/guides/megascale_hang_playbook.md).
- GCS refusals: ``does not have storage.objects.<verb> access`` and ``403``/``PERMISSION_DENIED``/``AccessDenied``
  next to a ``gs://`` path or storage.googleapis.com URL (Cloud Storage error messages).
- ``No space left on device`` on /dev/shm.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

from pwdeploy import identifiers as ids
from pwdeploy.cluster.diagnose import pods as p
from pwdeploy.cluster.diagnose.findings import Observation, Severity, quote
from pwdeploy.cluster.diagnose.read import LogTail, Snapshot

_DENIED = (
    "403 Forbidden",  # the HTTP status as GCS clients print it; a bare "403" would match shard-00403, step 14030
    "(403)",
    "code 403",
    "code: 403",
    "status 403",
    "PERMISSION_DENIED",
    "AccessDenied",
    "Permission denied",
    "permission denied",
    "does not have storage.",
)
_GCS = ("gs://", "storage.googleapis.com", "storage.objects.", "storage.buckets.", "Google Cloud Storage")
_BUCKET = re.compile(r"gs://([a-z0-9][a-z0-9._-]*)|storage\.googleapis\.com/(?:storage/v1/b/)?([a-z0-9][a-z0-9._-]*)")


class LogRule(NamedTuple):
    cause: str
    severity: Severity
    matches: Callable[[str], bool]
    fix: str


RULES = (
    LogRule(
        "version-mismatch",
        "error",
        lambda line: "failed to agree on the protocol version" in line,
        "the user's JAX (client) and the IFRT proxy differ: use the Pathways images of the job's JAX "
        "(pathways_version, or images.proxy_server / images.server) or rebuild the job image with that JAX",
    ),
    LogRule(
        "proxy-backend",
        "error",
        lambda line: (
            "Unable to initialize backend 'proxy'" in line
            or ("Connection refused" in line and f":{ids.PROXY_PORT}" in line)
        ),
        f"the program could not reach the IFRT proxy at grpc://localhost:{ids.PROXY_PORT}: read its log "
        "(pwdeploy logs {job} --component proxy); call pathwaysutils.initialize() before the first JAX call",
    ),
    LogRule(
        "hang",
        "error",
        lambda line: "Megascale detects a hang" in line or "Megascale hang detected" in line,
        "see the cause the digest names (MaxText megascale_hang_playbook.md): restart avoiding the named hosts; "
        "with --megascale_abort_on_hangs=true in worker_flags, workers exit instead of stalling",
    ),
    LogRule(
        "gcs-permission",
        "error",
        lambda line: any(d in line for d in _DENIED) and any(g in line for g in _GCS),
        "the node pool's service account (host-network pods get no Workload Identity) lacks a role on the bucket: "
        "gcloud storage buckets add-iam-policy-binding gs://BUCKET --member serviceAccount:NODE_SA "
        "--role roles/storage.objectUser; check: pwdeploy preflight -f job.yaml",
    ),
    LogRule(
        "shm-exhausted",
        "error",
        lambda line: "No space left on device" in line and ids.SHM_DIR in line,
        "/dev/shm is full: raise main.shm_size (head) or tpu.shm_size (workers)",
    ),
)


def classify(lines: list[str]) -> tuple[LogRule, str] | None:
    """The first rule (in RULES order) that a line matches, with the latest line it matched."""
    for rule in RULES:
        for line in reversed(lines):
            if rule.matches(line):
                return rule, line
    return None


def observations(snap: Snapshot) -> list[Observation]:
    by_name = {p.name(pod): pod for pod in snap.pods}
    found = [obs for tail in snap.logs if (obs := _from_log(tail, by_name.get(tail.pod, {}), snap.name)) is not None]
    return found + _image_versions(snap)


def _from_log(tail: LogTail, pod: p.Object, job: str) -> Observation | None:
    matched = classify(tail.lines)
    if matched is None:
        return None
    rule, line = matched
    fix = rule.fix.replace("{job}", job)
    bucket = _BUCKET.search(line) if rule.cause == "gcs-permission" else None
    if bucket:
        fix = fix.replace("gs://BUCKET", f"gs://{bucket[1] or bucket[2]}")
    which = f"{tail.container} log{' (previous run)' if tail.previous else ''}"
    role = p.role(pod) if pod else "pod"
    return Observation(
        rule.cause, rule.severity, role, tail.pod, f"{rule.cause}/{tail.container}", f"{which}: {quote(line)}", fix
    )


def _image_versions(snap: Snapshot) -> list[Observation]:
    """The proxy and the Pathways servers (resource manager, workers) must come from one release: their image
    tags (``jax-<version>``) must agree."""
    tags: dict[str, set[str]] = {}
    for pod in snap.pods:
        for c in p.containers(pod):
            if c.spec.get("name") in (ids.PROXY_CONTAINER, ids.RM_CONTAINER, ids.WORKER_CONTAINER):
                image = str(c.spec.get("image", ""))
                tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] and "@" not in image else ""
                if tag.startswith("jax-"):
                    tags.setdefault(tag, set()).add(f"{c.spec['name']} {image}")
    if len(tags) < 2:
        return []
    evidence = "; ".join(sorted(next(iter(sorted(images))) for images in tags.values()))
    fix = "set one pathways_version, or images.proxy_server and images.server of the same release"
    return [Observation("version-mismatch", "error", "jobset", snap.name, "images", evidence, fix)]
