"""One row per kind of config value: how a value is parsed, its JSON Schema and how its flag reads in help.

Config parsing (pwdeploy.config.load), the JSON Schema (pwdeploy.config.json_schema) and the click options
(pwdeploy.cli.options) all read this table, so a new kind is one new row.
"""

# No `from __future__ import annotations`: typing.NamedTuple compiles each string annotation into a ForwardRef
# (tens of microseconds a field), which evaluated annotations skip; as in pwdeploy.config.model.
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from pwdeploy import quantity
from pwdeploy.config.capacity import EFFECTS, parse_duration, parse_labels, parse_tolerations
from pwdeploy.config.fields import Field, Kind
from pwdeploy.config.main_env import parse_env_field, parse_main_command, parse_secret_env
from pwdeploy.config.storage_volumes import parse_volumes
from pwdeploy.config.values import (
    kind_name,
    parse_bool,
    parse_flags,
    parse_gcs,
    parse_image,
    parse_int,
    parse_str_list,
)
from pwdeploy.errors import ConfigError
from pwdeploy.imageref import REFERENCE_PATTERN

# Quantities where 0 is a meaningful value: "off".
ZERO_DISABLES = frozenset({"head.transfer_shm_size"})
# Quantities of memory: a bare number there is bytes to Kubernetes (`memory: 32` is 32 bytes), never what was meant,
# so these need a unit (docs/config.md#quantities).
MEMORY_QUANTITIES = frozenset(
    {
        "tpu.worker_memory",
        "tpu.shm_size",
        "main.memory",
        "main.shm_size",
        "head.proxy_memory",
        "head.rm_memory",
        "head.transfer_shm_size",
        "sidecar.shm_size",
    }
)
# Quantities of CPU: more than this many whole CPUs is no machine a GKE node pool gives one container; a bare 1000
# is one CPU written without its `m`.
CPU_QUANTITIES = frozenset({"main.cpu", "head.proxy_cpu", "head.rm_cpu"})
MAX_CPUS = 512

_QUANTITY = f"^{quantity.PATTERN}$"
_GCS = r"^gs://[a-z0-9][a-z0-9._-]{1,220}[a-z0-9](/.*)?$"
_IMAGE = f"^(|{REFERENCE_PATTERN})$"  # empty: unset
_STRINGS = {"type": "array", "items": {"type": "string"}}
MAX_EXIT_CODE = 255
KILLED_EXIT_CODE = 137  # 128 + SIGKILL (9): the OOM killer, a kill -9, a node that went away
_EXIT_CODE = {"type": "integer", "minimum": 1, "maximum": MAX_EXIT_CODE}


class KindSpec(NamedTuple):
    parse: Callable[[Field, Any, Path], Any]  # the checked value (never None); ConfigError naming the field
    schema: Callable[[Field], dict[str, Any]]  # the JSON Schema of one value
    metavar: Callable[[Field], str | None]  # how the flag's value reads in --help; None: a switch
    multiple: bool = False  # the flag may be repeated


def _str(field: Field, value: Any, base_dir: Path) -> Any:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ConfigError(field.path, f"must be a string, not a {kind_name(value)}")
    text = str(value).strip()
    if field.choices is not None and text not in field.choices:
        raise ConfigError(field.path, f"{text!r} is not one of: {', '.join(field.choices)}")
    if not text:
        return "" if field.empty_disables else field.default
    return text


def _path(field: Field, value: Any, base_dir: Path) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(field.path, f"must be a path string, not {value!r}")
    path = Path(value).expanduser()
    return path if path.is_absolute() else base_dir / path


def _image(field: Field, value: Any, base_dir: Path) -> Any:
    if isinstance(value, str) and not value.strip():
        return field.default  # empty: unset
    return parse_image(value, field.path)


def _gcs(field: Field, value: Any, base_dir: Path) -> Any:
    return parse_gcs(value, field.path) if str(value).strip() else None


