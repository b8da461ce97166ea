"""Reading kubeconfig files as kubectl reads them (client-go's clientcmd loading rules), without the client library.

- ``--kubeconfig FILE`` is the only file read; ``$KUBECONFIG`` is a list (``a:b``) whose missing files are skipped
  and whose repeated files are read once; without either, ``~/.kube/config``.
- Merging: the first file that sets ``current-context`` wins, and the first cluster, user or context of a name
  wins (a later file cannot override an earlier one: "the first file to set a particular map key wins",
  https://kubernetes.io/docs/concepts/configuration/organize-cluster-access-kubeconfig/#merging-kubeconfig-files).
  The Kubernetes client's own merger lets the last file set current-context, which is why this one exists.
- A relative path in a file (``certificate-authority``, ``client-certificate``, ``client-key``, ``tokenFile``, and
  an exec plugin's ``command`` when it has a ``/``) is relative to the directory of the file that names it.
- ``--context`` picks a context whatever current-context says (missing, empty, or naming a context that is gone).

The result, ``Resolved``, is one context with its cluster and user; ``minified`` is the one-context kubeconfig
the client is given (what ``kubectl config view --minify`` prints).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NamedTuple

from pwdeploy.errors import ArgumentError, ConfigError

KINDS = ("clusters", "users", "contexts")
PATH_KEYS = {"clusters": ("certificate-authority",), "users": ("client-certificate", "client-key", "tokenFile")}
NOT_A_KUBECONFIG = "it is not a kubeconfig (a YAML mapping with clusters, contexts and users, each a mapping)"


class Origin(NamedTuple):
    """How to name the kubeconfig in an error: the argument (``kubeconfig``, the command line's --kubeconfig), the
    variable (KUBECONFIG), or neither."""

    field: str | None
    source: str | None
    location: str  # the file, or the KUBECONFIG value

    def error(self, message: str, *, hint: str | None = None) -> ConfigError:
        """A problem of the kubeconfig: the caller's wrong argument when it was given as one."""
        kind = ArgumentError if self.field else ConfigError
        return kind(self.field, message, hint=hint, source=self.source)


class Merged:
    """The named entries of every file read (first of a name wins), and the first current-context set."""

    __slots__ = ("current_context", "entries", "files")

    def __init__(self, files: list[Path]) -> None:
        self.entries: dict[str, dict[str, dict[str, Any]]] = {kind: {} for kind in KINDS}
        self.current_context = ""
        self.files = files


class Resolved(NamedTuple):
    """One context of a merged kubeconfig, with its cluster and user (``{}`` when the context names no user)."""

    context: str
    cluster_name: str
    cluster: dict[str, Any]
    user_name: str
    user: dict[str, Any]
    namespace: str  # the context's namespace, or "default"

    def minified(self, user: dict[str, Any] | None = None) -> dict[str, Any]:
        """The one-context kubeconfig of this resolution (``user`` replaces the user entry when given)."""
        context = {"cluster": self.cluster_name, "user": self.user_name, "namespace": self.namespace}
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": self.cluster_name, "cluster": dict(self.cluster)}],
            "users": [{"name": self.user_name, "user": dict(self.user if user is None else user)}],
            "contexts": [{"name": self.context, "context": context}],
            "current-context": self.context,
        }


def kubeconfig_files(value: str) -> list[Path]:
    """The existing files of a ``$KUBECONFIG`` list, in order, each once (``~`` expanded)."""
    seen: list[Path] = []
    for part in value.split(os.pathsep):
        path = Path(part).expanduser() if part.strip() else None
        if path is not None and path.is_file() and path.absolute() not in [p.absolute() for p in seen]:
            seen.append(path)
    return seen


def merge(paths: list[Path], origin: Origin) -> Merged:
    """Read and merge ``paths`` as kubectl does; a file that is not YAML or not a kubeconfig is a ``ConfigError``."""
    merged = Merged(files=list(paths))
    for path in paths:
        data = _read(path, origin)
        for kind in KINDS:
            for entry in _entries(data, kind, path, origin):
                merged.entries[kind].setdefault(str(entry["name"]), _absolute(kind, entry, path))
        current = data.get("current-context")
        if not merged.current_context and isinstance(current, str) and current:
            merged.current_context = current
    return merged


