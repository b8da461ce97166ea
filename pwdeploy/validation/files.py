"""Reading manifests: multi-document YAML or JSON files, or standard input (``-``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from pwdeploy.errors import ConfigError


class _UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that rejects repeated keys, as the API server's strict field validation does."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                mark = key_node.start_mark
                raise ConfigError(None, f"duplicate key {key!r} at line {mark.line + 1}, column {mark.column + 1}")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_text(source: str | Path) -> str:
    if str(source) == "-":
        return sys.stdin.read()
    path = Path(source)
    if path.is_dir():
        raise ConfigError(None, "is a directory; pass the manifest files in it", source=str(path))
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(None, "no such file", source=str(path)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(None, f"is not UTF-8 text (byte at offset {exc.start})", source=str(path)) from None
    except OSError as exc:
        raise ConfigError(None, f"cannot be read: {exc.strerror or exc}", source=str(path)) from None


def load_documents(source: str | Path) -> list[Any]:
    """The objects in ``source``: every YAML document, with lists and ``kind: List`` objects expanded."""
    name = "<stdin>" if str(source) == "-" else str(source)
    text = read_text(source)
    try:
        loaded = json.loads(text) if name.endswith(".json") else list(yaml.load_all(text, Loader=_UniqueKeyLoader))
    except json.JSONDecodeError as exc:
        raise ConfigError(
            None, f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}", source=name
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(None, f"not valid YAML: {getattr(exc, 'problem', None) or exc}{where}", source=name) from None
    except ConfigError as exc:
        raise ConfigError(None, exc.message, source=name) from None
    except RecursionError:
        raise ConfigError(None, "nested too deep to be Kubernetes objects", source=name) from None
    documents = [loaded] if name.endswith(".json") else loaded
    try:
        return [obj for document in documents for obj in _expand(document)]
    except RecursionError:  # lists in lists, deeper than any manifest
        raise ConfigError(None, "nested too deep to be Kubernetes objects", source=name) from None


def _expand(document: Any) -> list[Any]:
    if document is None:
        return []
    if isinstance(document, list):
        return [obj for entry in document for obj in _expand(entry)]
    if isinstance(document, dict) and document.get("kind") == "List" and isinstance(document.get("items"), list):
        return [obj for entry in document["items"] for obj in _expand(entry)]
    return [document]
