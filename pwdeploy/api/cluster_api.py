"""The job on a cluster: the ``Cluster`` (built whole from a kubeconfig), then the job's life through the Kubernetes
API: list, submit, status, wait, logs, diagnose, delete (docs/api.md, "The cluster").

A job's name and the namespace are checked before any request is sent; every function reads the server's answers
as untrusted (``reading_answers``: a wrong shape is a ``ClusterError``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal, NamedTuple

from pwdeploy.api.job_api import PathLike, say_to

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TextIO

    from pwdeploy.cluster.diagnose.findings import Diagnosis
    from pwdeploy.cluster.progress import JobState
    from pwdeploy.cluster.status import JobStatus, JobSummary
    from pwdeploy.cluster.timeline import Selection, Timeline
    from pwdeploy.kube.kubeconfig import PluginLimits
    from pwdeploy.kube.seam import Clock, Kube, RequestLimits
    from pwdeploy.kube.throttle import Limit

DryRun = Literal["none", "client", "server"]
Component = Literal["main", "proxy", "rm", "worker", "sidecar"]


class Cluster(NamedTuple):
    """A connected cluster (``kube``: pwdeploy's bounded client) and the namespace the functions work in."""

    kube: Kube
    namespace: str


class ClientSettings(NamedTuple):
    """How pwdeploy's Kubernetes client waits, beyond what the kubeconfig says: the clock it sleeps on, the bounds
    of each request (``RequestLimits``: per attempt, in all, and when a request is told to be slow), those of a
    credential plugin (``PluginLimits``) and the client-side rate limit (``Limit``: requests a second and burst).
    Each None is the default; tests give shorter ones."""

    clock: Clock | None = None
    requests: RequestLimits | None = None
    plugin: PluginLimits | None = None
    rate: Limit | None = None  # the client-side rate limit (requests a second, burst); None: the environment's, else
    # kube-scheduler's 50 and 100 (pwdeploy.kube.throttle)


def cluster(
    kubeconfig: PathLike | None = None,
    context: str | None = None,
    namespace: str | None = None,
    *,
    on_notice: Callable[[str], None] | None = None,
    settings: ClientSettings | None = None,
) -> Cluster:
    """The cluster a kubeconfig's context names (default: ``KUBECONFIG``, else ``~/.kube/config``, else the
    in-cluster service account) and the namespace (default: the context's), built whole: nothing is asked of the
    server yet. ``on_notice`` hears what a user should know on the way (a slow credential plugin, a slow request,
    credentials not sent over plain http). A missing or unusable kubeconfig, an unknown context or a bad
    namespace is a ``ConfigError`` naming the argument; a credential plugin that fails is a ``ClusterError``."""
    from pwdeploy import arguments
    from pwdeploy.kube.kubeconfig import load_kube

    check_namespace(namespace)
    path = arguments.optional_path(kubeconfig, "kubeconfig")
    given = settings or ClientSettings()
    kube = load_kube(
        path,
        arguments.optional_text(context, "context"),
        clock=given.clock,
        on_notice=on_notice,
        plugin_limits=given.plugin,
        request_limits=given.requests,
        on_wait=on_notice,
        rate=given.rate,
    )
    return Cluster(kube, namespace or kube.namespace)


def from_kubernetes(
    client: object,
    namespace: str = "default",
    *,
    on_notice: Callable[[str], None] | None = None,
    settings: ClientSettings | None = None,
) -> Cluster:
    """The cluster a configured official client talks to (a ``kubernetes.client.ApiClient``, or its
    ``Configuration``: what ``kubernetes.config.load_kube_config()`` or ``new_client_from_config()`` gave a
    notebook), as a ``Cluster`` of pwdeploy's own bounded client: the same server, the same credentials (a token
    the official client refreshes is asked of it again before each request), the same TLS settings and proxy.
    Nothing of the official client is imported (pwdeploy does not depend on it). Credentials go to an https://
    server only. ``namespace``: where the functions work (the official client's configuration holds none)."""
    from pwdeploy.kube.official_client import kube_from_official

    check_namespace(namespace)
    given = settings or ClientSettings()
    kube = kube_from_official(
        client, namespace, clock=given.clock, request_limits=given.requests, on_notice=on_notice, rate=given.rate
    )
    return Cluster(kube, namespace)


def connect(
    kubeconfig: PathLike | None = None,
    context: str | None = None,
    namespace: str | None = None,
    *,
    on_notice: Callable[[str], None] | None = None,
) -> Cluster:
    """Deprecated: ``cluster`` (`pwdeploy connect` is the port-forward session: ``connect_session``)."""
    import warnings

    warnings.warn(
        "api.connect is deprecated: it is api.cluster (pwdeploy connect, the port-forward session, is "
        "api.connect_session)",
        DeprecationWarning,
        stacklevel=2,
    )
    return cluster(kubeconfig, context, namespace, on_notice=on_notice)


def list_jobs(cluster: Cluster, *, all_namespaces: bool = False) -> list[JobSummary]:
    """The pwdeploy-managed jobs (JobSets) in the cluster's namespace, or in every namespace: each one's
    namespace, name, state, ready slices, creation time and age, sorted by namespace and name (``pwdeploy list``)."""
    from pwdeploy.cluster import jobsets as js
    from pwdeploy.cluster.status import summaries
    from pwdeploy.kube.seam import reading_answers

    kube, namespace = given_cluster(cluster)
    with reading_answers(kube):
        found = js.list_jobsets(kube, None if all_namespaces else namespace)
    return summaries(found, kube.clock.utc_now())


def status(cluster: Cluster, name: str) -> JobStatus:
    """The job's JobSet, pods, recent warning events and diagnose's findings on them, as ``pwdeploy status``
    reads them; a job that is not there is a ``ClusterError``."""
    from pwdeploy.cluster.diagnose import findings_from
    from pwdeploy.cluster.status import read_status
    from pwdeploy.kube.seam import reading_answers

    check_name(name)
    kube, namespace = given_cluster(cluster)
    with reading_answers(kube):
        return read_status(kube, namespace, name, explain=findings_from)  # the view, and the findings in it


def wait(
    cluster: Cluster,
    name: str,
    *,
    until: Literal["running", "done"] = "done",
    timeout: float | None = None,
    progress: TextIO | None = None,
) -> JobState:
    """Poll until the job runs (``"running"``: every expected pod Running) or ends (``"done"``), and return its
    state. A failed job, a job that disappears and a ``timeout`` (seconds) passed are ``ClusterError``s (the job
    itself is left alone). ``progress`` gets one line per change (default: nowhere)."""
    import io

    from pwdeploy import arguments
    from pwdeploy.cluster.wait import Display, wait_for
    from pwdeploy.kube.seam import reading_answers

    check_name(name)
    timeout = arguments.seconds(timeout, "timeout")
    if until not in ("running", "done"):
        from pwdeploy.errors import ArgumentError

        raise ArgumentError("until", f"{until!r} is not a state to wait for; valid: running, done")
    kube, namespace = given_cluster(cluster)
    display = Display(io.StringIO() if progress is None else progress, tty=False)
    with reading_answers(kube):
        return wait_for(kube, namespace, name, until=until, display=display, timeout=timeout)


def logs(
    cluster: Cluster,
    name: str,
    *,
    component: Component = "main",
    slice_index: int = 0,
    host: int = 0,
    tail: int | None = None,
    previous: bool = False,
    follow: bool = False,
) -> Iterator[bytes]:
    """The log of one of the job's containers, byte for byte as the API server sends it (``pwdeploy logs``):
    the pod is found now (``ClusterError`` when there is none yet), the log is read as the iterator is consumed.
    ``slice_index`` and ``host`` pick a worker (or its sidecar); ``follow`` keeps reading until the container
    ends."""
    from pwdeploy import arguments
    from pwdeploy.cluster.logs import COMPONENTS, find_pod, log_bytes
    from pwdeploy.errors import ArgumentError
    from pwdeploy.kube.seam import reading_answers

    check_name(name)
    if component not in COMPONENTS:
        raise ArgumentError("component", f"{component!r} is not a component; valid: {', '.join(COMPONENTS)}")
    slice_index, host = arguments.whole(slice_index, "slice_index", 0), arguments.whole(host, "host", 0)
    tail = arguments.optional_whole(tail, "tail", 0)
    kube, namespace = given_cluster(cluster)
    with reading_answers(kube):
        pod = find_pod(kube, namespace, name, component, slice_index, host)
    container = COMPONENTS[component][1]
    return log_bytes(kube, namespace, pod, container, follow=follow, tail=tail, previous=previous)


def timeline(
    cluster: Cluster,
    name: str,
    *,
    component: Component | None = None,
    slice_index: int | None = None,
    host: int | None = None,
    follow: bool = False,
    max_streams: int = 16,
    on_progress: Callable[[str], None] | None = None,
) -> Timeline:
    """The job's timeline (``pwdeploy logs NAME --all``): iterate it for each ``TimelineEntry`` (``kind``: log,
    event or milestone; ``time``, ``origin``, ``text``; ``document()``: its JSON object) of every container of the
    job's pods (or those ``component``, ``slice_index`` and ``host`` select), interleaved with its events and
    milestones, as they come; with ``follow``, until the job ends. Once the iteration ends, ``end`` says how
    (Completed, Failed, deleted; without ``follow``: "now"); stopped early (Ctrl-C, a ``break``), ``held()`` gives
    what the reads had given and was not yet handed out. The job and the worker selected are checked now (a
    ``ClusterError``, an ``ArgumentError``); ``max_streams`` log streams are open at once (the rest are polled);
    ``on_progress`` hears how many pods are still being read."""
    from pwdeploy import arguments
    from pwdeploy.cluster import jobsets as js
    from pwdeploy.cluster.logs import check_worker_exists
    from pwdeploy.cluster.timeline import Timeline
    from pwdeploy.kube.seam import reading_answers

    check_name(name)
    selection = _selection(component, slice_index, host)
    kube, namespace = given_cluster(cluster)
    with reading_answers(kube):
        jobset = js.require_jobset(kube, namespace, name)
        if selection.slice_index is not None or selection.host is not None:
            check_worker_exists(jobset, selection.slice_index or 0, selection.host or 0)
    streams = arguments.whole(max_streams, "max_streams", 1)
    return Timeline(
        kube, namespace, name, selection=selection, follow=follow, max_streams=streams, on_progress=on_progress,
        jobset=jobset,
    )  # fmt: skip


def _selection(component: object, slice_index: object, host: object) -> Selection:
    """The pods a timeline reads, from a caller's arguments (each checked)."""
    from pwdeploy import arguments
    from pwdeploy.cluster.logs import COMPONENTS
    from pwdeploy.cluster.timeline import Selection
    from pwdeploy.errors import ArgumentError

    if component is not None and component not in COMPONENTS:
        raise ArgumentError("component", f"{component!r} is not a component; valid: {', '.join(COMPONENTS)}")
    return Selection(
        component,
        arguments.optional_whole(slice_index, "slice_index", 0),
        arguments.optional_whole(host, "host", 0),
    )


def diagnose(cluster: Cluster, name: str) -> Diagnosis:
    """Why the job is not running (``pwdeploy diagnose``): its findings, most important first, each with its
    evidence and fix. The diagnosis is returned whatever it found: the command's ``DiagnosisError`` is for
    findings of severity error, which are ``Diagnosis.errors`` here."""
    from pwdeploy.cluster.diagnose import diagnose as explain
    from pwdeploy.kube.seam import reading_answers

    check_name(name)
    kube, namespace = given_cluster(cluster)
    with reading_answers(kube):
        return explain(kube, namespace, name)


def delete(
    cluster: Cluster,
    name: str,
    *,
    wait: bool = False,
    confirm: Callable[[str], bool] | None = None,
    progress: TextIO | None = None,
) -> None:
    """Delete a pwdeploy-managed job (its JobSet, Jobs and pods), as ``pwdeploy delete``. A JobSet that another
    tool created is refused (``ClusterError``). ``confirm`` is asked first (default: not asked; its no is a
    ``PwdeployError``, nothing deleted); with ``wait``, return only once it is gone, ``progress`` hearing which
    pods still terminate whenever that changes."""
    from pwdeploy.cluster import jobsets as js
    from pwdeploy.errors import ClusterError, PwdeployError
    from pwdeploy.kube.seam import reading_answers

    check_name(name)
    kube, namespace = given_cluster(cluster)
    with reading_answers(kube):
        if not js.is_managed(js.require_jobset(kube, namespace, name)):
            raise ClusterError(
                f"jobset {name} in namespace {namespace} is not managed by pwdeploy; not deleting it",
                hint="delete it with the tool that created it",
            )
        if confirm is not None and not confirm(f"Delete jobset {name} in namespace {namespace}? Its pods stop now."):
            raise PwdeployError("not deleted")
        js.delete_jobset(kube, namespace, name)
        if wait:
            _wait_gone(kube, namespace, name, progress)


def _wait_gone(kube: Kube, namespace: str, name: str, progress: TextIO | None) -> None:
    """Until the JobSet is gone; ``progress`` hears which pods still terminate, whenever that changes."""
    from pwdeploy.cluster import jobsets as js
    from pwdeploy.errors import ClusterError

    said: list[str] = []

    def heard(line: str) -> None:
        said.append(line)
        say_to(progress)(line)

    if not js.wait_gone(kube, namespace, name, said=heard):
        raise ClusterError(
            f"jobset {name} is still being deleted after {js.DELETE_TIMEOUT_S:.0f} s"
            + (f"; {said[-1]}" if said else ""),
            hint=f"pods on a node that does not answer stay Terminating: pwdeploy status {name} -n {namespace} "
            "shows them; look for finalizers too (kubectl get jobset,jobs,pods -o yaml)",
        )


def given_cluster(cluster: object) -> Cluster:
    """A caller's cluster: what ``cluster`` returns."""
    from pwdeploy.arguments import a_kind
    from pwdeploy.errors import ArgumentError

    if not isinstance(cluster, Cluster):
        raise ArgumentError("cluster", f"must be a Cluster, not {a_kind(cluster)}", hint="cluster = api.cluster(...)")
    return cluster


def check_namespace(namespace: str | None) -> None:
    """A namespace is a DNS-1123 label: a bad one is refused before any request is sent."""
    from pwdeploy import arguments
    from pwdeploy.errors import ArgumentError
    from pwdeploy.names import dns1123_label

    problem = None if namespace is None else dns1123_label(arguments.text(namespace, "namespace"))
    if problem is not None:
        raise ArgumentError("namespace", f"{namespace!r} is not a valid namespace: {problem}")


def check_name(name: str) -> None:
    """A job's name is its JobSet's, a DNS-1035 label: a bad one is refused before any request is sent."""
    from pwdeploy import arguments
    from pwdeploy.errors import ArgumentError
    from pwdeploy.names import dns1035_label

    problem = dns1035_label(arguments.text(name, "name"))
    if problem is not None:
        raise ArgumentError(
            "name",
            f"{name!r} is not a job name: {problem}",
            hint="the name is the config's `name`; `pwdeploy list` (api.list_jobs) shows the jobs",
        )
