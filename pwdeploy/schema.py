"""The JSON Schema of the job config, generated from the field table (for editors and CI linting)."""

from __future__ import annotations

from typing import Any

from pwdeploy import quantity
from pwdeploy.fields import FIELDS, SECTIONS, Field, Kind

_QUANTITY = f"^{quantity.PATTERN}$"


def _property(field: Field) -> dict[str, Any]:
    kind = field.kind
    schema: dict[str, Any]
    if kind is Kind.INT:
        schema = {"type": "integer"}
        if field.minimum is not None:
            schema["minimum"] = field.minimum
    elif kind is Kind.BOOL:
        schema = {"type": "boolean"}
    elif kind is Kind.QUANTITY:
        schema = {"type": ["string", "number"], "pattern": _QUANTITY}
    elif kind is Kind.GCS:
        schema = {"type": "string", "pattern": r"^gs://[a-z0-9][a-z0-9._-]{1,220}[a-z0-9](/.*)?$"}
    elif kind is Kind.COMMAND:
        schema = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]}
    elif kind is Kind.STR_LIST:
        schema = {"type": "array", "items": {"type": "string"}}
    elif kind is Kind.FLAG_LIST:
        schema = {"type": "array", "items": {"type": "string", "pattern": r"^--[A-Za-z][A-Za-z0-9_]*(=\S+)?$"}}
    elif kind is Kind.ENV:
        schema = {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}}
    else:
        schema = {"type": "string"}
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
    """The README's config reference table, from the same field table."""
    rows = ["| field | flag | default | meaning |", "|---|---|---|---|"]
    for field in FIELDS:
        default = "" if field.default in (None, (), {}) else f"`{field.default}`"
        flag = f"`{field.flag}`" if field.flag else ""
        rows.append(f"| `{field.path}` | {flag} | {default} | {field.help} |")
    return "\n".join(rows) + "\n"
