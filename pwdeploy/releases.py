"""The Pathways releases pwdeploy knows exist: for each JAX version, the tags of the server and proxy images
(``us-docker.pkg.dev/cloud-tpu-v2-images/pathways/{server,proxy_server}:<tag>``) seen in public sources, with when
they were seen and where.

Each Pathways release is built for one JAX version (the client's jax, the proxy and the server must agree), and
Google publishes no list of them: since 0.10.1 the releases are dated tags (``YYYYMMDD-jax_<V>``), and whether a
plain ``jax-<V>`` tag exists for a version is known only where someone used it. So the default image of a job is the
newest tag seen for its JAX, never a guess; a JAX with no tag seen (a fresh install can resolve one newer than any
release) renders ``jax-<V>`` with a warning, and ``pwdeploy preflight`` asks the registry. Add a row when a newer
release is seen; the oldest rows are kept so that older jobs render as before.
"""

# Nothing of pwdeploy imported: the config's defaults read this table on render's path.
from collections.abc import Iterable
from typing import NamedTuple

REGISTRY = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways"


class Tag(NamedTuple):
    tag: str
    seen: str  # when pwdeploy's maintainers saw it in the source (YYYY-MM)
    where: str  # the public source that used it


# JAX version -> its tags, the one to default to first (the newest release that is not a release candidate).
RELEASES: dict[str, tuple[Tag, ...]] = {
    "0.11.1": (Tag("20260901-jax_0.11.1", "2026-12", "a Shared Pathways Service launch script (proxy_server)"),),
    "0.11.0": (Tag("20260911-jax_0.11.0", "2026-12", "tunix RL launch scripts on v5p (PATHWAYS_TAG)"),),
    "0.10.2": (
        Tag("20261001-jax_0.10.2", "2026-12", "a v5p bring-up log pinning server and proxy_server by digest"),
        Tag("20260730-jax_0.10.2", "2026-12", "xpk workload commands and run logs pinning it by digest"),
    ),
    "0.10.1": (
        Tag("20260623-jax_0.10.1", "2026-12", "xpk workload commands (--server-image, --proxy-server-image)"),
        Tag("20260608-jax_0.10.1", "2026-12", "xpk workload commands (--server-image, --proxy-server-image)"),
    ),
    "0.10.0": (
        Tag("jax-0.10.0", "2026-12", "pathways-job and pathways-utils manifests (proxy_server)"),
        Tag("20260512_RC00-jax_0.10.0", "2026-12", "a run log (proxy_server, a release candidate)"),
    ),
    "0.9.2": (Tag("jax-0.9.2", "2026-12", "pathways-job manifests (proxy_server)"),),
}


def version_key(version: str) -> tuple[int, ...]:
    """``0.10.2`` -> (0, 10, 2); what is not a number sorts first."""
    return tuple(int(part) if part.isdigit() else -1 for part in version.split("."))


NEWEST = max(RELEASES, key=version_key)  # the newest JAX with a Pathways release seen


def known(jax: str) -> bool:
    return jax in RELEASES


def default_tag(jax: str) -> str:
    """The tag a job of this JAX gets unless it pins its images: the newest seen, else ``jax-<V>``."""
    found = RELEASES.get(jax)
    return found[0].tag if found else f"jax-{jax}"


def nearest(jax: str, count: int = 2) -> list[str]:
    """The JAX versions with a release seen, closest to ``jax`` first."""
    return closest(RELEASES, jax, count)


def closest(versions: Iterable[str], jax: str, count: int = 2) -> list[str]:
    """Of ``versions``, the ``count`` closest to ``jax`` (by version, the older side first on a tie)."""

    def distance(version: str) -> tuple[int, ...]:
        a, b = version_key(version), version_key(jax)
        width = max(len(a), len(b))
        a, b = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
        return (*(abs(x - y) for x, y in zip(a, b, strict=True)), 0 if a <= b else 1)

    return sorted(set(versions), key=distance)[:count]


def table() -> str:
    """The Markdown table of docs/images.md."""
    rows = ["| JAX | tag (server, proxy_server) | seen | where |", "|---|---|---|---|"]
    for jax in sorted(RELEASES, key=version_key, reverse=True):
        for index, tag in enumerate(RELEASES[jax]):
            rows.append(f"| {jax if index == 0 else ''} | `{tag.tag}` | {tag.seen} | {tag.where} |")
    return "\n".join(rows) + "\n"
