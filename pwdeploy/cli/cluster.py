"""`pwdeploy submit`, `list`, `status`, `logs` and `delete`: a job's lifecycle on a cluster."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from pwdeploy.cli.cluster_options import (
    Cluster,
    announce,
    cluster_options,
    cluster_source,
    open_kube,
    region_option,
    surroundings,
    with_cluster,
)
from pwdeploy.cli.options import job_from_params, job_options, pop_job_params
from pwdeploy.cli.output import confirm, emit, output_option
from pwdeploy.errors import ConfigError, PreflightError
from pwdeploy.text import printable

if TYPE_CHECKING:
    from pwdeploy.config import JobConfig
    from pwdeploy.kube.seam import Kube
    from pwdeploy.preflight import PreflightReport

# ---------------------------------------------------------------------------------------------- submit


@click.command()
@job_options
@click.option("-n", "namespace_alias", default=None, help="Same as --namespace.")
@cluster_options
@click.option(
    "--dry-run",
    type=click.Choice(["none", "client", "server"]),
    default="none",
    show_default=True,
    help="server: the API server validates and admits the job, nothing is persisted; "
    "client: check and compare only, nothing is sent that could change the cluster.",
)
@click.option(
    "--wait",
    type=click.Choice(["running", "done"]),
    is_flag=False,
    flag_value="running",
    default=None,
    help="Show progress until every pod runs (--wait or --wait=running) or the job ends (--wait=done).",
)
@click.option(
    "--timeout", type=click.FloatRange(min=0), default=None, metavar="SECONDS", help="Give up waiting after SECONDS."
)
@click.option(
    "--connect",
    "connect_after",
    is_flag=True,
    help="Headless jobs: once running, forward the proxy to 127.0.0.1 (--local-port) as `pwdeploy connect` does.",
)
@click.option(
    "--local-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="With --connect: the port on 127.0.0.1 to forward (default 29000; 0: any free port).",
)
@click.option("--replace", is_flag=True, help="Delete a different job of the same name and create this one.")
@click.option("-y", "--yes", is_flag=True, help="Do not ask before replacing.")
@click.option("--skip-preflight", is_flag=True, help="Skip the preflight checks (cluster readiness, GCS, images).")
@region_option
def submit(
    namespace_alias: str | None,
    kubeconfig: Path | None,
    context: str | None,
    dry_run: str,
    wait: str | None,
    timeout: float | None,
    connect_after: bool,
    local_port: int | None,
    replace: bool,
    yes: bool,
    skip_preflight: bool,
    region: str | None,
    **params: Any,
) -> int:
    """Render, check and submit a job as a JobSet (server-side apply, field manager pwdeploy).

    Submitting the same config again changes nothing; a different config under the same name needs --replace.
    """
    from pwdeploy import manifests
    from pwdeploy.advice import job_warnings
    from pwdeploy.cluster.attach import DEFAULT_LOCAL_PORT, SessionOptions, bind_local
    from pwdeploy.cluster.deploy import SubmitOptions, submit_job
    from pwdeploy.cluster.submit import DryRun
    from pwdeploy.validation.validate import require_valid

    _check_wait_flags(wait, timeout, dry_run, connect_after)
    job_params = pop_job_params(params)
    if namespace_alias is not None:
        if job_params.get("job__namespace") not in (None, namespace_alias):
            raise ConfigError("-n", f"{namespace_alias!r} contradicts --namespace {job_params['job__namespace']!r}")
        job_params["job__namespace"] = namespace_alias
    job = job_from_params(job_params)
    if connect_after and not job.headless:
        raise ConfigError("--connect", "applies to headless jobs only: this job's program runs in the cluster")
    if local_port is not None and not connect_after:
        raise ConfigError("--local-port", "applies only to --connect", hint="add --connect, or drop --local-port")
    session = None
    if connect_after:
        session = SessionOptions(local_port=DEFAULT_LOCAL_PORT if local_port is None else local_port, timeout=timeout)
        bind_local(session.local_port).close()  # a port in use stops submit before the job is created
    # Every problem of the config is reported before the cluster is asked anything (or even found).
    require_valid(manifests.build(job._replace(namespace=job.namespace or "default")))
    kube = open_kube(kubeconfig, context)
    announce(kube)
    for warning in job_warnings(job):
        click.echo(f"warning: {warning}", err=True)
    options = SubmitOptions(
        dry_run=DryRun(dry_run),
        replace=replace,
        wait="done" if wait == "done" else "running" if wait is not None else None,
        timeout=timeout,
        connect=session,
    )
    submitted = submit_job(
        kube,
        job,
        options,
        surroundings(),
        confirm=lambda q: yes or confirm(q),
        preflight=None if skip_preflight else lambda checked: _preflight(checked, kube, region),
    )
    for line in submitted.next_steps:
        click.echo(line)
    return submitted.status


def _check_wait_flags(wait: str | None, timeout: float | None, dry_run: str, connect_after: bool = False) -> None:
    """Flags that would be ignored are refused, so a script never believes it waited."""
    if timeout is not None and wait is None and not connect_after:
        raise ConfigError("--timeout", "applies only to --wait", hint="add --wait (or --wait=done), or drop --timeout")
    if wait is not None and dry_run != "none":
        raise ConfigError("--wait", f"a --dry-run={dry_run} creates nothing to wait for", hint="drop one of them")
    if connect_after and dry_run != "none":
        raise ConfigError("--connect", f"a --dry-run={dry_run} creates nothing to connect to", hint="drop one of them")
    if connect_after and wait == "done":
        raise ConfigError("--connect", "a headless job is done only when deleted; --connect waits until it runs")


def _preflight(job: JobConfig, kube: Kube, region: str | None) -> list[str]:
    """The cluster readiness, GCS and image checks, side by side; a failed row stops submit before anything is
    created, and the rows that are not ok are the lines told before it goes on."""
    from pwdeploy.preflight import run_preflight

    report = run_preflight(job, region=region, extra_sources=[cluster_source(job, kube=kube)])
    if report.failed:
        raise PreflightError(
            "preflight failed; nothing was submitted:\n" + report.format_table(),
            hint="fix what the report names, or pass --skip-preflight to submit anyway",
        )
    return unsettled_rows(report)


def unsettled_rows(report: PreflightReport) -> list[str]:
    """One line per row that is not ok: ``warning: CHECK LOCATION: DETAIL`` (or ``not verified: ...``)."""
    from pwdeploy.preflight import Status

    word = {Status.WARN: "warning", Status.NOT_VERIFIED: "not verified", Status.FAILED: "failed"}
    return [f"{word[r.status]}: {r.check} {r.location}: {r.detail}" for r in report.results if r.status in word]


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
