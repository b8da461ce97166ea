"""Validate Kubernetes manifests before they reach a cluster: the schemas (the JobSet envelope shipped with
pwdeploy, the Kubernetes OpenAPI schemas for everything else, strict) and the rules that the JobSet admission
webhook and the API server enforce beyond them.

Each problem is a finding (``pwdeploy.finding.Finding``: the rule that found it, severity error, where
``Kind/name: field.path`` (after the file's name, when read from one), what is wrong, the rule's source); an empty
list means valid.

The Kubernetes schemas come from the installed kubernetes-validate; the parts used are kept in a per-user cache
(``$XDG_CACHE_HOME/pwdeploy``, else ``~/.cache/pwdeploy``) so that a render does not parse all of them again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pwdeploy.errors import ConfigError, ValidationError
from pwdeploy.validation.objects import label, object_problems
from pwdeploy.validation.schemas import resolve_version

if TYPE_CHECKING:
    from pwdeploy.finding import Finding

DEFAULT_KUBERNETES_VERSION = "1.31"


def validate_objects(
    objects: Sequence[Any], *, kubernetes_version: str = DEFAULT_KUBERNETES_VERSION, file: str = ""
) -> list[Finding]:
    """Every problem in ``objects``, one finding each (where: ``file: Kind/name: path``, the file when given);
    ConfigError when ``kubernetes_version`` is unsupported."""
    version = resolve_version(kubernetes_version)
    found = [(label(obj, i), problem) for i, obj in enumerate(objects) for problem in object_problems(obj, version)]
    if not found:
        return []
    from pwdeploy.finding import Finding  # only for a problem: render never pays for it
    from pwdeploy.validation.problems import RULES

    findings = (
        Finding(p.rule, "error", ": ".join(filter(None, (file, obj, p.path))), p.message, source=RULES[p.rule])
        for obj, p in found
    )
    return list(dict.fromkeys(findings))


def require_valid(objects: Sequence[Any], *, kubernetes_version: str = DEFAULT_KUBERNETES_VERSION) -> None:
    """Raise ValidationError (exit 3) listing every problem, when there is one."""
    problems = validate_objects(objects, kubernetes_version=kubernetes_version)
    if problems:
        raise ValidationError(problems)


def read_manifests(paths: Iterable[str | Path]) -> dict[str, list[Any]]:
    """The objects in each file (``-`` is standard input), by file name.

    ConfigError when no file is given, or a file is missing, unreadable, not YAML/JSON or holds no object: an
    empty result is never returned, so that nothing unchecked passes as valid.
    """
    from pwdeploy.validation.files import load_documents

    found: dict[str, list[Any]] = {}
    for path in paths:
        name = "<stdin>" if str(path) == "-" else str(path)
        objects = load_documents(path)
        if not objects:
            raise ConfigError(None, "holds no Kubernetes objects", source=name)
        found[name] = found.get(name, []) + objects
    if not found:
        raise ConfigError(None, "no manifest files given")
    return found


def file_problems(
    manifests: dict[str, list[Any]], *, kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
) -> list[Finding]:
    """Every problem in ``manifests`` (from read_manifests), each placed in its file; empty: all valid."""
    return [
        finding
        for name, objects in manifests.items()
        for finding in validate_objects(objects, kubernetes_version=kubernetes_version, file=name)
    ]


def validate_files(
    paths: Iterable[str | Path], *, kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
) -> list[Finding]:
    """Every problem in the manifests in ``paths``, one finding each placed in its file; an empty list means valid.

    A missing or unreadable file, one that is not YAML/JSON or holds no object, or no file at all raises
    ConfigError (see read_manifests) rather than returning an empty list.
    """
    return file_problems(read_manifests(paths), kubernetes_version=kubernetes_version)