def resolve(merged: Merged, context: str | None, origin: Origin) -> Resolved:
    """The context ``context`` (``--context``), else the current-context, with its cluster and user."""
    contexts = merged.entries["contexts"]
    available = ", ".join(contexts) or "none"
    if context is not None and context not in contexts:
        raise ArgumentError("context", f"{context!r} is not a context in {origin.location}; available: {available}")
    name = context or merged.current_context
    if not name:
        raise ArgumentError("context", f"{origin.location} sets no current-context; pass one of: {available}")
    if name not in contexts:
        raise ArgumentError(
            "context",
            f"the current-context {name!r} of {origin.location} is not a context in it; pass one of: {available}",
        )
    body = contexts[name].get("context")
    if not isinstance(body, dict) or not isinstance(body.get("cluster"), str) or not body["cluster"]:
        raise _unusable(name, origin, "the context names no cluster")
    cluster = merged.entries["clusters"].get(body["cluster"])
    if cluster is None or not isinstance(cluster.get("cluster"), dict):
        raise _unusable(name, origin, f"its cluster {body['cluster']!r} is not in the kubeconfig")
    user_name = body.get("user") if isinstance(body.get("user"), str) else ""
    if user_name and user_name not in merged.entries["users"]:  # kubectl: "cannot locate user"
        raise _unusable(name, origin, f"its user {user_name!r} is not in the kubeconfig")
    user = merged.entries["users"].get(user_name or "", {}).get("user", {})
    if not isinstance(user, dict):
        raise _unusable(name, origin, NOT_A_KUBECONFIG)
    if not isinstance(cluster["cluster"].get("server"), str) or not cluster["cluster"]["server"]:
        raise _unusable(name, origin, f"its cluster {body['cluster']!r} has no server")
    namespace = body.get("namespace") if isinstance(body.get("namespace"), str) and body.get("namespace") else None
    return Resolved(name, body["cluster"], cluster["cluster"], user_name or "", user, namespace or "default")


def _unusable(name: str, origin: Origin, why: str) -> ConfigError:
    from pwdeploy.kube.api_errors import GET_CREDENTIALS

    return origin.error(f"cannot use context {name!r} of {origin.location}: {why}", hint=GET_CREDENTIALS)


def _read(path: Path, origin: Origin) -> dict[str, Any]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when installed: 25x faster on a large file
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise _unreadable(path, origin, f"{where}{exc.problem or exc.context}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise _unreadable(path, origin, str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    try:
        too_big = expanded_size(data) > MAX_EXPANDED_NODES
    except RecursionError:
        raise _unreadable(path, origin, "it is nested too deeply to be a kubeconfig") from None
    if too_big:
        raise _unreadable(
            path,
            origin,
            f"it uses YAML aliases that would expand to more than {MAX_EXPANDED_NODES:,} values (an alias bomb); "
            "kubectl refuses it too (document contains excessive aliasing)",
        )
    if data is None:
        return {}  # an empty file is an empty kubeconfig, as kubectl reads it
    if not isinstance(data, dict):
        raise _unreadable(path, origin, NOT_A_KUBECONFIG)
    return data


# What a kubeconfig may expand to. PyYAML shares an alias's value instead of copying it, so a "billion laughs"
# file loads at once and explodes later, in whatever walks it (a plugin's args, the client library). kubectl's
# YAML decoder (go-yaml v3 decode.go, allowedAliasRatio) refuses a document whose aliases expand it past a
# ratio; counting the expanded values is the same bound, in one pass over the distinct ones.
MAX_EXPANDED_NODES = 1_000_000


def expanded_size(data: Any) -> int:
    """How many values ``data`` holds once every alias is expanded (shared containers counted each time)."""
    sizes: dict[int, int] = {}

    def size(value: Any) -> int:
        if not isinstance(value, (dict, list)):
            return 1
        key = id(value)
        if key not in sizes:
            sizes[key] = 0  # a cycle (a recursive alias) counts once: safe_load builds one only through aliases
            children = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            sizes[key] = min(1 + sum(size(c) for c in children), MAX_EXPANDED_NODES + 1)
        return sizes[key]

    return size(data)


def _unreadable(path: Path, origin: Origin, why: str) -> ConfigError:
    return origin.error(f"cannot read kubeconfig {path}: {why}")


def _entries(data: dict[str, Any], kind: str, path: Path, origin: Origin) -> list[dict[str, Any]]:
    entries = data.get(kind) or []
    body = kind[:-1]  # "clusters" -> "cluster"
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("name"), str) and body in e for e in entries
    ):
        raise _unreadable(path, origin, NOT_A_KUBECONFIG)
    return entries


def _absolute(kind: str, entry: dict[str, Any], path: Path) -> dict[str, Any]:
    """``entry`` with its relative paths made absolute against the directory of ``path``."""
    body = entry[kind[:-1]]
    if not isinstance(body, dict):
        return entry  # reported when a context uses it
    base = path.expanduser().absolute().parent
    fixed = dict(body)
    for key in PATH_KEYS.get(kind, ()):
        if isinstance(fixed.get(key), str) and fixed[key] and not os.path.isabs(os.path.expanduser(fixed[key])):
            fixed[key] = str(base / fixed[key])
    plugin = fixed.get("exec")
    if kind == "users" and isinstance(plugin, dict) and isinstance(plugin.get("command"), str):
        command = plugin["command"]
        if "/" in command and not os.path.isabs(command):  # a bare name is looked up on PATH, as kubectl does
            fixed["exec"] = {**plugin, "command": str(base / command)}
    return {**entry, kind[:-1]: fixed}
