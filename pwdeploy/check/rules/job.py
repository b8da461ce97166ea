"""Rules over the job config and its rendered manifests as well as the code: ``ENABLE_PATHWAYS_PERSISTENCE``
values (6) and the colocated-Python sidecar's versions against the client's (9)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from pwdeploy.check.program import Module, env_writes, literal_str
from pwdeploy.check.rule import ORBAX_MULTIHOST, PW_INIT, PW_VALIDATORS, Context, Hit, Rule

PERSISTENCE = "ENABLE_PATHWAYS_PERSISTENCE"
_TAG_JAX = re.compile(r":(?:.*[-_])?jax_([0-9]+(?:\.[0-9]+)*)")
_PIN = re.compile(r"^\s*(jax|jaxlib)\s*==\s*([0-9][0-9.]*)\s*(?:[;#].*)?$", re.IGNORECASE)


PERSISTENCE_SAID = "pathwaysutils.initialize() and Orbax accept only 1, 0 or unset and raise ValueError otherwise"


def persistence_code(module: Module) -> Iterator[Hit]:
    for node, key, value in env_writes(module):
        text = literal_str(value)
        if key == PERSISTENCE and text is not None and text not in ("1", "0"):
            yield Hit(module.shown, node.lineno, f"{module.code(node)} sets {PERSISTENCE}={text!r}: {PERSISTENCE_SAID}")


def persistence_env(context: Context) -> Iterable[Hit]:
    said = PERSISTENCE_SAID
    for container, env in context.container_envs.items():
        rendered = env.get(PERSISTENCE)
        if rendered is not None and rendered not in ("1", "0"):
            yield Hit(
                context.config_file,
                context.config_line(PERSISTENCE),
                f"the rendered container {container} sets {PERSISTENCE}={rendered!r}: {said}",
            )


def _pins(requirements: Path | None) -> Iterator[tuple[str, str, int]]:
    """(package, version, line) for each ``jax==V`` / ``jaxlib==V`` in a requirements file."""
    if requirements is None or not requirements.is_file():
        return
    try:
        lines = requirements.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return
    for number, line in enumerate(lines, start=1):
        if match := _PIN.match(line):
            yield match.group(1).lower(), match.group(2), number


def sidecar_versions(context: Context) -> Iterable[Hit]:
    job = context.job
    if job is None or not job.sidecar.enabled:
        return
    client = job.pathways_version  # the job image installs jax at pathways_version
    for field, image in (("sidecar.base_image", job.sidecar.base_image), ("sidecar.image", job.sidecar.image)):
        found = _TAG_JAX.search(image or "")
        if found and found.group(1) != client:
            yield Hit(
                context.config_file,
                context.config_line(image or ""),
                f"{field} {image} carries jax {found.group(1)}, the client runs jax "
                f"{client} (pathways_version): colocated Python refuses a sidecar whose jax differs",
            )
    for field, requirements in (
        ("image.requirements", job.image.requirements),
        ("sidecar.requirements", job.sidecar.requirements),
    ):
        for package, version, line in _pins(requirements):
            if version != client:
                where = str(requirements)
                yield Hit(
                    where,
                    line,
                    f"{field} pins {package}=={version}, but the client and the sidecar run jax "
                    f"{client} (pathways_version): colocated Python needs the same jax on both sides",
                )


RULES = (
    Rule(
        "persistence-env",
        6,
        "error",
        f"{PERSISTENCE} set to anything but 1/0",
        f"set {PERSISTENCE} to 1 (pwdeploy's default) or 0, or leave it to pwdeploy",
        f"{PW_INIT}; {ORBAX_MULTIHOST}",
        persistence_code,
        judge=persistence_env,
        needs_job=True,
    ),
    Rule(
        "sidecar-versions",
        9,
        "error",
        "colocated Python: the client's jax differs from the sidecar image's",
        "pin the sidecar base of your pathways_version (<date>-python_X.Y-jax_<pathways_version>) and drop other "
        "jax pins",
        PW_VALIDATORS,
        judge=sidecar_versions,
        needs_job=True,
    ),
)
