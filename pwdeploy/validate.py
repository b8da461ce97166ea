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
from typing import Any

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


def validate_files(paths: Iterable[str | Path], *, kubernetes_version: str = DEFAULT_KUBERNETES_VERSION) -> list[str]:
    """Every problem in the manifests in ``paths`` (``-`` is standard input), each line prefixed by its file.

    A missing or unreadable file, or one that is not YAML/JSON, raises ConfigError.
    """
    from pwdeploy.validation.files import load_documents

    problems: list[str] = []
    for path in paths:
        name = "<stdin>" if str(path) == "-" else str(path)
        found = validate_objects(load_documents(path), kubernetes_version=kubernetes_version)
        problems += [f"{name}: {line}" for line in found]
    return problems
