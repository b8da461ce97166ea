"""The config constraints on the job's images: the registry the Pathways images are derived from, the JAX version
they are for (the installed jax's, unless told otherwise) and the tags of pinned ones, every pinned image by digest
or tag, the repositories builds push to, and main's image (or the lock that supplies it)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pwdeploy import releases
from pwdeploy.config.values import check_image_pinned
from pwdeploy.errors import ConfigError
from pwdeploy.imageref import BadReference, parse_reference, repository_problem

VERSION = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")
_TAG_JAX = re.compile(r":(?:.*[-_])?jax[-_]([0-9]+\.[0-9]+\.[0-9]+)$")  # server:jax-0.10.2, :20260730-jax_0.10.2
OTHER_PINNED = ("sidecar.image", "storage.hlo_uploader_image")
PATHWAYS_IMAGES = ("images.server", "images.proxy_server", "images.worker")

# The fields each constraint reads (pwdeploy.config.constraints lists them with it).
REGISTRY_FIELDS = ("image_registry",)
VERSION_FIELDS = ("pathways_version", "allow_version_mismatch")
PINNED_FIELDS = (*PATHWAYS_IMAGES, *OTHER_PINNED)
TAG_FIELDS = (*PATHWAYS_IMAGES, "pathways_version", "allow_version_mismatch")
REPOSITORY_FIELDS = ("image.repository", "sidecar.repository")
MAIN_IMAGE_FIELDS = ("headless", "main.image", "image.repository")


def image_registry(parsed: Mapping[str, Any]) -> None:
    """The prefix of the derived Pathways images (<image_registry>/server:jax-<V>): a registry path, checked as
    the images it makes."""
    registry = parsed["image_registry"]
    problem = None
    if "://" in registry:
        problem = "has a scheme; give host/path without it, e.g. us-docker.pkg.dev/cloud-tpu-v2-images/pathways"
    elif registry.endswith("/"):
        problem = "ends in '/'; drop it (the image names are appended after a '/')"
    else:
        try:
            parse_reference(f"{registry}/server:jax-0.0.0")
        except BadReference as exc:
            problem = f"is not a registry path such as us-docker.pkg.dev/cloud-tpu-v2-images/pathways ({exc})"
    if problem is not None:
        raise ConfigError("image_registry", f"{registry!r} {problem}")


def pathways_version(parsed: Mapping[str, Any], installed: str | None) -> dict[str, Any]:
    version = parsed["pathways_version"]
    if version is None:  # the installed jax; without one, the newest JAX with a Pathways release seen
        version = installed if installed is not None else releases.NEWEST
    if not VERSION.fullmatch(version):
        hint = None
        if re.fullmatch(r"[0-9]+\.[0-9]+", version):  # what YAML makes of an unquoted 0.10: the number 0.1
            hint = 'quote it in YAML (pathways_version: "0.10.2"); unquoted, 0.10 reads as the number 0.1'
        raise ConfigError("pathways_version", f"{version!r} is not a JAX version such as 0.10.2", hint=hint)
    if installed is not None and version != installed and not parsed["allow_version_mismatch"]:
        raise ConfigError(
            "pathways_version",
            f"{version} does not match the installed jax {installed}; the client's jax, the proxy and the "
            "server must agree",
            hint=f"install jax=={version}, drop --pathways-version, or pass --allow-version-mismatch",
        )
    return {"pathways_version": str(version)}


def pinned_images(parsed: Mapping[str, Any]) -> None:
    for path in ("images.server", "images.proxy_server", "images.worker", *OTHER_PINNED):
        if parsed[path] is not None:
            check_image_pinned(parsed[path], path)


def pathways_tags(parsed: Mapping[str, Any]) -> None:
    """A pinned server or proxy whose tag names another JAX version than the job's: the classic failed start."""
    if parsed["allow_version_mismatch"] or parsed["pathways_version"] is None:
        return
    for path in ("images.server", "images.proxy_server", "images.worker"):
        image = parsed[path]
        found = _TAG_JAX.search(image.split("@")[0].rsplit("/", 1)[-1]) if image else None
        if found and found.group(1) != parsed["pathways_version"]:
            raise ConfigError(
                path,
                f"{image} is a Pathways release for jax {found.group(1)}, but pathways_version is "
                f"{parsed['pathways_version']}; the client's jax, the proxy and the server must agree",
                hint=f"pin the release of jax {parsed['pathways_version']} (tags *-jax_{parsed['pathways_version']}), "
                "or pass --allow-version-mismatch",
            )


def repositories(parsed: Mapping[str, Any]) -> None:
    """Where `pwdeploy image build` and `sidecar build` push: a bare repository, checked before any build."""
    for path in ("image.repository", "sidecar.repository"):
        problem = repository_problem(parsed[path]) if parsed[path] is not None else None
        if problem is not None:
            raise ConfigError(path, problem)


def main_image(parsed: Mapping[str, Any]) -> None:
    if parsed["headless"]:
        return
    if parsed["main.image"] is None:
        if parsed["image.repository"] is not None:  # the image lock supplies it (pwdeploy image build --push)
            return
        raise ConfigError(
            "main.image", "is required (unless headless or image.repository is set); set it or pass --image"
        )
    check_image_pinned(parsed["main.image"], "main.image")
