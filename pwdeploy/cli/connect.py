"""`pwdeploy connect` (``api.connect_session``): a headless job's IFRT proxy on 127.0.0.1, through the Kubernetes
API (no kubectl)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from pwdeploy import api
from pwdeploy.cli.cluster_options import announce, surroundings, with_cluster
from pwdeploy.session.attach import DEFAULT_LOCAL_PORT

if TYPE_CHECKING:
    from pwdeploy.api import Cluster


class _SeesTheDashes(click.Command):
    """Sees whether ``--`` was typed (click's parser consumes it): ``connect NAME --`` with no command after it is
    a usage error (exit 2, before anything connects), not the forward-only mode that ``connect NAME`` is."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        dashes = "--" in args
        rest = super().parse_args(ctx, args)
        if dashes and not ctx.params.get("command"):
            raise click.UsageError(
                "-- is followed by no command: give one (connect NAME -- python3 client.py), or drop --", ctx
            )
        return rest


@click.command(cls=_SeesTheDashes)  # options may follow NAME; everything after -- is the command
@click.argument("name")
@click.option(
    "--local-port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_LOCAL_PORT,
    show_default=True,
    help="Port on 127.0.0.1 to forward (0: any free port).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="Give up waiting for the proxy after SECONDS.",
)
@click.option("--print-env", is_flag=True, help="Wait until the proxy serves, print the export lines and exit.")
@click.option(
    "--strict-version", is_flag=True, help="Exit 2 when the local jax differs from the job's Pathways version."
)
@click.option("--delete-on-exit", is_flag=True, help="Delete the job when connect ends (after COMMAND, or on Ctrl-C).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND...]")
@with_cluster
def connect(
    cluster: Cluster,
    name: str,
    local_port: int,
    timeout: float | None,
    print_env: bool,
    strict_version: bool,
    delete_on_exit: bool,
    command: tuple[str, ...],
) -> int:
    """Forward a headless job's IFRT proxy to 127.0.0.1 and point JAX at it.

    Waits until the proxy serves, then prints `export JAX_PLATFORMS=proxy` and `export JAX_BACKEND_TARGET=...`
    on stdout and holds the forward until Ctrl-C; with `-- COMMAND` it runs COMMAND with those variables (and
    PWDEPLOY_JOB) set and exits with its status. Each local connection gets its own stream through the API
    server. A dropped stream ends its connection and the JAX session on it: the proxy does not resume a session,
    so restart the client (a notebook: its kernel); `CANCELLED` after that means the proxy still holds the old
    session: restart the head. While waiting, stderr shows the resource manager's count of ready slices.
    """
    if delete_on_exit:
        announce(cluster.kube)
    options = api.SessionOptions(local_port, timeout, print_env, strict_version, delete_on_exit, command)
    return api.connect_session(cluster, name, options, surroundings=surroundings())
