"""`pwdeploy profile NAME`: an on-demand trace of a running job into its storage.profiles, through the API
server's port-forward to the head pod (no port open on the node)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from pwdeploy.cli.cluster_options import with_cluster
from pwdeploy.identifiers import PROFILER_PORT

if TYPE_CHECKING:
    from pwdeploy.api import Cluster


@click.command()
@click.argument("name")
@click.option(
    "--duration",
    type=click.FloatRange(min=0, min_open=True),
    required=True,
    metavar="SECONDS",
    help="How long to trace.",
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=PROFILER_PORT,
    show_default=True,
    help="The port the program passed to jax.profiler.start_server.",
)
@click.option(
    "--hosts",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="TPU hosts to trace (pathwaysutils' server traces one).",
)
@with_cluster
def profile(cluster: Cluster, name: str, duration: float, port: int, hosts: int) -> None:
    """Capture a trace of a running job's program into its storage.profiles.

    The program must run pathwaysutils' profiler server: `jax.profiler.start_server(9999)` after
    `pathwaysutils.initialize()`. pwdeploy asks it for a trace (POST /profiling, as `python -m
    pathwaysutils.collect_profile` does) through the Kubernetes API, so the server can stay on the head node's
    loopback (main.profiler_host, the default). Set PATHWAYS_PROFILING_AUTH_TOKEN here if the job sets one.
    """
    from pwdeploy import api

    done = api.profile(cluster, name, duration=duration, port=port, hosts=hosts, progress=sys.stderr)
    click.echo(f"trace of job {name} ({done.seconds:g} s, pod/{done.pod}) written under {done.trace_dir}")
    click.echo(f"tensorboard --logdir {done.log_dir}")
