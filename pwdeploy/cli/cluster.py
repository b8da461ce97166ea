"""`pwdeploy list`, `status`, `logs` and `delete`: a job on a cluster (`submit` is cli/submission.py)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from pwdeploy import api
from pwdeploy.cli.cluster_options import announce, with_cluster
from pwdeploy.cli.output import confirm, emit, output_option
from pwdeploy.errors import ConfigError
from pwdeploy.text import printable

if TYPE_CHECKING:
    from collections.abc import Callable

    from pwdeploy.api import Cluster
    from pwdeploy.cluster.timeline import Entry, Timeline

# ---------------------------------------------------------------------------------------------- inspect


@click.command("list")
@click.option("-A", "--all-namespaces", is_flag=True, help="List jobs in every namespace.")
@output_option
@with_cluster
def list_jobs(cluster: Cluster, all_namespaces: bool, output: str) -> None:
    """List pwdeploy-managed JobSets with their state, ready slices and age."""
    from pwdeploy.cluster.progress import CELL_WIDTH, table

    jobs = api.list_jobs(cluster, all_namespaces=all_namespaces)
    if output != "text":
        from pwdeploy.cluster.status import list_document

        emit(list_document(jobs), output)  # an empty list is a document too
        return
    if not jobs:
        where = "any namespace" if all_namespaces else f"namespace {cluster.namespace}"
        click.echo(f"no pwdeploy jobs in {where}", err=True)
        return
    rows = [("NAMESPACE", "NAME", "STATE", "SLICES", "AGE")]
    for job in jobs:  # names from the server as a terminal may show them (a hostile name may hold escapes)
        rows.append((printable(job.namespace, CELL_WIDTH), printable(job.name, CELL_WIDTH), *job[2:4], job.age))
    click.echo(table([row if all_namespaces else row[1:] for row in rows]))


@click.command()
@click.argument("name")
@output_option
@with_cluster
def status(cluster: Cluster, name: str, output: str) -> None:
    """Show a job's state and conditions, its pods per component and slice, and warning events."""
    from pwdeploy.cluster.status import status_document, status_lines

    found = api.status(cluster, name)
    if output != "text":
        emit(status_document(found), output)
        return
    for line in status_lines(found):
        click.echo(printable(line))  # each value from the cluster is made printable already; this is the edge


@click.command()
@click.argument("name")
@click.option(
    "--component",
    type=click.Choice(["main", "proxy", "rm", "worker", "sidecar"]),
    default=None,
    help="Container to read (default main): the user's program, IFRT proxy, resource manager, TPU worker or "
    "colocated-Python sidecar. With --all: only that component's containers.",
)
@click.option("--slice", "slice_index", type=click.IntRange(min=0), default=None, help="Worker slice (default 0).")
@click.option("--host", type=click.IntRange(min=0), default=None, help="Worker host in the slice (default 0).")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines.")
@click.option("--tail", type=click.IntRange(min=0), default=None, help="Only the last N lines.")
@click.option("-p", "--previous", is_flag=True, help="The previous (restarted) container's logs.")
@click.option(
    "--all",
    "all_containers",
    is_flag=True,
    help="The job timeline: every container of every pod (or those --component/--slice/--host select), each line "
    "prefixed with its origin, with the job's events and milestones; with -f until the job ends.",
)
@click.option("--timestamps", is_flag=True, help="With --all: each line's time, as the API server gave it.")
@click.option(
    "--max-streams",
    type=click.IntRange(min=1, max=256),
    default=16,
    show_default=True,
    help="With --all -f: follow streams open at once; the other containers are polled.",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="With --all: json prints one object per line (kind, time, origin, text).",
)
@with_cluster
def logs(
    cluster: Cluster,
    name: str,
    component: str | None,
    slice_index: int | None,
    host: int | None,
    follow: bool,
    tail: int | None,
    previous: bool,
    all_containers: bool,
    timestamps: bool,
    max_streams: int,
    output: str,
) -> None:
    """Print a job's container logs (`-f` follows them, as in kubectl); `--all` the whole job's timeline."""
    if all_containers:
        _timeline(cluster, name, component, slice_index, host, follow, tail, previous, timestamps, max_streams, output)
        return
    for flag, given in (("--timestamps", timestamps), ("-o", output != "text"), ("--max-streams", max_streams != 16)):
        if given:
            raise ConfigError(None, "applies only to --all", source=flag, hint="add --all, or drop it")
    component = component or "main"
    if component not in ("worker", "sidecar") and (slice_index is not None or host is not None):
        flag = "--slice" if slice_index is not None else "--host"
        raise ConfigError(None, f"applies to --component worker or sidecar, not {component}", source=flag)
    read = api.logs(
        cluster,
        name,
        component=component,  # type: ignore[arg-type]  # click's Choice: one of the components
        slice_index=slice_index or 0,
        host=host or 0,
        tail=tail,
        previous=previous,
        follow=follow,
    )
    out = sys.stdout.buffer
    for chunk in read:
        out.write(chunk)  # byte-exact, as kubectl: the program's own output is not ours to rewrite
        out.flush()


def _timeline(
    cluster: Cluster,
    name: str,
    component: str | None,
    slice_index: int | None,
    host: int | None,
    follow: bool,
    tail: int | None,
    previous: bool,
    timestamps: bool,
    max_streams: int,
    output: str,
) -> None:
    """`logs --all`: the job's timeline (``api.timeline``)."""
    import json

    from pwdeploy.cluster.timeline import format_entry

    _refuse_for_timeline(tail, previous)

    def show(entry: Entry) -> None:
        if output == "json":
            click.echo(json.dumps(entry.document()))
        else:
            click.echo(printable(format_entry(entry, timestamps=timestamps)))

    def progress(line: str) -> None:  # how many pods are still being read, on stderr beside the timeline
        click.echo(f"pwdeploy: {line}", err=True)

    read = api.timeline(
        cluster, name, component=component, slice_index=slice_index, host=host, follow=follow,  # type: ignore[arg-type]
        max_streams=max_streams, on_progress=progress,
    )  # fmt: skip
    _show_timeline(read, show, name, follow=follow)


def _refuse_for_timeline(tail: int | None, previous: bool) -> None:
    for flag, given in (("--tail", tail is not None), ("--previous", previous)):
        if given:
            raise ConfigError(
                None, "does not apply to --all (the timeline reads every line the API server has)", source=flag
            )


def _show_timeline(read: Timeline, show: Callable[[Entry], None], name: str, *, follow: bool) -> None:
    """Each entry as it comes; a Ctrl-C shows what the reads had given, then exits 130 (the job runs on)."""
    try:
        for entry in read:
            show(entry)
    except KeyboardInterrupt:
        for entry in read.held():  # what the reads gave before the stop
            show(entry)
        click.echo(f"\nStopped following; job {name} keeps running.", err=True)
        raise click.exceptions.Exit(130) from None
    if follow:
        click.echo(f"job {name}: {read.end}", err=True)


@click.command()
@click.argument("name")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--wait", is_flag=True, help="Return only once the JobSet and its pods are gone.")
@with_cluster
def delete(cluster: Cluster, name: str, yes: bool, wait: bool) -> None:
    """Delete a pwdeploy-managed job (its JobSet, Jobs and pods)."""
    announce(cluster.kube)
    api.delete(cluster, name, wait=wait, confirm=None if yes else confirm, progress=sys.stderr)
    click.echo(f"jobset {name} deleted" if wait else f"jobset {name} deletion requested (pods stop in the background)")
