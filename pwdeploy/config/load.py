"""Load, merge and validate a job config into one typed, immutable JobConfig (pwdeploy.config.model).

Every problem is reported at once: each field is parsed on its own (pwdeploy.config.value_kinds), then the
checks that combine fields run when their inputs parsed. The errors name the field and where its value came
from (a flag, an environment variable or the file), and are raised together.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pwdeploy.config.agreement import ModelMismatch, check_agreement
from pwdeploy.config.capacity import parse_labels, parse_tolerations
from pwdeploy.config.config_file import read_file
from pwdeploy.config.constraints import RESOLVED, apply_constraint, constraints, unknown_inputs
from pwdeploy.config.fields import BY_PATH, FIELDS, SECTIONS, Field
from pwdeploy.config.main_env import RESERVED_ENV
from pwdeploy.config.model import LOADER_FIELDS, SECTION_MODELS, JobConfig, SecretRef
from pwdeploy.config.value_kinds import parse_field
from pwdeploy.config.values import (
    GcsPath,
    check_image_pinned,
    kind_name,
    merge_flags,
    parse_env,
    parse_flags,
    parse_gcs,
)
from pwdeploy.errors import ConfigError, ConfigErrors, raise_all

__all__ = [
    "RESERVED_ENV",
    "GcsPath",
    "JobConfig",
    "SecretRef",
    "check_image_pinned",
    "load_job",
    "merge",
    "parse_gcs",
]


def flatten(data: Mapping[str, Any], errors: list[ConfigError] | None = None) -> dict[str, Any]:
    """``{"tpu": {"slices": 2}}`` -> ``{"tpu.slices": 2}``; unknown keys are ConfigErrors.

    With ``errors``, every unknown key is added to it and the known ones are returned; without, the first raises.
    """
    found: list[ConfigError] = [] if errors is None else errors
    flat: dict[str, Any] = {}
    for key, value in data.items():
        key = str(key)
        if key in SECTIONS and key != "":
            if value is None:
                continue
            if not isinstance(value, dict):
                found.append(ConfigError(key, f"must be a mapping of fields, not a {kind_name(value)}"))
                continue
            for sub, sub_value in value.items():
                path = f"{key}.{sub}"
                if path in BY_PATH:
                    flat[path] = sub_value
                else:
                    found.append(_unknown(path, str(sub), [f.key for f in SECTIONS[key]]))
        elif key in BY_PATH:
            flat[key] = value
        else:
            found.append(_unknown(key, key, [f.key for f in SECTIONS[""]] + [s for s in SECTIONS if s]))
    if errors is None:
        raise_all(found)
    return flat


def _unknown(path: str, word: str, valid: list[str]) -> ConfigError:
    import difflib  # only on this error path: 1.7 ms of render's start-up otherwise

    close = difflib.get_close_matches(word, valid, n=1)
    suggestion = f" (did you mean {close[0]!r}?)" if close else ""
    return ConfigError(path, f"unknown field{suggestion}; valid: {', '.join(valid)}")


def load_job(
    path: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    sources: Mapping[str, str] | None = None,
    installed_jax: Callable[[], str | None] | None = None,
    replaced: list[str] | None = None,
) -> JobConfig:
    """Read ``path`` (optional), apply ``overrides`` (dotted paths; flags and env) and validate.

    ``sources`` names where each override came from (``--num-slices``, ``PWDEPLOY_NAMESPACE``), for errors.
    ``installed_jax`` gives the jax version the images must match (``None``: jax is not installed); by
    default it is read from package metadata, never by importing jax. Every problem is raised at once.
    ``replaced`` gets a line for each value of the file an environment variable replaces (``PWDEPLOY_NAME`` left
    set from another job replaces the file's ``name`` without a flag in sight).
    """
    errors: list[ConfigError] = []
    raw = flatten(read_file(path), errors) if path is not None else {}
    for error in errors:  # so far only the file's unknown or misshapen keys
        error.source = str(path)
    merged = merge(raw, overrides or {}, errors)
    if replaced is not None:
        replaced += _replaced_by_variables(raw, overrides or {}, sources or {}, path)
    jax_version = (installed_jax or installed_jax_version)()
    base_dir = path.parent.absolute() if path is not None else Path.cwd()
    try:
        job = build(merged, installed_jax=jax_version, base_dir=base_dir)
    except ConfigErrors as exc:
        errors += exc.errors
    except ConfigError as exc:
        errors.append(exc)
    else:
        if not errors:
            return job
    _name_sources(errors, raw, overrides or {}, sources or {}, path)
    raise_all(_once(errors))
    raise AssertionError("unreachable")  # pragma: no cover


def _name_sources(
    errors: list[ConfigError],
    raw: Mapping[str, Any],
    given: Mapping[str, Any],
    sources: Mapping[str, str],
    path: Path | None,
) -> None:
    """Where each error's value came from: its flag or variable, else the file."""
    for error in errors:
        field = _field_of(error.field)
        if error.source is None and field is not None:
            from_file = str(path) if field.path in raw else None
            error.source = sources.get(field.path) if field.path in given else from_file


def _replaced_by_variables(
    raw: Mapping[str, Any], overrides: Mapping[str, Any], sources: Mapping[str, str], path: Path | None
) -> list[str]:
    lines = []
    for field, value in overrides.items():
        source = sources.get(field, "")
        if source.startswith("PWDEPLOY_") and field in raw and str(raw[field]).strip() != str(value).strip():
            lines.append(
                f"{source}={str(value).strip()!r} replaces {field}: {raw[field]!r} of {path} (variables beat the "
                f"file); unset {source} if it is left from another job"
            )
    return lines


def _once(errors: list[ConfigError]) -> list[ConfigError]:
    """The errors without repeats: a value that failed to merge (a bad --env name) fails again when its field
    is parsed."""
    unique: dict[str, ConfigError] = {}
    for error in errors:
        unique.setdefault(str(error), error)
    return list(unique.values())


def _field_of(path: str | None) -> Field | None:
    """The field a config path belongs to: ``main.env.FOO`` belongs to ``main.env``."""
    while path:
        if path in BY_PATH:
            return BY_PATH[path]
        path = path.rpartition(".")[0]
    return None


def merge(
    raw: Mapping[str, Any], overrides: Mapping[str, Any], errors: list[ConfigError] | None = None
) -> dict[str, Any]:
    """Overrides beat the file; env maps merge key by key and XLA flags merge flag by flag.

    With ``errors``, a merge that fails is recorded there (and the override kept); without, it raises.
    """
    merged = dict(raw)
    # A slice given by a flag replaces the file's, in whichever form the file gave it.
    by_type, by_shape = ("tpu.type",), ("tpu.family", "tpu.topology")
    for given, replaced in ((by_type, by_shape), (by_shape, by_type)):
        if any(path in overrides for path in given):
            for path in replaced:
                merged.pop(path, None)
    for path, value in overrides.items():
        if path not in BY_PATH:
            raise ConfigError(path, "unknown field")
        try:
            merged[path] = _merged_value(path, merged, value)
        except ConfigError as exc:
            if errors is None:
                raise
            errors.append(exc)
            merged[path] = value
    return merged


def _merged_value(path: str, merged: Mapping[str, Any], value: Any) -> Any:
    if path in ("main.env", "worker_env", "main.secret_env") and path in merged:
        return {**parse_env(merged[path], path), **parse_env(value, path)}
    if path in ("xla_flags", "worker_flags") and path in merged:
        return merge_flags(parse_flags(merged[path], path), parse_flags(value, path))
    if path == "tpu.node_selector" and path in merged:  # label by label, as env maps
        return {**dict(parse_labels(merged[path], path)), **dict(parse_labels(value, path))}
    if path == "tpu.tolerations" and path in merged:  # the file's and the flags', each once
        both = [*parse_tolerations(merged[path], path), *parse_tolerations(value, path)]
        return [toleration.text for toleration in dict.fromkeys(both)]
    return value


def installed_version(distribution: str) -> str | None:
    """An installed distribution's version from its dist-info folder name on sys.path: no import, no metadata."""
    prefix = distribution + "-"
    for entry in sys.path:
        try:
            found = os.listdir(entry or ".")
        except OSError:
            continue
        for name in found:
            if name.startswith(prefix) and name.endswith(".dist-info"):
                return name[len(prefix) : -len(".dist-info")]
    return None


def installed_jax_version() -> str | None:
    """The installed jax's version, from its dist-info folder name (cheap), else from package metadata."""
    found = installed_version("jax")
    if found is not None:
        return found
    from importlib import metadata  # slower: imports the email package

    try:
        return metadata.version("jax")
    except metadata.PackageNotFoundError:
        return None


# ---------------------------------------------------------------------------------------------- checking

_BAD = object()  # a value that did not parse; checks that need it do not run


def build(values: Mapping[str, Any], *, installed_jax: str | None, base_dir: Path) -> JobConfig:
    """The JobConfig of flat ``values``; every problem raised together (ConfigErrors when more than one)."""
    errors: list[ConfigError] = []
    parsed: dict[str, Any] = {}
    for field in FIELDS:
        try:
            parsed[field.path] = parse_field(field, values.get(field.path), base_dir)
        except ConfigError as exc:
            errors.append(exc)
            parsed[field.path] = _BAD
    for inputs, constraint in constraints(installed_jax, base_dir):
        if any(parsed.get(path, _BAD) is _BAD for path in inputs):  # also what a failed check would have made
            continue
        try:
            parsed.update(apply_constraint(inputs, constraint, parsed))
        except ConfigError as exc:
            errors.append(exc)
    raise_all(errors)
    sections: dict[str, Any] = {name: model(**_section_values(parsed, name)) for name, model in SECTION_MODELS.items()}
    return JobConfig(**_section_values(parsed, ""), **sections, base_dir=base_dir)


def _section_values(parsed: Mapping[str, Any], section: str) -> dict[str, Any]:
    """Every row of ``section`` and every resolved value in it, by key: nothing is filtered, so a field the model
    lacks is an error (and the import-time check below names it first)."""
    paths = [f.path for f in SECTIONS[section]] + [p for p in RESOLVED if p.rpartition(".")[0] == section]
    return {path.rpartition(".")[2]: parsed[path] for path in paths}


def _check_model() -> None:
    """The field table, the checks and the typed model agree (pwdeploy.config.agreement); a few set operations."""
    check_agreement((f.path for f in FIELDS), SECTION_MODELS, JobConfig, RESOLVED, LOADER_FIELDS)
    unknown = unknown_inputs(constraints(None, Path()))
    if unknown:
        raise ModelMismatch(
            f"config constraints name paths that are no field and not in RESOLVED: {', '.join(unknown)}"
        )


_check_model()
