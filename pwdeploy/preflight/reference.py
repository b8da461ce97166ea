"""Image references as docker reads them: registry host, repository, tag or digest.

``python:3.11-slim`` is ``docker.io/library/python:3.11-slim``, served by registry-1.docker.io; the first path
component is a registry host when it has a dot or a port or is ``localhost``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
# Docker's grammar (distribution/reference): lower-case path components joined by separators.
COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
TAG = re.compile(r"[\w][\w.-]{0,127}")
DIGEST = re.compile(r"[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[0-9a-fA-F]{32,}")
HOST = re.compile(r"(?:[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?")
LOOPBACK = ("localhost", "127.0.0.1", "[::1]")


class BadReference(ValueError):
    """Text that is not an image reference."""


@dataclass(frozen=True)
class ImageRef:
    registry: str  # host[:port] as written; docker.io for Docker Hub
    repository: str  # e.g. library/python, cloud-tpu-v2-images/pathways/server
    tag: str | None
    digest: str | None  # sha256:...; wins over the tag, as for docker pull

    @property
    def api_host(self) -> str:
        """Where the Registry HTTP API answers."""
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    @property
    def scheme(self) -> str:
        """Plain http only for a registry on this machine, as docker does; https everywhere else."""
        host = self.registry.rsplit(":", 1)[0] if not self.registry.endswith("]") else self.registry
        return "http" if host in LOOPBACK else "https"

    @property
    def manifest(self) -> str:
        """The tag or digest the manifest is asked for by."""
        return self.digest or self.tag or "latest"

    def manifest_url(self) -> str:
        return f"{self.base_url()}/{self.repository}/manifests/{self.manifest}"

    def tags_url(self) -> str:
        return f"{self.base_url()}/{self.repository}/tags/list"

    def base_url(self) -> str:
        return f"{self.scheme}://{self.api_host}/v2"

    @property
    def name(self) -> str:
        """registry/repository, the form `gcloud artifacts docker tags list` takes."""
        return f"{self.registry}/{self.repository}"


def parse_reference(text: str) -> ImageRef:
    """``[host[:port]/]path[:tag][@digest]``, normalised as docker does; BadReference says what is wrong."""
    rest, digest = text.split("@", 1) if "@" in text else (text, None)
    if digest is not None and not DIGEST.fullmatch(digest):
        raise BadReference(f"{digest!r} is not a digest (algorithm:hex, e.g. sha256:...)")
    head, _, last = rest.rpartition("/")
    tag = None
    if ":" in last:
        last, tag = last.split(":", 1)
        if not TAG.fullmatch(tag):
            raise BadReference(f"{tag!r} is not a valid tag")
    path = f"{head}/{last}" if head else last
    first, _, remainder = path.partition("/")
    if remainder and ("." in first or ":" in first or first == "localhost"):
        if not HOST.fullmatch(first):
            raise BadReference(f"{first!r} is not a registry host")
        registry, repository = first, remainder
    else:
        registry, repository = DOCKER_HUB, path
    if registry in (DOCKER_HUB, "index.docker.io"):
        registry = DOCKER_HUB
        if "/" not in repository:
            repository = f"library/{repository}"
    bad = [part for part in repository.split("/") if not COMPONENT.fullmatch(part)]
    if bad:
        raise BadReference(f"{bad[0]!r} is not a valid repository path component (lower case, digits, . _ -)")
    return ImageRef(registry, repository, tag, digest)
