"""Image references, one grammar for config, preflight and the image builds: ``[host[:port]/]path[:tag][@digest]``.

The distribution reference grammar (what docker and every OCI registry accept), ASCII only, and docker's rule for
where the registry host ends: the first of several path components is a host when it has a ``.`` or ``:`` or is
``localhost``; otherwise the image is on Docker Hub (``python:3.11-slim`` is
``docker.io/library/python:3.11-slim``, served by registry-1.docker.io). So ``host_name.io/x`` is refused: it names
a host, and ``_`` cannot be in one. Imports only ``re``: config parsing uses it on every render.
"""

from __future__ import annotations

import re
from typing import NamedTuple

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
LOOPBACK = ("localhost", "127.0.0.1", "[::1]")
NAME_MAX = 255  # characters of host/path, as docker limits them

_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
# The OCI image spec's registered algorithms, lower-case hex as it requires (and as docker's digest parser checks):
# https://github.com/opencontainers/image-spec/blob/main/descriptor.md#registered-algorithms
DIGEST = r"(?:sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})"
# Lookaheads, not named groups, so the same text serves as a JSON Schema pattern (ECMA 262).
_NAMES_HOST = r"(?=[^/]*[.:]|localhost/)"
_NAMES_NO_HOST = r"(?![^/]*[.:][^/]*/|localhost/)"
REPOSITORY = rf"(?:{_NAMES_HOST}({HOST})/|{_NAMES_NO_HOST})({COMPONENT}(?:/{COMPONENT})*)"
# Groups: 1 host (None on Docker Hub), 2 path, 3 tag, 4 digest.
REFERENCE = re.compile(rf"{REPOSITORY}(?::({TAG}))?(?:@({DIGEST}))?")


class BadReference(ValueError):
    """Text that is not an image reference; the message says which part is wrong."""


class ImageRef(NamedTuple):  # a NamedTuple: a dataclass would import dataclasses into every render
    registry: str  # host[:port] as written; docker.io for Docker Hub
    repository: str  # e.g. library/python, cloud-tpu-v2-images/pathways/server
    tag: str | None
    digest: str | None  # algorithm:hex; wins over the tag, as for docker pull

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
    match = REFERENCE.fullmatch(text)
    if match is None:
        raise BadReference(_problem(text))
    host, path, tag, digest = match.groups()
    if len(path) + (len(host) + 1 if host else 0) > NAME_MAX:
        raise BadReference(f"the name is longer than {NAME_MAX} characters")
    registry, repository = host or DOCKER_HUB, path
    if registry in (DOCKER_HUB, "index.docker.io"):
        registry = DOCKER_HUB
        if "/" not in repository:
            repository = f"library/{repository}"
    return ImageRef(registry, repository, tag, digest)


def is_digest(text: str) -> bool:
    """Whether ``text`` is a content digest as the OCI image spec writes one (sha256 or sha512, lower-case hex)."""
    return re.fullmatch(DIGEST, text) is not None


def repository_problem(repository: str) -> str | None:
    """Why ``repository`` is not a bare repository to tag and push (it has a tag or digest, or breaks the grammar),
    or None."""
    if "@" in repository or ":" in repository.rsplit("/", 1)[-1]:
        return f"{repository!r} has a tag or digest; give the repository only (builds tag it with the inputs hash)"
    try:
        parse_reference(repository)
    except BadReference as exc:
        return f"{repository!r} is not a Docker repository ({exc})"
    return None


def _problem(text: str) -> str:
    """Which part of a text the grammar refused, for the message (only on errors: nothing compiled at import)."""
    rest, digest = text.split("@", 1) if "@" in text else (text, None)
    if digest is not None and not re.fullmatch(DIGEST, digest):
        return f"{digest!r} is not a digest (sha256: and 64 lower-case hex digits, or sha512: and 128)"
    head, _, last = rest.rpartition("/")
    if ":" in last:
        last, tag = last.split(":", 1)
        if not re.fullmatch(TAG, tag):
            return f"{tag!r} is not a valid tag (ASCII letters, digits, '_', '.', '-'; at most 128)"
    name = f"{head}/{last}" if head else last
    first, _, remainder = name.partition("/")
    names_host = bool(remainder) and (re.search(r"[.:]", first) is not None or first == "localhost")
    if names_host and not re.fullmatch(HOST, first):
        return f"{first!r} is not a registry host (ASCII letters, digits, '-' and '.', an optional :port)"
    bad = next(
        (part for part in (remainder if names_host else name).split("/") if not re.fullmatch(COMPONENT, part)), None
    )
    if bad is not None:
        return f"{bad!r} is not a valid repository path component (lower-case ASCII letters, digits, . _ -)"
    return "not an image reference"
