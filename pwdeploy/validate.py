"""Validate Kubernetes manifests before they reach a cluster: the schemas (the JobSet envelope shipped with
pwdeploy, the Kubernetes OpenAPI schemas for everything else, strict) and the rules that the JobSet admission
webhook and the API server enforce beyond them.

Problems are lines ``Kind/name: field.path: what is wrong``; an empty list means valid.

The Kubernetes schemas come from the installed kubernetes-validate; the parts used are kept in a per-user cache
(``$XDG_CACHE_HOME/pwdeploy``, else ``~/.cache/pwdeploy``) so that a render does not parse all of them again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from pwdeploy.errors import ConfigError, ValidationError
from pwdeploy.validation.objects import label, object_problems
from pwdeploy.validation.schemas import resolve_version

DEFAULT_KUBERNETES_VERSION = "1.31"


def validate_objects(objects: Sequence[Any], *, kubernetes_version: str = DEFAULT_KUBERNETES_VERSION) -> list[str]:
    """Every problem in ``objects``, one line each; ConfigError when ``kubernetes_version`` is unsupported."""
    version = resolve_version(kubernetes_version)
    lines = [
        f"{label(obj, index)}: {problem}"
        for index, obj in enumerate(objects)
        for problem in object_problems(obj, version)
    ]
    return list(dict.fromkeys(lines))


class FilesReport(NamedTuple):
    objects: int  # how many objects the files hold
    problems: list[str]  # each prefixed by its file; empty when every object is valid


def require_valid(objects: Sequence[Any], *, kubernetes_version: str = DEFAULT_KUBERNETES_VERSION) -> None:
    """Raise ValidationError (exit 3) listing every problem, when there is one."""
    problems = validate_objects(objects, kubernetes_version=kubernetes_version)
    if problems:
        raise ValidationError(problems)


def validate_files(paths: Iterable[str | Path], *, kubernetes_version: str = DEFAULT_KUBERNETES_VERSION) -> FilesReport:
    """Every problem in the manifests in ``paths`` (``-`` is standard input), each line prefixed by its file.

    A missing or unreadable file, one that is not YAML/JSON, or one that holds no object raises ConfigError.
    """
    from pwdeploy.validation.files import load_documents

    count, problems = 0, []
    for path in paths:
        name = "<stdin>" if str(path) == "-" else str(path)
        objects = load_documents(path)
        if not objects:
            raise ConfigError(name, "holds no Kubernetes objects")
        count += len(objects)
        problems += [f"{name}: {line}" for line in validate_objects(objects, kubernetes_version=kubernetes_version)]
    return FilesReport(count, problems)
