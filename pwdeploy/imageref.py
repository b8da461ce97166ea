"""Image references, one grammar for config, preflight and the image builds: ``[host[:port]/]path[:tag][@digest]``.

The distribution reference grammar (what docker and every OCI registry accept), ASCII only, and docker's rule for
where the registry host ends: the first of several path components is a host when it has a ``.`` or ``:`` or is
``localhost``; otherwise the image is on Docker Hub (``python:3.11-slim`` is
``docker.io/library/python:3.11-slim``, served by registry-1.docker.io). So ``host_name.io/x`` is refused: it names
a host, and ``_`` cannot be in one.

``REFERENCE_PATTERN`` is the grammar as one regular expression (the config's JSON Schema carries it); `parse_reference`
reads a reference with string methods instead, part by part, because compiling that expression costs every render
0.8 ms (tests hold the two to the same answers). Imports only ``re``, which compiles only for an error's message.
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
REFERENCE_PATTERN = rf"{REPOSITORY}(?::({TAG}))?(?:@({DIGEST}))?"

_LOWER_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_ALNUM = _LOWER_ALNUM | frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_TAG_FIRST = _ALNUM | {"_"}
_TAG_REST = _TAG_FIRST | {".", "-"}
_COMPONENT_CHARS = _LOWER_ALNUM | {".", "_", "-"}
_HOST_CHARS = _ALNUM | {"-"}
_HEX = frozenset("0123456789abcdef")
_IPV6_CHARS = _HEX | frozenset("ABCDEF:")
_DIGITS = frozenset("0123456789")
_DIGEST_LENGTHS = {"sha256": 64, "sha512": 128}


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
    parts = _split(text)
    if parts is None:
        raise BadReference(_problem(text))
    host, path, tag, digest = parts
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
    algorithm, colon, hex_digits = text.partition(":")
    return bool(colon) and len(hex_digits) == _DIGEST_LENGTHS.get(algorithm) and _HEX.issuperset(hex_digits)


def _split(text: str) -> tuple[str | None, str, str | None, str | None] | None:
    """(host or None, path, tag, digest) as ``REFERENCE_PATTERN`` reads them from ``text``; None where it does not
    match."""
    rest, at, digest = text.partition("@")
    if at and not is_digest(digest):
        return None
    first, slash, remainder = rest.partition("/")
    host = None
    if slash and ("." in first or ":" in first or first == "localhost"):  # docker's rule for a registry host
        if not _is_host(first):
            return None
        host, rest = first, remainder
    head, slash, last = rest.rpartition("/")
    last, colon, tag = last.partition(":")
    if colon and not _is_tag(tag):
        return None
    path = f"{head}{slash}{last}"
    if not all(_is_component(part) for part in path.split("/")):
        return None
    return host, path, tag if colon else None, digest if at else None


def _is_component(part: str) -> bool:
    """``[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*``: runs of lower-case letters and digits, one ``.``, ``_``, ``__``
    or any number of ``-`` between two runs."""
    if not part or part[0] not in _LOWER_ALNUM or part[-1] not in _LOWER_ALNUM or not _COMPONENT_CHARS.issuperset(part):
        return False
    if part.isalnum():
        return True
    separators = part.translate(_RUNS_TO_SPACE).split()
    return all(sep in (".", "_", "__") or sep == "-" * len(sep) for sep in separators)


_RUNS_TO_SPACE = str.maketrans(dict.fromkeys("abcdefghijklmnopqrstuvwxyz0123456789", " "))


def _is_tag(tag: str) -> bool:
    return 0 < len(tag) <= 128 and tag[0] in _TAG_FIRST and _TAG_REST.issuperset(tag)


def _is_host(host: str) -> bool:
    """``HOST``: dot-separated names of letters, digits and inner ``-``, or ``[`` IPv6 hex and colons ``]``; then
    an optional ``:port``."""
    if host.startswith("["):
        address, bracket, port = host[1:].partition("]")
        if not bracket or not address or not _IPV6_CHARS.issuperset(address):
            return False
    else:
        names, colon, digits = host.partition(":")
        port = colon + digits
        if not all(
            name and name[0] != "-" and name[-1] != "-" and _HOST_CHARS.issuperset(name) for name in names.split(".")
        ):
            return False
    return not port or (port[0] == ":" and len(port) > 1 and _DIGITS.issuperset(port[1:]))


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
