"""Images the kubelet could not pull.

Texts matched: the container's waiting reason ``ErrImagePull``, ``ImagePullBackOff`` or ``InvalidImageName``
(kubernetes/kubernetes pkg/kubelet/images/types.go) and the kubelet's ``Failed`` event ``Failed to pull image
"<ref>": ...``, whose tail is the runtime's: containerd ``failed to resolve reference "<ref>": <ref>: not found``
or ``... failed to authorize: failed to fetch oauth token: unexpected status from GET request to ...: 403
Forbidden``; Docker Hub ``pull access denied``; Artifact Registry ``denied: Permission ... denied``.
"""

from __future__ import annotations

from pwdeploy.cluster.diagnose import pods as p
from pwdeploy.cluster.diagnose.findings import Cause, Observation, quote
from pwdeploy.cluster.diagnose.read import Snapshot

PULL_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")
UNAUTHORIZED = ("403 Forbidden", "401 Unauthorized", "denied", "unauthorized", "PERMISSION_DENIED")
NOT_FOUND = ("not found", "manifest unknown", "NotFound", "InvalidImageName", "invalid reference format")

# What the causes' rules rest on (their findings' ``source``).
KUBELET_PULL = "kubernetes/kubernetes: pkg/kubelet/images/types.go (ErrImagePull, ImagePullBackOff, InvalidImageName)"

IMAGE_NOT_FOUND = Cause(
    "image-not-found", "image", "the image or its tag does not exist", severity="error", source=KUBELET_PULL
)
IMAGE_UNAUTHORIZED = Cause(
    "image-unauthorized",
    "image",
    "403/401/denied: the node pool's service account needs `roles/artifactregistry.reader`",
    severity="error",
    fix="the node pool's service account may not pull from the registry: grant it roles/artifactregistry.reader "
    "(gcloud artifacts repositories add-iam-policy-binding REPO --location LOCATION "
    "--member serviceAccount:NODE_SA --role roles/artifactregistry.reader); check: pwdeploy preflight -f job.yaml",
    source=KUBELET_PULL,
)
IMAGE_PULL = Cause("image-pull", "image", "another pull failure (warning)", severity="warning", source=KUBELET_PULL)


def observations(snap: Snapshot) -> list[Observation]:
    failed = _pull_failures(snap)
    found = []
    for pod in snap.pods:
        for c in p.containers(pod):
            waiting = (c.status.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") not in PULL_REASONS:
                continue
            image = str(c.spec.get("image", ""))
            message = failed.get(p.name(pod)) or str(waiting.get("message") or waiting.get("reason"))
            found.append(_observation(c, image, message))
    return found


def _pull_failures(snap: Snapshot) -> dict[str, str]:
    """pod -> the latest ``Failed to pull image`` message (the waiting message of ImagePullBackOff says only
    ``Back-off pulling image``)."""
    found: dict[str, str] = {}
    for e in snap.events:
        message = str(e.get("message", ""))
        if e.get("reason") == "Failed" and "Failed to pull image" in message:
            found[str((e.get("involvedObject") or {}).get("name", ""))] = message
    return found


def _observation(c: p.Container, image: str, message: str) -> Observation:
    container = str(c.spec.get("name", ""))
    field = p.IMAGE_FIELD.get(container, "the container's image")
    pod, role = p.name(c.pod), p.role(c.pod)
    evidence = f"container {container} image {image}: {quote(message)}"
    if any(part in message for part in UNAUTHORIZED):
        return IMAGE_UNAUTHORIZED.observe(role, pod, image, evidence)
    if (
        any(part in message for part in NOT_FOUND)
        or c.status.get("state", {}).get("waiting", {}).get("reason") == "InvalidImageName"
    ):
        fix = f"the image or tag does not exist: push it, or fix {field}; check: pwdeploy preflight -f job.yaml"
        return IMAGE_NOT_FOUND.observe(role, pod, image, evidence, fix=fix)
    fix = f"the pull keeps failing (see the message: network, rate limit, registry outage); check {field}"
    return IMAGE_PULL.observe(role, pod, image, evidence, fix=fix)
