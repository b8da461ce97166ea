"""How `--help` reads: the command's own options first, then the job flags under one heading per part of the
job they configure, defaults shown, and one example per command.

Commands are plain ``@click.command`` functions in their modules; ``apply`` gives each its layout and example
when the `pwdeploy` group loads it, so this file is the one place that decides how help looks.
"""

from __future__ import annotations

import click

from pwdeploy.cli.commands import TABLE
from pwdeploy.cli.options import FIELD_OF_PARAM, FILE_PARAM
from pwdeploy.config.fields import Field

# Help headings, by config section; a field listed in HEADING_OF_PATH goes under that heading instead.
HEADINGS = {
    "": "Job",
    "images": "Job",
    "tpu": "TPU",
    "main": "Main container",
    "head": "Head (IFRT proxy and resource manager)",
    "storage": "Storage (GCS)",
    "scheduling": "Scheduling",
    "sidecar": "Colocated-Python sidecar",
    "image": "Job image",
    "local": "Local runs",
}
HEADING_OF_PATH = {"worker_flags": "TPU", "worker_env": "TPU"}
JOB_HEADING_NOTE = " (flags beat PWDEPLOY_<FLAG> variables, which beat the -f file)"


def heading(field: Field) -> str:
    found = HEADING_OF_PATH.get(field.path) or HEADINGS.get(field.section) or field.section.capitalize()
    return found + (JOB_HEADING_NOTE if found == "Job" else "")


class SectionedHelp(click.Command):
    """Help with the command's own options first, then one section per group of job flags."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        own: list[tuple[str, str]] = []
        job: dict[str, list[tuple[str, str]]] = {heading(f): [] for f in FIELD_OF_PARAM.values()}
        show_default, ctx.show_default = ctx.show_default, True
        try:
            for param in self.get_params(ctx):
                record = param.get_help_record(ctx)
                if record is None:
                    continue
                field = FIELD_OF_PARAM.get(param.name or "")
                if param.name == FILE_PARAM:
                    job[next(iter(job))].insert(0, record)
                elif field is not None:
                    job[heading(field)].append(record)
                else:
                    own.append(record)
        finally:
            ctx.show_default = show_default
        for name, records in [("Options", own), *job.items()]:
            if records:
                with formatter.section(name):
                    formatter.write_dl(records)


def apply(command: click.Command, path: str) -> click.Command:
    """Give ``command`` (and, for a group, its subcommands) the sectioned layout and its example."""
    if getattr(command, "_pwdeploy_help", False):
        return command
    entry = TABLE.get(path)
    if entry is not None and not command.epilog:
        command.epilog = f"\b\nExample:\n  {entry.example}"
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            apply(sub, f"{path} {name}".strip())
    elif any(param.name in FIELD_OF_PARAM for param in command.params) and not isinstance(command, SectionedHelp):
        # The command module used plain @click.command; give the same object the sectioned layout.
        command.__class__ = type(f"Sectioned{type(command).__name__}", (SectionedHelp, type(command)), {})
    command._pwdeploy_help = True  # type: ignore[attr-defined]
    return command