def _quantity(field: Field, value: Any, base_dir: Path) -> quantity.Quantity:
    text = quantity.canonical(value, field.path, allow_zero=field.path in ZERO_DISABLES)
    if field.path in MEMORY_QUANTITIES and quantity.is_bare_number(text) and text.amount:
        raise ConfigError(
            field.path,
            f"{text} has no unit, so Kubernetes reads it as {text} bytes; memory needs a unit",
            hint=f"write {text}Gi (GiB), {text}Mi (MiB) or {text}G (GB)",
        )
    if field.path in MEMORY_QUANTITIES and text.amount != int(text.amount):
        _fractional_bytes(field, text)
    if field.path in CPU_QUANTITIES and (parsed := text.amount) > MAX_CPUS:
        from decimal import Decimal  # only for the message: a whole number of CPUs is parsed without it

        cpus = Decimal(parsed)
        meant = f"; {text}m is {(cpus / 1000).normalize():f} CPU" if quantity.is_bare_number(text) else ""
        raise ConfigError(
            field.path,
            f"{text} is {cpus.normalize():f} CPUs, more than pwdeploy accepts for one container (at most {MAX_CPUS})"
            f"{meant}",
            hint="write CPUs as cores (8) or millicores (500m)",
        )
    return text


def _fractional_bytes(field: Field, text: quantity.Quantity) -> None:
    """A byte quantity with a fraction of a byte: ``512m`` is 0.512 bytes (``m`` is milli), a common slip for
    ``512M``. Kubernetes warns that a fractional byte value is invalid for a memory limit (kubernetes/kubernetes
    pkg/api/pod/warnings.go) and rounds it up (``Quantity.Value()``): a /dev/shm of one page, a job that dies of
    SIGBUS or ENOSPC on its first batch; a memory limit no container starts under."""
    from decimal import Decimal  # only for the message: a whole number of bytes is parsed without it

    rounded = quantity.whole_bytes(text.amount)
    becomes = "a tmpfs of one page" if field.path.endswith("shm_size") else "a limit no container starts under"
    number = text[:-1] if text.endswith("m") else None
    raise ConfigError(
        field.path,
        f"{text} is {Decimal(text.amount).normalize():f} bytes{' (m is milli, a thousandth)' if number else ''}: "
        f"Kubernetes rounds a fraction of a byte up, to {rounded} byte{'' if rounded == 1 else 's'}, {becomes}",
        hint=f"write {number}Mi (MiB) or {number}M (MB)" if number else "write a whole number of bytes (8Gi, 512Mi)",
    )


def _exit_codes(field: Field, value: Any, base_dir: Path) -> tuple[int, ...]:
    """Ascending and without repeats, as a podFailurePolicy's onExitCodes.values must be."""
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")  # a variable may hold 75,76
    codes = {parse_int(item, field.path, 1) for item in items}
    if big := [code for code in sorted(codes) if code > MAX_EXIT_CODE]:
        raise ConfigError(field.path, f"{big[0]} is not an exit code: a process exits with 1-{MAX_EXIT_CODE}")
    if KILLED_EXIT_CODE in codes:
        raise ConfigError(
            field.path,
            f"{KILLED_EXIT_CODE} is not a code a program exits with: it is 128 + SIGKILL, what a container reports "
            "when the kernel's OOM killer ends it or its node is lost; restarting on it would hide a job that runs "
            "out of memory, and a lost node is handled by the JobSet's own failure policy (docs/restarts.md)",
            hint="raise main.memory for an OOM kill; exit with another code (e.g. 76) to ask for a restart",
        )
    return tuple(sorted(codes))


def _str_schema(field: Field) -> dict[str, Any]:
    return {"type": "string", "enum": list(field.choices)} if field.choices else {"type": "string"}


def _int_schema(field: Field) -> dict[str, Any]:
    return {"type": "integer"} if field.minimum is None else {"type": "integer", "minimum": field.minimum}


def _str_metavar(field: Field) -> str:
    """A choice list, else the flag's last word: --tpu-type TYPE, --queue QUEUE."""
    if field.choices:
        return "[" + "|".join(field.choices) + "]"
    return (field.flag or "VALUE").split("/")[0].rsplit("-", 1)[-1].upper()


def _fixed(schema: dict[str, Any]) -> Callable[[Field], dict[str, Any]]:
    return lambda field: dict(schema)


def _named(metavar: str | None) -> Callable[[Field], str | None]:
    return lambda field: metavar


