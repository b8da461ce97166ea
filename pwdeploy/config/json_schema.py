"""The JSON Schema of the job config, generated from the field table (for editors and CI linting)."""

from __future__ import annotations

from typing import Any

from pwdeploy.config.fields import FIELDS, SECTIONS, Field
from pwdeploy.config.value_kinds import KINDS


def _property(field: Field) -> dict[str, Any]:
    schema = KINDS[field.kind].schema(field)
    schema["description"] = field.help + (f" (flag {field.flag.split('/')[0]})" if field.flag else "")
    if field.default not in (None, (), {}):
        schema["default"] = field.default
    return schema


def job_schema() -> dict[str, Any]:
    properties: dict[str, Any] = {f.key: _property(f) for f in SECTIONS[""]}
    for section, section_fields in SECTIONS.items():
        if section:
            properties[section] = {
                "type": "object",
                "additionalProperties": False,
                "properties": {f.key: _property(f) for f in section_fields},
            }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "pwdeploy job config",
        "type": "object",
        "additionalProperties": False,
        "required": ["name"],
        "properties": properties,
    }


def config_reference_markdown() -> str:
    """The config reference table of docs/config.md, from the same field table."""
    rows = ["| field | flag | default | meaning |", "|---|---|---|---|"]
    for field in FIELDS:
        default = "" if field.default in (None, (), {}) else f"`{field.default}`"
        flag = f"`{field.flag}`" if field.flag else ""
        rows.append(f"| `{field.path}` | {flag} | {default} | {field.help} |")
    return "\n".join(rows) + "\n"
