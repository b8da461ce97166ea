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
- ``No space left on device`` on /dev/shm: the path on the error line, or, when the error line names none (numpy's
  ``tofile`` and a file's ``write`` raise a bare ``OSError: [Errno 28] No space left on device``), in the lines of
  the same Python traceback above it (from its ``Traceback (most recent call last):``).
- From Google's "Troubleshoot Pathways on Cloud" page (docs.cloud.google.com/ai-hypercomputer/docs/workloads/
  pathways-on-cloud/troubleshooting-pathways, "Debugging common errors"):
  ``Connection to IFRT proxy server was terminated: CANCELLED`` (another client holds the proxy's one session),
  ``GrpcClientSession: writes no longer allowed`` (the proxy disconnected from the client: the session is gone),
  ``Lifecycle matches_prefix cannot specify more than 50 prefixes`` (the scratch bucket's lifecycle rules are
  full), ``The specified bucket does not exist`` (an invalid Cloud Storage location, printed by the resource
  manager or the workers) and ``RESOURCE_EXHAUSTED`` (with a SIGTERM, "may indicate an HBM OOM").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

from pwdeploy import identifiers as ids
from pwdeploy.cluster.diagnose import multi_tier
from pwdeploy.cluster.diagnose import pods as p
from pwdeploy.cluster.diagnose.findings import Cause, Observation, quote
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
_RELEASE_JAX = re.compile(r"jax[-_]([0-9]+\.[0-9]+\.[0-9]+)")
_BUCKET = re.compile(r"gs://([a-z0-9][a-z0-9._-]*)|storage\.googleapis\.com/(?:storage/v1/b/)?([a-z0-9][a-z0-9._-]*)")


_RESTART_HEAD = (
    "restart the head (kubectl delete pod HEAD_POD restarts the JobSet when scheduling.max_restarts allows; "
    "else pwdeploy delete {job} and submit it again)"
)
# The causes a log line names, in the order RULES tries them. Their fixes hold placeholders that _fix fills in from
# the live pod: SCRATCH, gs://BUCKET, {job}, HEAD_POD, SHM_FIELD.
# What each cause's rule rests on (its findings' ``source``).
TROUBLESHOOTING = (
    "https://docs.cloud.google.com/ai-hypercomputer/docs/workloads/pathways-on-cloud/troubleshooting-pathways"
)
PROXY_INIT = "jax-ml/jax: jax/_src/xla_bridge.py (Unable to initialize backend); " + TROUBLESHOOTING
HANG_PLAYBOOK = "AI-Hypercomputer/maxtext: docs/guides/megascale_hang_playbook.md"
GCS_IAM = "https://cloud.google.com/storage/docs/access-control/iam-permissions"
TMPFS = "https://man7.org/linux/man-pages/man5/tmpfs.5.html (a memory-backed /dev/shm: full, a write fails)"

SCRATCH_BUCKET_MISSING = Cause(
    "scratch-bucket-missing",
    "run",
    "`The specified bucket does not exist` in a Pathways log: storage.scratch names no bucket",
    severity="error",
    fix="storage.scratch (now SCRATCH) names a bucket that does not exist: create it (gcloud storage buckets "
    "create gs://BUCKET --location REGION) or fix storage.scratch; check: pwdeploy preflight -f job.yaml",
    source=TROUBLESHOOTING,
)
SCRATCH_LIFECYCLE_LIMIT = Cause(
    "scratch-lifecycle-limit",
    "run",
    "`cannot specify more than 50 prefixes`: the scratch bucket's lifecycle rules are full",
    severity="error",
    fix="the scratch bucket gs://BUCKET has no room for another lifecycle prefix (at most 50): remove the rules no "
    "longer used (gcloud storage buckets describe gs://BUCKET --format='default(lifecycle_config)', then "
    "gcloud storage buckets update gs://BUCKET --lifecycle-file=FILE), use a bucket of its own for "
    "storage.scratch, or set storage.enable_olm: false (--no-gcs-olm) so Pathways adds none",
    source=TROUBLESHOOTING,
)
VERSION_MISMATCH = Cause(  # also the images' jax- tags (_image_versions, with a fix of its own)
    "version-mismatch",
    "run",
    "IFRT protocol versions differ, or the proxy and server images are of different `jax-` releases",
    severity="error",
    fix="the user's JAX (client) and the IFRT proxy differ: use the Pathways images of the job's JAX "
    "(pathways_version, or images.proxy_server / images.server) or rebuild the job image with that JAX",
    source=TROUBLESHOOTING,
)
PROXY_IN_USE = Cause(
    "proxy-in-use",
    "run",
    "`Connection to IFRT proxy server was terminated: CANCELLED`: another client holds the proxy",
    severity="error",
    fix="the IFRT proxy serves one client session at a time and another client holds it (a notebook, a connect): "
    "end that client; after an unexpected disconnection the proxy may keep the old session: " + _RESTART_HEAD,
    source=TROUBLESHOOTING,
)
SESSION_LOST = Cause(
    "session-lost",
    "run",
    "`writes no longer allowed`: the connection to the proxy ended, and the JAX session with it",
    severity="error",
    fix="the connection to the IFRT proxy ended and the JAX session on it with it (a session does not resume on a "
    "new connection): restart the client (a notebook: restart its kernel); if the proxy or the head went away, "
    "read its log: pwdeploy logs {job} --component proxy",
    source=TROUBLESHOOTING,
)
HBM_OOM = Cause(
    "hbm-oom",
    "run",
    "`RESOURCE_EXHAUSTED`: a TPU ran out of device memory (HBM)",
    severity="error",
    fix="a TPU ran out of device memory (HBM) (if the quoted line names another resource, that one): lower what "
    "each device holds (a smaller per-device batch, parameters and optimizer state sharded over more devices, "
    "rematerialised activations) or use more chips",
    source=TROUBLESHOOTING,
)
PROXY_BACKEND = Cause(
    "proxy-backend",
    "run",
    "`Unable to initialize backend 'proxy'`, connection refused to port 29000",
    severity="error",
    fix=f"the program could not reach the IFRT proxy at grpc://localhost:{ids.PROXY_PORT}: read its log "
    "(pwdeploy logs {job} --component proxy); call pathwaysutils.initialize() before the first JAX call",
    source=PROXY_INIT,
)
HANG = Cause(
    "hang",
    "run",
    "`Megascale detects a hang`",
    severity="error",
    fix="see the cause the digest names (MaxText megascale_hang_playbook.md): restart avoiding the named hosts; "
    "with --megascale_abort_on_hangs=true in worker_flags, workers exit instead of stalling",
    source=HANG_PLAYBOOK,
)
GCS_PERMISSION = Cause(
    "gcs-permission",
    "run",
    "403 / permission denied on a bucket in a proxy, resource manager, worker or main log",
    severity="error",
    fix="the node pool's service account (host-network pods get no Workload Identity) lacks a role on the bucket: "
    "gcloud storage buckets add-iam-policy-binding gs://BUCKET --member serviceAccount:NODE_SA "
    "--role roles/storage.objectUser; check: pwdeploy preflight -f job.yaml",
    source=GCS_IAM,
)
SHM_EXHAUSTED = Cause(  # also exit 135 (containers.py, with a severity and fix of its own)
    "shm-exhausted",
    "run",
    "exit 135 (SIGBUS), or `No space left on device` on /dev/shm: which size field",
    severity="error",
    fix="/dev/shm is full: raise SHM_FIELD",
    source=TMPFS,
)


class LogRule(NamedTuple):
    cause: Cause
    matches: Callable[[str], bool]


def _contains(text: str) -> Callable[[str], bool]:
    return lambda line: text in line


RULES = (
    LogRule(SCRATCH_BUCKET_MISSING, lambda line: "The specified bucket does not exist" in line),
    LogRule(SCRATCH_LIFECYCLE_LIMIT, lambda line: "cannot specify more than 50 prefixes" in line),
    LogRule(VERSION_MISMATCH, lambda line: "failed to agree on the protocol version" in line),
    LogRule(PROXY_IN_USE, lambda line: "Connection to IFRT proxy server was terminated: CANCELLED" in line),
    LogRule(SESSION_LOST, lambda line: "writes no longer allowed" in line),
    # Before GCS_PERMISSION: a driver refusing the job over its bucket names the bucket, but the fix is its own.
    *(LogRule(cause, _contains(text)) for cause, text in multi_tier.log_rules()),
    LogRule(HBM_OOM, lambda line: "RESOURCE_EXHAUSTED" in line),
    LogRule(
        PROXY_BACKEND,
        lambda line: (
            "Unable to initialize backend 'proxy'" in line
            or ("Connection refused" in line and f":{ids.PROXY_PORT}" in line)
        ),
    ),
    LogRule(HANG, lambda line: "Megascale detects a hang" in line or "Megascale hang detected" in line),
    LogRule(GCS_PERMISSION, lambda line: any(d in line for d in _DENIED) and any(g in line for g in _GCS)),
    LogRule(SHM_EXHAUSTED, lambda line: "No space left on device" in line and ids.SHM_DIR in line),
)
SCRATCH_ARG = "--gcs_scratch_location="


NO_SPACE = "No space left on device"
TRACEBACK = "Traceback (most recent call last)"
TRACEBACK_LINES = 30  # of a traceback read above its error line when no "Traceback" line starts it


def classify(lines: list[str]) -> tuple[LogRule, str] | None:
    """The first rule (in RULES order) that a line matches, with the latest line it matched."""
    for rule in RULES:
        for index in range(len(lines) - 1, -1, -1):
            line = lines[index]
            if rule.matches(line) or (rule.cause is SHM_EXHAUSTED and _shm_in_traceback(lines, index)):
                return rule, line
    return None


def _shm_in_traceback(lines: list[str], index: int) -> bool:
    """``lines[index]`` is a bare ENOSPC whose traceback (the lines above it, back to its start) names /dev/shm."""
    if NO_SPACE not in lines[index]:
        return False
    start = max(0, index - TRACEBACK_LINES)
    for back in range(index - 1, start - 1, -1):
        if TRACEBACK in lines[back]:
            start = back
            break
    return any(ids.SHM_DIR in line for line in lines[start:index])


def observations(snap: Snapshot) -> list[Observation]:
    """What the logs read say; the log of a failed run stands for every container that failed the same way (the
    same role, container and exit code: diagnose reads one log of each kind), so the finding counts them all."""
    by_name = {p.name(pod): pod for pod in snap.pods}
    found: list[Observation] = []
    for tail in snap.logs:
        obs = _from_log(tail, by_name.get(tail.pod, {}), snap.name)
        if obs is None:
            continue
        alike = _ended_alike(snap, tail)
        more = [name for name in alike if name != tail.pod]
        if more:
            obs = obs._replace(evidence=f"{obs.evidence} (the log of {tail.pod}; {len(more):,} more ended alike, "
                                        f"their logs not read)")  # fmt: skip
        found += [obs, *(obs._replace(obj=name) for name in more)]
    return found + _image_versions(snap)


def _ended_alike(snap: Snapshot, tail: LogTail) -> list[str]:
    """The pods whose container ended as the one whose log ``tail`` is (its kind: role, container, exit code);
    none when that run did not fail (a log of a running container stands only for itself)."""
    kinds = {p.failure_kind(c) for pod in snap.pods if p.name(pod) == tail.pod for c in p.containers(pod)
             if c.spec.get("name") == tail.container}  # fmt: skip
    kind = next(iter(kinds), None)
    if kind is None:
        return []
    return [p.name(pod) for pod in snap.pods if not (pod.get("metadata") or {}).get("deletionTimestamp")
            and any(p.failure_kind(c) == kind for c in p.containers(pod))]  # fmt: skip


def _from_log(tail: LogTail, pod: p.Object, job: str) -> Observation | None:
    matched = classify(tail.lines)
    if matched is None:
        return None
    rule, line = matched
    fix = _fix(rule, line, pod, tail.container, job)
    which = f"{tail.container} log{' (previous run)' if tail.previous else ''}"
    role = p.role(pod) if pod else "pod"
    return rule.cause.observe(role, tail.pod, f"{rule.cause.id}/{tail.container}", f"{which}: {quote(line)}", fix=fix)


def _fix(rule: LogRule, line: str, pod: p.Object, container: str, job: str) -> str:
    """The rule's fix with what the live pod says: the bucket, the scratch location, the /dev/shm field."""
    fix = (rule.cause.fix or "").replace("{job}", job).replace("HEAD_POD", p.name(pod) or "HEAD_POD")
    bucket = _BUCKET.search(line) if rule.cause is GCS_PERMISSION else None
    if bucket:
        fix = fix.replace("gs://BUCKET", f"gs://{bucket[1] or bucket[2]}")
    scratch = _scratch(pod)
    if scratch and rule.cause in (SCRATCH_BUCKET_MISSING, SCRATCH_LIFECYCLE_LIMIT):
        fix = fix.replace("SCRATCH", scratch).replace(
            "gs://BUCKET", "gs://" + scratch.removeprefix("gs://").split("/")[0]
        )
    if rule.cause is SHM_EXHAUSTED:
        fix = fix.replace("SHM_FIELD", _shm_field(pod, container))
    return fix.replace("SCRATCH", "its gs:// location")


def _scratch(pod: p.Object) -> str | None:
    """The scratch location the pod's Pathways containers were started with."""
    for c in p.containers(pod):
        for arg in c.spec.get("args") or []:
            if isinstance(arg, str) and arg.startswith(SCRATCH_ARG):
                return arg.removeprefix(SCRATCH_ARG)
    return None


def _shm_field(pod: p.Object, container: str) -> str:
    """The config field that sizes the /dev/shm of ``container``, with its size now."""
    for c in p.containers(pod):
        if c.spec.get("name") == container and (shm := p.shm_volume(c)) is not None:
            return p.shm_field(c, shm[0]) + (f" (now {shm[1]})" if shm[1] else "")
    return "tpu.shm_size" if p.role(pod) == "worker pod" else "main.shm_size"


def _image_versions(snap: Snapshot) -> list[Observation]:
    """The proxy and the Pathways servers (resource manager, workers) must come from one release: the JAX of their
    image tags (``jax-<version>``, ``<date>-jax_<version>``) must agree."""
    tags: dict[str, set[str]] = {}
    for pod in snap.pods:
        for c in p.containers(pod):
            if c.spec.get("name") in (ids.PROXY_CONTAINER, ids.RM_CONTAINER, ids.WORKER_CONTAINER):
                image = str(c.spec.get("image", ""))
                tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
                found = _RELEASE_JAX.search(tag.split("@")[0])  # jax-0.10.0, 20261001-jax_0.10.2
                if found:
                    tags.setdefault(found[1], set()).add(f"{c.spec['name']} {image}")
    if len(tags) < 2:
        return []
    evidence = "; ".join(sorted(next(iter(sorted(images))) for images in tags.values()))
    fix = "set one pathways_version, or images.proxy_server and images.server of the same release"
    return [VERSION_MISMATCH.observe("jobset", snap.name, "images", evidence, fix=fix)]
