"""`pwdeploy validate FILE...`: check manifests before they reach a cluster."""

from __future__ import annotations

from typing import Any

import click

from pwdeploy.errors import ConfigError, ValidationError
from pwdeploy.validation.validate import DEFAULT_KUBERNETES_VERSION, file_problems, read_manifests


@click.command()
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@click.option(
    "--kubernetes-version",
    default=DEFAULT_KUBERNETES_VERSION,
    show_default=True,
    envvar="PWDEPLOY_KUBERNETES_VERSION",
    help="Kubernetes version whose schemas to check against [env PWDEPLOY_KUBERNETES_VERSION].",
)
def validate(files: tuple[str, ...], kubernetes_version: str) -> None:
    """Check manifests (multi-document YAML or JSON; `-` for standard input) against the Kubernetes schemas, the
    JobSet schema and the rules of the JobSet webhook and the API server. Exits 3 when there are problems.
    """
    manifests = read_manifests(files)
    _refuse_job_configs(manifests)
    problems = file_problems(manifests, kubernetes_version=kubernetes_version)
    if problems:
        raise ValidationError(problems)
    count = sum(map(len, manifests.values()))
    click.echo(f"ok: {count} object{'' if count == 1 else 's'} valid")


def _refuse_job_configs(manifests: dict[str, list[Any]]) -> None:
    """A pwdeploy job config given instead of manifests: say to render it first (exit 2), rather than list the
    fields a Kubernetes object lacks."""
    from pwdeploy.config.fields import FIELDS

    sections = {f.path.split(".")[0] for f in FIELDS} - {"name", "namespace"}
    for path, objects in manifests.items():
        if any(isinstance(o, dict) and not {"apiVersion", "kind"} & o.keys() and sections & o.keys() for o in objects):
            source = "-f -" if path == "-" else f"-f {path}"
            raise ConfigError(
                None,
                f"{path} is a pwdeploy job config, not Kubernetes manifests",
                hint=f"render it (render validates what it writes): pwdeploy render {source}",
            )
