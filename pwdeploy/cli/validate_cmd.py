"""`pwdeploy validate FILE...`: check manifests before they reach a cluster."""

from __future__ import annotations

import click

from pwdeploy.errors import ConfigError, ValidationError


@click.command()
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option(
    "--kubernetes-version",
    default="1.31",
    show_default=True,
    envvar="PWDEPLOY_KUBERNETES_VERSION",
    help="Kubernetes version whose schemas to check against [env PWDEPLOY_KUBERNETES_VERSION].",
)
def validate(files: tuple[str, ...], kubernetes_version: str) -> None:
    """Check manifests (multi-document YAML or JSON; `-` for standard input) against the Kubernetes schemas, the
    JobSet schema and the rules of the JobSet webhook and the API server. Exits 3 when there are problems.
    """
    from pwdeploy.validate import validate_objects
    from pwdeploy.validation.files import load_documents

    problems: list[str] = []
    count = 0
    for source in files:
        name = "<stdin>" if source == "-" else source
        objects = load_documents(source)
        if not objects:
            raise ConfigError(name, "holds no Kubernetes objects")
        count += len(objects)
        problems += [f"{name}: {line}" for line in validate_objects(objects, kubernetes_version=kubernetes_version)]
    if problems:
        raise ValidationError(problems)
    click.echo(f"ok: {count} object{'' if count == 1 else 's'} valid")
