"""`pwdeploy render` and `pwdeploy schema`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from pwdeploy.cli.options import JobCommand, job_from_params, job_options, pop_job_params, warn


@click.command(cls=JobCommand)
@job_options
@click.option(
    "-o",
    "--output",
    "fmt",
    type=click.Choice(["yaml", "json"]),
    default="yaml",
    show_default=True,
    help="Output format.",
)
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write one file per object here instead of printing.",
)
@click.option("--no-validate", is_flag=True, help="Skip the schema and webhook-rule checks.")
def render(fmt: str, output_dir: Path | None, no_validate: bool, **params: Any) -> None:
    """Render the job's Kubernetes manifests (for `kubectl apply -f -` or review).

    Output is deterministic: the same config always gives byte-identical manifests.
    """
    from pwdeploy import api

    job = job_from_params(pop_job_params(params))
    for line in api.warnings(job):
        warn(line)
    objects = api.render(job, validate=not no_validate)
    if output_dir is not None:
        for path in api.write_manifests(objects, output_dir, output=fmt):
            click.echo(f"wrote {path}", err=True)
        return
    click.echo(api.to_json(objects) if fmt == "json" else api.to_yaml(objects), nl=False)


@click.command()
@click.option("--markdown", is_flag=True, help="Print the config reference as a Markdown table instead.")
@click.option(
    "--finding", is_flag=True, help="Print the JSON Schema of one finding (of check, diagnose, preflight, validate)."
)
def schema(markdown: bool, finding: bool) -> None:
    """Print the JSON Schema of the job config (for editors: yaml-language-server, VS Code)."""
    import json

    from pwdeploy import api

    if markdown and finding:
        raise click.UsageError("--markdown and --finding: pass one (the config's table, or a finding's schema)")
    if markdown:
        click.echo(api.config_reference(), nl=False)
        return
    click.echo(json.dumps(api.finding_schema() if finding else api.schema(), indent=2))
