"""How `--help` reads: the command's own options first, then the job flags under one heading per part of the
job they configure, defaults shown, and one example per command.

Commands are plain ``@click.command`` functions in their modules; ``apply`` gives each its layout and example
when the `pwdeploy` group loads it, so this file is the one place that decides how help looks.
"""

from __future__ import annotations

import click

from pwdeploy.cli.options import FIELD_OF_PARAM, FILE_PARAM
from pwdeploy.fields import Field

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

_JOB = "-f job.yaml"
EXAMPLES = {
    "": "pwdeploy render -f job.yaml | kubectl apply -f -",
    "render": f"pwdeploy render {_JOB} --num-slices 2 --output-dir out/",
    "validate": "pwdeploy validate out/*.yaml --kubernetes-version 1.30",
    "schema": "pwdeploy schema > pwdeploy.schema.json",
    "local": f"pwdeploy local run {_JOB}",
    "local run": f"pwdeploy local run {_JOB} -- python3 train.py --steps 10",
    "local env": f"pwdeploy local env {_JOB} -- python3 -c 'import jax; print(jax.devices())'",
    "sidecar": f"pwdeploy sidecar build {_JOB} --push",
    "sidecar dockerfile": f"pwdeploy sidecar dockerfile {_JOB} | less",
    "sidecar build": f"pwdeploy sidecar build {_JOB} --push",
    "image": f"pwdeploy image build {_JOB}",
    "image dockerfile": f"pwdeploy image dockerfile {_JOB} | less",
    "image build": f"pwdeploy image build {_JOB} --image-repository us-docker.pkg.dev/p/r/train",
    "preflight": f"pwdeploy preflight {_JOB} --region us-central1",
    "submit": f"pwdeploy submit {_JOB} --wait",
    "list": "pwdeploy list -n team-a",
    "status": "pwdeploy status demo -n team-a",
    "logs": "pwdeploy logs demo -f --component worker --slice 1",
    "delete": "pwdeploy delete demo -n team-a --yes",
}


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
    example = EXAMPLES.get(path)
    if example is not None and not command.epilog:
        command.epilog = f"\b\nExample:\n  {example}"
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            apply(sub, f"{path} {name}".strip())
    elif any(param.name in FIELD_OF_PARAM for param in command.params) and not isinstance(command, SectionedHelp):
        # The command module used plain @click.command; give the same object the sectioned layout.
        command.__class__ = type(f"Sectioned{type(command).__name__}", (SectionedHelp, type(command)), {})
    command._pwdeploy_help = True  # type: ignore[attr-defined]
    return command
