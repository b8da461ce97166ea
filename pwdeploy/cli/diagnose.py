"""`pwdeploy diagnose NAME`: why a job is not running, with the evidence and the fix for each finding."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from pwdeploy import api
from pwdeploy.cli.cluster_options import with_cluster
from pwdeploy.errors import DiagnosisError
from pwdeploy.text import printable

if TYPE_CHECKING:
    from pwdeploy.api import Cluster


@click.command()
@click.argument("name")
@click.option(
    "-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True, help="Output format."
)
@with_cluster
def diagnose(cluster: Cluster, name: str, output: str) -> None:
    """Explain why a job is not running: findings (cause, severity, where, evidence, fix), most important first.

    Exit code 0 without an error finding, 10 with one; 4 when the job does not exist.
    """
    found = api.diagnose(cluster, name)
    if output == "json":
        click.echo(json.dumps(found.as_json(), indent=2))
    else:
        for line in found.lines():
            click.echo(printable(line))  # evidence is quoted printable already; names and reasons come from outside too
    if found.errors:
        causes = ", ".join(dict.fromkeys(f.id for f in found.errors))
        raise DiagnosisError(f"job {name}: {len(found.errors)} error finding(s): {causes}")
