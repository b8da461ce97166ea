"""`pwdeploy list`, `status`, `logs` and `delete`: a job on a cluster (`submit` is cli/submission.py)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from pwdeploy.cli.cluster_options import (
    Cluster,
    announce,
    with_cluster,
)
from pwdeploy.cli.output import confirm, emit, output_option
from pwdeploy.errors import ConfigError
from pwdeploy.text import printable

if TYPE_CHECKING:
    pass

# ---------------------------------------------------------------------------------------------- inspect


@click.command("list")
@click.option("-A", "--all-namespaces", is_flag=True, help="List jobs in every namespace.")
@output_option
@with_cluster
def list_jobs(cluster: Cluster, all_namespaces: bool, output: str) -> None:
    """List pwdeploy-managed JobSets with their state, ready slices and age."""
    from pwdeploy.cluster import jobsets as js
    from pwdeploy.cluster.progress import CELL_WIDTH, age, job_state, slices_text, table

    kube = cluster.kube
    ns = None if all_namespaces else cluster.namespace
    items = js.list_jobsets(kube, ns)
    if output != "text":
        from pwdeploy.cluster.status import list_document

        emit(list_document(items, kube.clock.utc_now()), output)  # an empty list is a document too
        return
    if not items:
        click.echo(f"no pwdeploy jobs in {'any namespace' if ns is None else f'namespace {ns}'}", err=True)
        return
    now = kube.clock.utc_now()
    rows = [("NAMESPACE", "NAME", "STATE", "SLICES", "AGE")]
    for obj in sorted(items, key=lambda o: (js.namespace_of(o), js.name_of(o))):
        rows.append(
            (  # names from the server as a terminal may show them (a hostile name may hold escapes)
                printable(js.namespace_of(obj), CELL_WIDTH),
                printable(js.name_of(obj), CELL_WIDTH),
                job_state(obj).phase,
                slices_text(obj),
                age(js.created_at(obj), now),
            )
        )
    click.echo(table([row if ns is None else row[1:] for row in rows]))


@click.command()
@click.argument("name")
@output_option
@with_cluster
def status(cluster: Cluster, name: str, output: str) -> None:
    """Show a job's state and conditions, its pods per component and slice, and warning events."""
    from pwdeploy.cluster.status import read_status, status_document, status_lines

    found = read_status(cluster.kube, cluster.namespace, name)
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
    from pwdeploy.cluster.logs import COMPONENTS, find_pod, log_bytes

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
    kube, ns = cluster
    pod = find_pod(kube, ns, name, component, slice_index or 0, host or 0)
    out = sys.stdout.buffer
    for chunk in log_bytes(kube, ns, pod, COMPONENTS[component][1], follow=follow, tail=tail, previous=previous):
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
    """`logs --all`: the job's timeline (pwdeploy.cluster.timeline)."""
    import json

    from pwdeploy.cluster import jobsets as js
    from pwdeploy.cluster.logs import check_worker_exists
    from pwdeploy.cluster.timeline import Entry, Selection, Timeline, format_entry

    for flag, given in (("--tail", tail is not None), ("--previous", previous)):
        if given:
            raise ConfigError(
                None, "does not apply to --all (the timeline reads every line the API server has)", source=flag
            )
    kube, ns = cluster
    jobset = js.require_jobset(kube, ns, name)
    if slice_index is not None or host is not None:
        check_worker_exists(jobset, slice_index or 0, host or 0)

    def emit_entry(entry: Entry) -> None:
        if output == "json":
            click.echo(json.dumps(entry.document()))
        else:
            click.echo(printable(format_entry(entry, timestamps=timestamps)))

    timeline = Timeline(
        kube,
        ns,
        name,
        emit_entry,
        selection=Selection(component, slice_index, host),
        follow=follow,
        max_streams=max_streams,
    )
    try:
        end = timeline.run()
    except KeyboardInterrupt:
        click.echo(f"\nStopped following; job {name} keeps running.", err=True)
        raise click.exceptions.Exit(130) from None
    if follow:
        click.echo(f"job {name}: {end}", err=True)


@click.command()
@click.argument("name")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--wait", is_flag=True, help="Return only once the JobSet and its pods are gone.")
@with_cluster
def delete(cluster: Cluster, name: str, yes: bool, wait: bool) -> None:
    """Delete a pwdeploy-managed job (its JobSet, Jobs and pods)."""
    from pwdeploy.cluster import jobsets as js
    from pwdeploy.errors import ClusterError, PwdeployError

    kube, ns = cluster
    announce(kube)
    if not js.is_managed(js.require_jobset(kube, ns, name)):
        raise ClusterError(
            f"jobset {name} in namespace {ns} is not managed by pwdeploy; not deleting it",
            hint="delete it with the tool that created it",
        )
    if not yes and not confirm(f"Delete jobset {name} in namespace {ns}? Its pods stop now."):
        raise PwdeployError("not deleted")
    js.delete_jobset(kube, ns, name)
    said: list[str] = []

    def progress(line: str) -> None:  # which pods still terminate, whenever that changes
        said.append(line)
        click.echo(line, err=True)

    if wait and not js.wait_gone(kube, ns, name, said=progress):
        raise ClusterError(
            f"jobset {name} is still being deleted after {js.DELETE_TIMEOUT_S:.0f} s"
            + (f"; {said[-1]}" if said else ""),
            hint=f"pods on a node that does not answer stay Terminating: pwdeploy status {name} -n {ns} shows them; "
            "look for finalizers too (kubectl get jobset,jobs,pods -o yaml)",
        )
    click.echo(f"jobset {name} deleted" if wait else f"jobset {name} deletion requested (pods stop in the background)")
