"""`pwdeploy validate FILE...`: check manifests before they reach a cluster."""

from __future__ import annotations

import click

from pwdeploy.cli.output import emit, output_option
from pwdeploy.errors import ValidationError
from pwdeploy.validation.validate import DEFAULT_KUBERNETES_VERSION


@click.command()
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option(
    "--kubernetes-version",
    default=DEFAULT_KUBERNETES_VERSION,
    show_default=True,
    envvar="PWDEPLOY_KUBERNETES_VERSION",
    help="Kubernetes version whose schemas to check against [env PWDEPLOY_KUBERNETES_VERSION].",
)
@output_option
def validate(files: tuple[str, ...], kubernetes_version: str, output: str) -> None:
    """Check manifests (multi-document YAML or JSON; `-` for standard input) against the Kubernetes schemas, the
    JobSet schema and the rules of the JobSet webhook and the API server. Exits 3 when there are problems.
    """
    from pwdeploy import api

    found = api.validate_files(files, kubernetes_version=kubernetes_version)
    if output != "text":
        emit({"objects": found.objects, "findings": [f.as_json() for f in found.findings]}, output)
    if found.findings:
        raise ValidationError(found.findings, listed=output == "text")
    if output == "text":
        click.echo(f"ok: {found.objects} object{'' if found.objects == 1 else 's'} valid")
