"""Does the sidecar's base image exist? Asked before a build, with preflight's registry check, so a wrong
``sidecar.base_release`` is an error that lists the releases there are, not a failed pull in the build's log.

A base the engine already has is not asked for (a stand-in or a mirror). The registry's answer decides only when
it is an answer: a missing tag or repository is a ConfigError; no answer, refused access or a strange answer is a
warning, and the build goes on (the engine may still reach the base).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from pwdeploy.config import JobConfig
from pwdeploy.errors import ConfigError
from pwdeploy.imageref import BadReference, ImageRef, parse_reference
from pwdeploy.images.engine import Engine

if TYPE_CHECKING:  # the registry client imports requests: only a build that asks pays for it
    from pwdeploy.registry.client import Lookup

SHOWN_TAGS = 8
_RELEASE = re.compile(r"(?P<date>[0-9]{8})-python_(?P<python>[0-9]+\.[0-9]+)-jax_(?P<jax>[0-9.]+)")

ImageLookup = Callable[[ImageRef], "Lookup"]


def default_lookup() -> ImageLookup:
    from pwdeploy.registry.client import RegistryClient
    from pwdeploy.registry.credentials import Credentials

    return RegistryClient(Credentials().for_registry).lookup


def check_base_exists(
    job: JobConfig, image: str, python: str, engine: Engine, lookup: ImageLookup | None = None
) -> tuple[str, ...]:
    """() when the engine or the registry has ``image``; a warning when the registry could not say; ConfigError
    naming the base's field, with the tags the repository has for this JAX and ``python``, when it is missing."""
    if engine.image_labels(image) is not None:
        return ()
    try:
        ref = parse_reference(image)
    except BadReference:
        return ()  # the config's grammar already refused such a base; nothing to ask
    found = (lookup or default_lookup())(ref)
    if found.kind == "found":
        return ()
    if found.kind not in ("manifest_unknown", "name_unknown"):
        return (f"could not check that the sidecar base {image} exists ({found.detail}); building anyway",)
    field = "sidecar.base_image" if job.sidecar.base_image else "sidecar.base_release"
    raise ConfigError(
        field,
        f"the sidecar base {image} does not exist: {found.detail}{_tags(found.tags, job.pathways_version, python)}",
        hint=f"list the tags: gcloud artifacts docker tags list {ref.name}; "
        + (
            "set sidecar.base_image to one of them"
            if job.sidecar.base_image
            else "set sidecar.base_release (--sidecar-base-release) to the date of one of them"
        ),
    )


def _tags(tags: tuple[str, ...], jax: str, python: str) -> str:
    """The repository's tags for this JAX and Python, newest release first, at most SHOWN_TAGS; else for this
    JAX; else nothing."""
    if not tags:
        return ""
    releases = [(m, tag) for tag in tags if (m := _RELEASE.fullmatch(tag)) and m.group("jax") == jax]
    same = [tag for m, tag in releases if m.group("python") == python] or [tag for _, tag in releases]
    if not same:
        return f"; it has {len(tags)} tag(s), none for jax {jax}"
    shown = sorted(same, reverse=True)[:SHOWN_TAGS]
    more = f" (and {len(same) - len(shown)} more)" if len(same) > len(shown) else ""
    return f"; tags there for jax {jax}: {', '.join(shown)}{more}"
