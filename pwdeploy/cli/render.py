"""`pwdeploy render` and `pwdeploy schema`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from pwdeploy.cli.options import JobCommand, job_from_params, job_options, pop_job_params
from pwdeploy.errors import ConfigError


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
    from pwdeploy import manifests
    from pwdeploy.advice import job_warnings

    job = job_from_params(pop_job_params(params))
    for warning in job_warnings(job):
        click.echo(f"warning: {warning}", err=True)
    objects = manifests.build(job)
    if not no_validate:
        from pwdeploy.validation.validate import require_valid

        require_valid(objects)
    if output_dir is not None:
        try:
            written = manifests.write_dir(objects, output_dir, fmt)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise ConfigError(None, f"cannot write to {output_dir}: {reason}", source="--output-dir") from None
        for path in written:
            click.echo(f"wrote {path}", err=True)
        return
    click.echo(manifests.to_json(objects) if fmt == "json" else manifests.to_yaml(objects), nl=False)


@click.command()
@click.option("--markdown", is_flag=True, help="Print the config reference as a Markdown table instead.")
def schema(markdown: bool) -> None:
    """Print the JSON Schema of the job config (for editors: yaml-language-server, VS Code)."""
    import json

    from pwdeploy.config.json_schema import config_reference_markdown, job_schema

    click.echo(config_reference_markdown() if markdown else json.dumps(job_schema(), indent=2), nl=not markdown)
