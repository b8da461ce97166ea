"""How `--help` reads: the command's own options first, then the job flags under one heading per part of the
job they configure, defaults shown, and one example per command.

Commands are plain ``@click.command`` functions in their modules; ``apply`` gives each its layout and example
when the `pwdeploy` group loads it, so this file is the one place that decides how help looks. A command shows the
job flag headings that apply to it (``HEADINGS_OF_COMMAND``; the others are still accepted), and an option's help
wraps between words only: never after a hyphen inside a value (an image reference) nor inside ``[default: ...]``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

import click

from pwdeploy.cli.commands import JOB_PARAM_PREFIX, TABLE

if TYPE_CHECKING:
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
    "mtc": "Multi-tier checkpointing",
    "image": "Job image",
    "local": "Local runs",
}
# head.share_process_namespace: how main stops (with the grace period), which local run plays too.
HEADING_OF_PATH = {"worker_flags": "TPU", "worker_env": "TPU", "head.share_process_namespace": "Scheduling"}
JOB_HEADING_NOTE = " (flags beat PWDEPLOY_<FLAG> variables, which beat the -f file)"
# local run reads scheduling.max_restarts and termination_grace_seconds (restarts, the stop grace), whether the head
# pod shares its process namespace (main's PID) and mtc.* (the stand-in of the MTC driver)
_LOCAL = (
    "Job", "TPU", "Main container", "Storage (GCS)", "Scheduling", "Colocated-Python sidecar",
    "Multi-tier checkpointing", "Local runs",
)  # fmt: skip
_SIDECAR = ("Job", "Colocated-Python sidecar", "Multi-tier checkpointing")  # mtc.enabled: the import test's orbax
_IMAGE = ("Job", "Job image", "Colocated-Python sidecar")  # the sidecar's Python decides the job image's
# The job flag headings a command's help shows; a command not listed (render, preflight, submit) shows all but
# "Local runs". What each command reads of the job: local/env.py and local/limits.py, images/sidecar_image.py,
# images/job_image.py.
HEADINGS_OF_COMMAND: dict[str, tuple[str, ...]] = {
    "local run": _LOCAL,
    "local env": _LOCAL,
    "sidecar build": _SIDECAR,
    "sidecar dockerfile": _SIDECAR,
    "image build": _IMAGE,
    "image dockerfile": _IMAGE,
}
CLUSTER_HEADINGS = tuple(h for h in dict.fromkeys(HEADINGS.values()) if h != "Local runs")
# Pattern text, compiled (and cached by `re`) at its first use: a render whose config does not reach it pays nothing.
_NOTE = r"\[(?:default|env)\b[^\]]*\]"  # click's [default: ...] and our [env NAME] notes


def heading(field: Field) -> str:
    found = HEADING_OF_PATH.get(field.path) or HEADINGS.get(field.section) or field.section.capitalize()
    return found + (JOB_HEADING_NOTE if found == "Job" else "")


def wrap_keeping_values(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` (a longer word stands alone), broken at spaces only, and never inside
    a ``[default: ...]`` note."""
    glued = re.sub(_NOTE, lambda m: m.group(0).replace(" ", "\0"), text)
    import textwrap  # only when help is shown: every command loads this module

    lines = textwrap.wrap(glued, width, break_on_hyphens=False, break_long_words=False)
    return [line.replace("\0", " ") for line in lines] or [""]


def _width(text: str) -> int:
    return len(click.unstyle(text))


class ValueKeepingFormatter(click.HelpFormatter):
    """click's layout of option rows, with ``wrap_keeping_values`` for the help column."""

    def write_dl(self, rows: Iterable[tuple[str, str]], col_max: int = 30, col_spacing: int = 2) -> None:
        listed = list(rows)
        if not listed:
            return
        first_col = min(max(_width(first) for first, _ in listed), col_max) + col_spacing
        indent = " " * (self.current_indent + first_col)
        width = max((self.width or 80) - first_col - self.current_indent, 10)
        for first, second in listed:
            self.write(f"{'':>{self.current_indent}}{first}")
            if not second:
                self.write("\n")
                continue
            if _width(first) <= first_col - col_spacing:
                self.write(" " * (first_col - _width(first)))
            else:
                self.write("\n" + indent)
            self.write(f"\n{indent}".join(wrap_keeping_values(second, width)) + "\n")


class HelpContext(click.Context):
    formatter_class = ValueKeepingFormatter


class SectionedHelp(click.Command):
    """Help with the command's own options first, then one section per group of job flags that applies."""

    shown_headings: tuple[str, ...] = CLUSTER_HEADINGS

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from pwdeploy.cli.options import FIELD_OF_PARAM, FILE_PARAM

        own: list[tuple[str, str]] = []
        job: dict[str, list[tuple[str, str]]] = {name: [] for name in _ordered(FIELD_OF_PARAM.values())}
        show_default, ctx.show_default = ctx.show_default, True
        try:
            for param in self.get_params(ctx):
                record = param.get_help_record(ctx)
                if record is None or isinstance(param, click.Argument):  # arguments are in the usage line
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
        shown = _shown(job.items(), self.shown_headings)
        for name, records in [("Options", own), *shown]:
            if records:
                with formatter.section(name):
                    formatter.write_dl(records)
        listed = {name for name, _ in shown}
        hidden = [first.split()[0] for name, records in job.items() if name not in listed for first, _ in records]
        if hidden:  # accepted (the config is read whole), so listed: help names every option a command takes
            with formatter.section("Other job flags (accepted; this command does not use them)"):
                width = max((formatter.width or 80) - formatter.current_indent, 20)
                for line in wrap_keeping_values(", ".join(hidden), width):  # never inside a flag's name
                    formatter.write(f"{'':>{formatter.current_indent}}{line}\n")


def _ordered(fields: Iterable[Field]) -> list[str]:
    """The fields' headings in the order of HEADINGS (a field HEADING_OF_PATH moves does not move its heading)."""
    found = {heading(field) for field in fields}
    order = [name + (JOB_HEADING_NOTE if name == "Job" else "") for name in dict.fromkeys(HEADINGS.values())]
    return [name for name in order if name in found] + sorted(found - set(order))


def _shown(
    sections: Iterable[tuple[str, list[tuple[str, str]]]], headings: tuple[str, ...]
) -> list[tuple[str, list[tuple[str, str]]]]:
    return [(name, records) for name, records in sections if name.removesuffix(JOB_HEADING_NOTE) in headings]


def apply(command: click.Command, path: str) -> click.Command:
    """Give ``command`` (and, for a group, its subcommands) the sectioned layout and its example."""
    if getattr(command, "_pwdeploy_help", False):
        return command
    command.context_class = HelpContext
    entry = TABLE.get(path)
    if entry is not None and not command.epilog:
        command.epilog = f"\b\nExample:\n  {entry.example}"
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            apply(sub, f"{path} {name}".strip())
    # A command without job flags is laid out without importing the config: list, status, logs, delete start faster.
    elif any((param.name or "").startswith(JOB_PARAM_PREFIX) for param in command.params) and not isinstance(
        command, SectionedHelp
    ):
        # The command module used plain @click.command; give the same object the sectioned layout.
        command.__class__ = type(f"Sectioned{type(command).__name__}", (SectionedHelp, type(command)), {})
    if isinstance(command, SectionedHelp):
        command.shown_headings = HEADINGS_OF_COMMAND.get(path, CLUSTER_HEADINGS)
    command._pwdeploy_help = True  # type: ignore[attr-defined]
    return command
