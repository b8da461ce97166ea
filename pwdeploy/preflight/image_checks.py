"""The image source of preflight: does every image the job references exist in its registry?

Proxy and server (pinned or derived), main (unless headless), the sidecar and the HLO uploader (with an HLO
dump), each looked up once however many fields name it, all at once in a thread pool. Found: ok with the digest.
A missing tag or repository: failed, with the fix; so is a repository (``image.repository``,
``sidecar.repository``) with no pushed image that matches the job. No answer, refused access or anything
unexpected: not verified, never ok.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from pwdeploy import releases
from pwdeploy.config import JobConfig
from pwdeploy.imageref import BadReference, ImageRef, parse_reference
from pwdeploy.registry.client import Lookup
from pwdeploy.registry.credentials import is_google_registry
from pwdeploy.report import PreflightRow, Status

MAX_THREADS = 8
SHOWN_TAGS = 3
# What an image row rests on: the registry's manifest endpoint (a HEAD or GET of the tag or digest).
MANIFEST_API = "https://github.com/opencontainers/distribution-spec/blob/main/spec.md#pulling-manifests"
VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?")
_JAX_TAG = re.compile(r"jax[-_]([0-9]+\.[0-9]+\.[0-9]+)")  # a Pathways release: jax-0.10.0, 20260730-jax_0.10.2

ImageLookup = Callable[[ImageRef], Lookup]  # RegistryClient.lookup, or anything that answers like it


def job_images(job: JobConfig) -> dict[str, tuple[str, ...]]:
    """Every image reference the job's pods would pull, with the config fields that name it, in manifest order."""
    named = [("images.proxy_server", job.proxy_image), ("images.server", job.server_image)]
    if job.images.worker is not None:  # unset: the workers run the server image
        named.append(("images.worker", job.images.worker))
    if not job.headless and job.main.image is not None:
        named.append(("main.image", job.main.image))
    if job.sidecar.image is not None:
        named.append(("sidecar.image", job.sidecar.image))
    if job.storage.hlo_dump is not None:
        named.append(("storage.hlo_uploader_image", job.storage.hlo_uploader_image))
    found: dict[str, tuple[str, ...]] = {}
    for field, image in named:
        found[image] = (*found.get(image, ()), field)
    return found


def check_images(job: JobConfig, lookup: ImageLookup, *, threads: int = MAX_THREADS) -> list[PreflightRow]:
    """One ``image`` row per referenced image; ``lookup`` asks the registry (the seam)."""
    images = job_images(job)
    rows = []
    if not job.headless and job.image.repository and job.main.image is None:
        rows.append(_unpushed_row(job.image.repository, "image.repository", "job", "image", "main.image"))
    if job.sidecar.repository and job.sidecar.image is None:
        rows.append(_unpushed_row(job.sidecar.repository, "sidecar.repository", "sidecar", "sidecar", "sidecar.image"))
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(images)))) as pool:
        checked = list(pool.map(lambda item: check_image(item[0], item[1], lookup), images.items()))
    return [*checked, *rows]


def check_image(image: str, fields: tuple[str, ...], lookup: ImageLookup) -> PreflightRow:
    def row(status: Status, detail: str, fix: str | None = None) -> PreflightRow:
        return PreflightRow("image", status, image, detail, fix, MANIFEST_API, fields)

    try:
        ref = parse_reference(image)
    except BadReference as exc:
        return row(Status.FAILED, f"not an image reference: {exc}", f"correct {' / '.join(fields)}")
    found = lookup(ref)
    asked = f" (asked {found.how})"
    if found.kind == "found":
        return row(Status.OK, f"exists, digest {found.detail}{asked}")
    if found.kind == "manifest_unknown":
        return row(Status.FAILED, found.detail + _some_tags(ref, found.tags) + asked, _missing_fix(ref, fields))
    if found.kind == "name_unknown":
        return row(Status.FAILED, found.detail + asked, _missing_fix(ref, fields))
    return row(Status.NOT_VERIFIED, found.detail, _access_fix(ref, found))


def _some_tags(ref: ImageRef, tags: tuple[str, ...]) -> str:
    """A few existing tags: for a Pathways release tag (``...jax_<V>`` / ``jax-<V>``), those of the same JAX, else
    of the nearest JAX versions the repository has; otherwise those sharing the missing tag's version first."""
    if not tags:
        return ""
    wanted = _JAX_TAG.search(ref.tag or "")
    if wanted is not None:
        return _release_tags(tags, wanted[1])
    version = VERSION.search(ref.tag or "")
    alike = [t for t in tags if version and version.group(0) in t]
    shown = sorted(alike or tags)[-SHOWN_TAGS:]
    return f"; it has {len(tags)} tag(s), e.g. {', '.join(shown)}"


def _release_tags(tags: tuple[str, ...], jax: str) -> str:
    by_jax: dict[str, list[str]] = {}
    for tag in tags:
        if (found := _JAX_TAG.search(tag)) is not None:
            by_jax.setdefault(found[1], []).append(tag)
    if jax in by_jax:
        return f"; it has {len(tags)} tag(s); for jax {jax}: {', '.join(sorted(by_jax[jax])[-SHOWN_TAGS:])}"
    near = [f"jax {v}: {', '.join(sorted(by_jax[v])[-3:])}" for v in releases.closest(by_jax, jax)]
    nearby = f"; nearest: {'; '.join(near)}" if near else ""
    return f"; it has {len(tags)} tag(s), none for jax {jax}{nearby}"


def _missing_fix(ref: ImageRef, fields: tuple[str, ...]) -> str:
    steps: list[str] = []
    if is_google_registry(ref.registry):
        command = "container images list-tags" if "gcr.io" in ref.registry else "artifacts docker tags list"
        steps.append(f"list the tags: gcloud {command} {ref.name}")
    if "images.server" in fields or "images.proxy_server" in fields:
        flags = [
            flag
            for field, flag in (("images.server", "--server-image"), ("images.proxy_server", "--proxy-server-image"))
            if field in fields
        ]
        steps.append(f"pin an existing one with {' / '.join(flags)} ({' / '.join(fields)})")
    if "sidecar.image" in fields:
        steps.append("push it: pwdeploy sidecar build --push (or correct sidecar.image)")
    if "storage.hlo_uploader_image" in fields:
        steps.append("set --hlo-uploader-image (storage.hlo_uploader_image) to an existing image that has gcloud")
    if "main.image" in fields:
        pushed = f"{ref.name}:{ref.tag}" if ref.tag and not ref.digest else ref.name
        steps.append(f"push it (docker push {pushed}) or correct main.image (--image)")
    return "; ".join(steps)


def _access_fix(ref: ImageRef, found: Lookup) -> str | None:
    if found.kind == "denied":
        if is_google_registry(ref.registry):
            return (
                f"gcloud auth configure-docker {ref.registry.split('/')[0]} (or gcloud auth application-default "
                "login); reading needs roles/artifactregistry.reader"
            )
        return f"docker login {ref.registry}"
    if found.kind == "unreachable":
        return f"check network access to {ref.api_host}"
    return None


def _unpushed_row(repository: str, field: str, what: str, command: str, image_field: str) -> PreflightRow:
    return PreflightRow(
        "image",
        Status.FAILED,
        repository,
        f"no pushed {what} image matches the current inputs",
        f"pwdeploy {command} build --push, or set {image_field}",
        "docs/images.md (an image is pinned from the lock of the images built and pushed from these inputs)",
        fields=(field,),
    )
