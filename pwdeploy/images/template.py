"""Dockerfile templates (shipped in pwdeploy/templates, reviewed as docker/) and their tiny template language:
``{{name}}``, ``#if name`` / ``#endif``, and ``##`` notes that stay in the template."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

TEMPLATES = Path(__file__).parents[1] / "templates"  # a file read: importlib.resources costs render 2 ms

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
_IF = re.compile(r"#if (\w+)\s*")


def template_text(name: str) -> str:
    """The template ``name`` shipped in the package (identical to docker/<name> in the source tree)."""
    return (TEMPLATES / name).read_text(encoding="utf-8")


def render(template: str, values: Mapping[str, str], blocks: Mapping[str, bool]) -> str:
    """Fill ``{{name}}`` from ``values``, keep ``#if name`` blocks whose ``blocks[name]`` is true, drop ``##`` notes.

    Every placeholder and block name must be given: a template that asks for something unknown is a bug, not a
    default, so it raises KeyError.
    """
    kept: list[str] = []
    open_block: str | None = None
    keep = True
    for line in template.splitlines(keepends=True):
        if line.startswith("##"):
            continue
        match = _IF.fullmatch(line)
        if match:
            if open_block is not None:
                raise ValueError(f"nested #if {match.group(1)} inside #if {open_block}")
            open_block, keep = match.group(1), blocks[match.group(1)]
            continue
        if line.strip() == "#endif":
            if open_block is None:
                raise ValueError("#endif without #if")
            open_block, keep = None, True
            continue
        if keep:
            kept.append(_PLACEHOLDER.sub(lambda m: values[m.group(1)], line))
    if open_block is not None:
        raise ValueError(f"#if {open_block} is not closed")
    return "".join(kept)
