"""The job flags, shared by every command that works on a job, built from the field table."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from pwdeploy.cli.commands import JOB_PARAM_PREFIX
from pwdeploy.cli.seams import seams
from pwdeploy.config import JobConfig
from pwdeploy.config.fields import FIELDS, Field, Kind
from pwdeploy.config.value_kinds import KINDS
from pwdeploy.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])

_PARAM_PREFIX = JOB_PARAM_PREFIX
FILE_PARAM = "job__file"


def param_name(field: Field) -> str:
    return _PARAM_PREFIX + field.path.replace(".", "__")


FIELD_OF_PARAM: dict[str, Field] = {param_name(f): f for f in FIELDS if f.flag}


def _default_note(field: Field) -> str:
    """``[default: 16Gi]`` for help; the field's default, since the flag's own default is None (the file decides)."""
    if field.default in (None, (), {}, ""):
        return ""
    if field.kind is Kind.BOOL:
        if field.flag is None or "/" not in field.flag:
            return ""  # a switch that is off unless given
        on, off = field.flag.split("/")
        return f"  [default: {on if field.default else off}]"
    return f"  [default: {field.default}]"


def _option(field: Field) -> Callable[[F], F]:
    assert field.flag is not None
    decls = [field.flag, param_name(field)]
    help_text = field.help + _default_note(field)
    if field.kind is Kind.BOOL:
        return click.option(*decls, is_flag=True, default=None, help=help_text)
    spec = KINDS[field.kind]
    # Values stay text here: the config parses them, so that every problem is reported at once with its source.
    return click.option(*decls, multiple=spec.multiple, help=help_text, metavar=spec.metavar(field))


def job_options(func: F) -> F:
    """Add ``-f/--file`` and every job flag; the command receives them in ``**job_args``."""
    for field in reversed([f for f in FIELDS if f.flag]):
        func = _option(field)(func)
    return click.option(
        "-f",
        "--file",
        FILE_PARAM,
        cls=OneFileOption,
        type=click.Path(dir_okay=False, path_type=Path),
        multiple=True,  # so that a second -f is seen (and refused) rather than silently replacing the first
        envvar="PWDEPLOY_FILE",
        metavar="FILE",
        callback=_one_file,
        help="Job config YAML file [env PWDEPLOY_FILE]",
    )(func)


class JobCommand(click.Command):
    """A command that takes the job flags, whose parser matches ``-f`` at once. Click first tries every option word
    as a long option, and a miss builds its "did you mean" list: for ``-f`` that was a close-match search over all
    the job flags and the import of difflib, on every run of the command. Registered as a long option too, ``-f
    FILE`` parses as before, and ``-f=FILE`` takes FILE, as kubectl's ``-f=FILE`` does."""

    def make_parser(self, ctx: click.Context) -> Any:
        parser = super().make_parser(ctx)
        short, long = getattr(parser, "_short_opt", None), getattr(parser, "_long_opt", None)  # click's parser tables
        if isinstance(short, dict) and isinstance(long, dict) and "-f" in short:
            long.setdefault("-f", short["-f"])
        return parser


class OneFileOption(click.Option):
    """``-f``, repeatable only to be refused: its variable is one path, spaces and all (not split as click splits
    a repeatable option's variable)."""

    def value_from_envvar(self, ctx: click.Context) -> tuple[str, ...] | None:
        found = self.resolve_envvar_value(ctx)
        return None if found is None else (found,)


def _one_file(ctx: click.Context, param: click.Parameter, value: tuple[Path, ...]) -> Path | None:
    given = list(dict.fromkeys(value))
    if len(given) > 1:
        raise click.UsageError(
            f"-f/--file is given {len(value)} times ({', '.join(map(str, given))}), but a job is one config file: "
            "give one -f, and set the fields that differ with flags (e.g. --num-slices 2)",
            ctx=ctx,
        )
    return given[0] if given else None


def overrides_from(params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The config values the flags and ``PWDEPLOY_<FLAG>`` variables set, and which flag or variable set each.

    Environment defaults are read here rather than by click, so they work alike for every kind (``--gcs-olm``
    and ``--headless`` too: PWDEPLOY_GCS_OLM=false) and are parsed, and reported, like any other value.
    """
    found: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name, field in FIELD_OF_PARAM.items():
        value = params.get(name)
        if value is not None and value != ():
            found[field.path] = list(value) if isinstance(value, tuple) else value
            sources[field.path] = str(field.flag).split("/")[0]
        elif field.env_name and os.environ.get(field.env_name, "").strip():
            found[field.path] = os.environ[field.env_name]
            sources[field.path] = field.env_name
    return found, sources


def unread_variables() -> list[str]:
    """A line for each ``PWDEPLOY_<FLAG>`` variable that is set but read by no job flag: the repeatable flags
    (``--env``, ``--tpu-node-selector``, ...) have no environment default, since one variable cannot hold their
    items unambiguously. The names of the env contract (``PWDEPLOY_NUM_SLICES``) are left alone: they are what a
    job is given, set in a shell that ran ``eval "$(pwdeploy local env ...)"``."""
    from pwdeploy.identifiers import JOB_ENV_NAMES

    lines = []
    for field in FIELD_OF_PARAM.values():
        name = field.flag_env_name
        if field.env_name is None and name not in JOB_ENV_NAMES and os.environ.get(name, "").strip():
            flag = str(field.flag)
            lines.append(
                f"{name} is set but not read: {flag} is repeatable and has no environment default; pass "
                f"{flag} {KINDS[field.kind].metavar(field)} (or set {field.path} in the file)"
            )
    return lines


def pop_job_params(params: dict[str, Any]) -> dict[str, Any]:
    """Take the job parameters out of a command's kwargs (so the rest can be used plainly)."""
    return {key: params.pop(key) for key in list(params) if key.startswith(_PARAM_PREFIX)}


def job_from_params(params: dict[str, Any], *, pin_images: bool = True) -> JobConfig:
    """The validated job from ``-f`` and the flags (``api.load``); errors name the flag, variable or file that set
    a bad value, and the warnings go to stderr.

    With ``pin_images``, images pushed by `pwdeploy sidecar build --push` and `pwdeploy image build --push` are
    pinned by their recorded digests (sidecar.image, main.image).
    """
    from pwdeploy import api

    overrides, sources = overrides_from(params)
    file = params.get(FILE_PARAM)
    if file is None and not overrides:
        context = click.get_current_context(silent=True)
        names = context.command_path.split()[1:] if context is not None else ["render"]  # after the program's name
        command = " ".join(["pwdeploy", *names])
        raise ConfigError(None, "no job config given (-f FILE or flags)", hint=f"e.g. {command} -f job.yaml")
    for line in unread_variables():
        warn(line)
    return api.load(
        file, overrides, sources=sources, pin_images=pin_images, on_warning=warn, installed_jax=seams().installed_jax
    )


def warn(line: str) -> None:
    """A warning on stderr: valid input that may mean something else than what was meant."""
    click.echo(f"warning: {line}", err=True)
