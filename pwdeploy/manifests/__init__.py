"""Manifests rendered from a JobConfig: pure builders returning dicts, serialised once, here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from pwdeploy.atomic import write_text_atomic
from pwdeploy.config import JobConfig
from pwdeploy.manifests.common import Manifest
from pwdeploy.manifests.emit import block_yaml
from pwdeploy.manifests.jobset import jobset

__all__ = ["Manifest", "build", "file_name", "to_json", "to_yaml", "write_dir"]


def build(job: JobConfig) -> list[Manifest]:
    """Every object the job needs, in the order to apply them."""
    return [jobset(job)]


# libyaml's emitter when present (several times faster); the pure-Python one gives the same text otherwise.
_BaseDumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_BaseDumper):  # type: ignore[valid-type,misc]
    """Block style, insertion order, multi-line strings as literal blocks, and no anchors: an object used
    twice is written out twice, as kubectl expects."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_presenter)


def to_yaml(objects: list[Manifest]) -> str:
    """Each object as a YAML document. `emit.block_yaml` writes the dumper's text for what manifests hold, in a tenth
    of PyYAML's time; the dumper itself writes what it leaves (a float, a string that needs escapes...)."""
    docs = [block_yaml(obj) or _dump(obj) for obj in objects]
    return "---\n" + "---\n".join(docs)


def _dump(obj: Any) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000)


def to_json(objects: list[Manifest]) -> str:
    """One object as itself; several as a v1 List, as kubectl prints them."""
    import json  # here, not at the top: `render` prints YAML unless asked, and json costs its start-up 1 ms

    payload: Any = objects[0] if len(objects) == 1 else {"apiVersion": "v1", "kind": "List", "items": objects}
    return json.dumps(payload, indent=2) + "\n"


def file_name(obj: Manifest, suffix: str) -> str:
    return f"{obj['kind'].lower()}-{obj['metadata']['name']}.{suffix}"


def write_dir(objects: list[Manifest], directory: Path, fmt: str) -> list[Path]:
    """One file per object; each written to a temporary file first so no half-written file is left."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for obj in objects:
        target = directory / file_name(obj, fmt)
        text = to_json([obj]) if fmt == "json" else to_yaml([obj])
        write_text_atomic(target, text)
        written.append(target)
    return written


def render(job: JobConfig) -> list[Manifest]:
    """Alias of build, for readers who look for the verb the CLI uses."""
    return build(job)