KINDS: dict[Kind, KindSpec] = {
    Kind.STR: KindSpec(_str, _str_schema, _str_metavar),
    Kind.INT: KindSpec(lambda f, v, b: parse_int(v, f.path, f.minimum), _int_schema, _named("INTEGER")),
    Kind.BOOL: KindSpec(lambda f, v, b: parse_bool(v, f.path), _fixed({"type": "boolean"}), _named(None)),
    Kind.QUANTITY: KindSpec(
        _quantity, _fixed({"type": ["string", "number"], "pattern": _QUANTITY}), _named("QUANTITY")
    ),
    Kind.GCS: KindSpec(_gcs, _fixed({"type": "string", "pattern": _GCS}), _named("GCS URI")),
    Kind.PATH: KindSpec(_path, _fixed({"type": "string"}), _named("PATH")),
    Kind.IMAGE: KindSpec(_image, _fixed({"type": "string", "pattern": _IMAGE}), _named("IMAGE")),
    Kind.COMMAND: KindSpec(
        lambda f, v, b: parse_main_command(f, v),
        _fixed({"oneOf": [{"type": "string"}, {**_STRINGS, "minItems": 1}]}),
        _named("COMMAND"),
    ),
    Kind.STR_LIST: KindSpec(lambda f, v, b: parse_str_list(v, f.path), _fixed(_STRINGS), _named("TEXT"), True),
    Kind.FLAG_LIST: KindSpec(
        lambda f, v, b: tuple(parse_flags(v, f.path)),
        _fixed({"type": "array", "items": {"type": "string", "pattern": r"^--[A-Za-z][A-Za-z0-9_]*(=\S+)?$"}}),
        _named("--NAME=VALUE"),
        True,
    ),
    Kind.ENV: KindSpec(
        parse_env_field,
        _fixed({"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}}),
        _named("KEY=VALUE"),
        True,
    ),
    Kind.SECRET_ENV: KindSpec(
        parse_secret_env,
        _fixed({"type": "object", "additionalProperties": {"type": "string", "pattern": "^[^/]+/[-._a-zA-Z0-9]+$"}}),
        _named("NAME=SECRET/KEY"),
        True,
    ),
    Kind.EXIT_CODES: KindSpec(
        _exit_codes, _fixed({"oneOf": [_EXIT_CODE, {"type": "array", "items": _EXIT_CODE}]}), _named("CODE"), True
    ),
    Kind.VOLUMES: KindSpec(
        lambda f, v, b: parse_volumes(v, f.path),
        _fixed(
            {
                "type": "array",
                "items": {
                    "oneOf": [
                        {"type": "string", "pattern": "^(gcsfuse|ramdisk):[^:]+:/.*$"},
                        {
                            "type": "object",
                            "properties": {
                                "gcsfuse": {"type": "string"},
                                "ramdisk": {"type": ["string", "number"]},
                                "path": {"type": "string"},
                                "where": {"oneOf": [{"type": "string"}, _STRINGS]},
                                "read_only": {"type": "boolean"},
                                "mount_options": {"type": "string"},
                            },
                            "required": ["path"],
                            "additionalProperties": False,
                        },
                    ]
                },
            }
        ),
        _named("KIND:SOURCE:PATH[@WHERE][:ro]"),
        True,
    ),
    Kind.DURATION: KindSpec(
        lambda f, v, b: parse_duration(v, f.path),
        _fixed({"type": ["string", "integer"], "pattern": r"^[0-9]+\s*[smhd]?$", "minimum": 1}),
        _named("DURATION"),
    ),
    Kind.LABELS: KindSpec(
        lambda f, v, b: parse_labels(v, f.path),
        _fixed({"type": "object", "additionalProperties": {"type": ["string", "number"]}}),
        _named("KEY=VALUE"),
        True,
    ),
    Kind.TOLERATIONS: KindSpec(
        lambda f, v, b: parse_tolerations(v, f.path),
        _fixed({"type": "array", "items": {"type": "string", "pattern": f"^[^=:]+(=[^:]*)?:({'|'.join(EFFECTS)})$"}}),
        _named("KEY[=VALUE]:EFFECT"),
        True,
    ),
}


def parse_field(field: Field, value: Any, base_dir: Path) -> Any:
    """The field's checked value: ``value``, else its default (parsed the same way); None when neither is set."""
    if value is None:
        value = field.default
    if value is None:
        return None
    return KINDS[field.kind].parse(field, value, base_dir)
