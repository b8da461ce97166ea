"""The job flags, shared by every command that works on a job, built from the field table."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from pwdeploy.config import JobConfig, load_job
from pwdeploy.errors import ConfigError
from pwdeploy.fields import FIELDS, Field, Kind

F = TypeVar("F", bound=Callable[..., Any])

_PARAM_PREFIX = "job__"


def _param_name(field: Field) -> str:
    return _PARAM_PREFIX + field.path.replace(".", "__")


def _option(field: Field) -> Callable[[F], F]:
    assert field.flag is not None
    decls = [field.flag, _param_name(field)]
    help_text = field.help + (f" [env {field.env_name}]" if field.env_name else "")
    if field.kind is Kind.BOOL:
        if "/" not in field.flag:
            return click.option(*decls, is_flag=True, default=None, envvar=field.env_name, help=help_text)
        return click.option(*decls, default=None, envvar=field.env_name, help=help_text)
    multiple = field.kind in (Kind.FLAG_LIST, Kind.ENV)
    metavar = "KEY=VALUE" if field.kind is Kind.ENV else None
    return click.option(
        *decls, multiple=multiple, envvar=field.env_name, help=help_text, metavar=metavar, show_envvar=False
    )


def job_options(func: F) -> F:
    """Add ``-f/--file`` and every job flag; the command receives them in ``**job_args``."""
    for field in reversed([f for f in FIELDS if f.flag]):
        func = _option(field)(func)
    return click.option(
        "-f", "--file", "job__file", type=click.Path(dir_okay=False, path_type=Path), default=None,
        envvar="PWDEPLOY_FILE", help="Job config YAML file [env PWDEPLOY_FILE]",
    )(func)  # fmt: skip


def overrides_from(params: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for field in FIELDS:
        if not field.flag:
            continue
        value = params.get(_param_name(field))
        if value is None or value == ():
            continue
        found[field.path] = list(value) if isinstance(value, tuple) else value
    return found


def pop_job_params(params: dict[str, Any]) -> dict[str, Any]:
    """Take the job parameters out of a command's kwargs (so the rest can be used plainly)."""
    return {key: params.pop(key) for key in list(params) if key.startswith(_PARAM_PREFIX)}


def job_from_params(params: dict[str, Any], *, pin_images: bool = True) -> JobConfig:
    """The validated job from ``-f`` and the flags; errors name the flag that set a bad value.

    With ``pin_images``, images pushed by `pwdeploy sidecar build --push` and `pwdeploy image build --push` are
    pinned by their recorded digests (sidecar.image, main.image).
    """
    overrides = overrides_from(params)
    try:
        job = load_job(params.get("job__file"), overrides)
        if pin_images and (job.sidecar.repository or job.image.repository):
            from pwdeploy.images.pin import pin_pushed  # the lock files beside the config

            job, warnings = pin_pushed(job, params.get("job__file"))
            for warning in warnings:
                click.echo(f"warning: {warning}", err=True)
        return job
    except ConfigError as exc:
        source = _source_of(exc.field, overrides, params.get("job__file"))
        if source is not None:
            exc.message += f" (from {source})"
        raise


def _source_of(path: str | None, overrides: dict[str, Any], file: Path | None) -> str | None:
    """Which flag, environment variable or file set the field ``path``, for error messages."""
    field = next((f for f in FIELDS if path is not None and (path == f.path or path.startswith(f.path + "."))), None)
    if field is None:
        return None
    if field.path not in overrides:
        return str(file) if file is not None and field.path in _file_fields(file) else None
    if field.flag is None:
        return None
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.get_parameter_source(_param_name(field)) is click.core.ParameterSource.ENVIRONMENT:
        return field.env_name
    return field.flag.split("/")[0]


def _file_fields(file: Path) -> set[str]:
    """The dotted fields a config file sets (read again: only on the error path)."""
    from pwdeploy.config import flatten, read_file

    try:
        return set(flatten(read_file(file)))
    except ConfigError:
        return set()
