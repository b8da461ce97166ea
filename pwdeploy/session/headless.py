"""A headless job as an interactive session: its head pod, the IFRT proxy's port (read from the rendered head
template), waiting until the proxy serves, and whether the local jax matches the job's Pathways version."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from pwdeploy import identifiers as ids
from pwdeploy.cluster import jobsets as js
from pwdeploy.cluster.jobsets import Object
from pwdeploy.cluster.progress import job_state, progress, progress_line
from pwdeploy.cluster.ready_slices import SlicesReady, read_slices, rm_running, worker_slices
from pwdeploy.errors import ClusterError, ConfigError
from pwdeploy.kube.seam import POD_LOGS, Action, ApiError, Kube

if TYPE_CHECKING:
    from pwdeploy.kube.port_stream import PortStream

# The proxy's log line once it serves: "pathways-proxy is ready to serve new connection requests when the following
# log is written" (https://docs.cloud.google.com/ai-hypercomputer/docs/workloads/pathways-on-cloud/
# troubleshooting-pathways, "Health monitoring"; proxy_server.cc), and AI-Hypercomputer/xpk
# src/xpk/commands/workload.py tells headless users to wait for the same line.
READY_LINE = "IFRT proxy server started with status OK"
LOG_SCAN_BYTES = 1 << 20  # the start line is among the proxy's first lines; read no more than this of its log
POLL_S = 2.0


class Head(NamedTuple):
    pod: str
    port: int  # the proxy's port in the pod


def head_template(jobset: Object) -> Object:
    for rj in jobset.get("spec", {}).get("replicatedJobs") or []:
        if rj.get("name") == ids.HEAD_JOB:
            spec: Object = rj.get("template", {}).get("spec", {}).get("template", {}).get("spec", {})
            return spec
    raise ClusterError(f"jobset {jobset['metadata']['name']} has no {ids.HEAD_JOB} replicatedJob: not a Pathways job")


def proxy_port(jobset: Object) -> int:
    """The proxy's container port in a headless job; a job whose program runs in the cluster is a ConfigError."""
    name = jobset["metadata"]["name"]
    spec = head_template(jobset)
    containers = {c.get("name"): c for c in spec.get("containers") or []}
    if ids.MAIN_CONTAINER in containers or ids.PROXY_CONTAINER not in containers:
        raise ConfigError(
            None,
            f"job {name} is not headless: its program runs in the cluster, next to the proxy",
            hint=f"connect is for jobs submitted with --headless; follow this one with pwdeploy logs {name} -f",
        )
    ports = containers[ids.PROXY_CONTAINER].get("ports") or []
    if not ports or not isinstance(ports[0].get("containerPort"), int):
        raise ClusterError(f"the {ids.PROXY_CONTAINER} container of job {name} declares no port")
    return int(ports[0]["containerPort"])


def client_env(jobset: Object) -> dict[str, str]:
    """What the job's proxy asks of a client beyond its address: plain gRPC when the proxy runs with it
    (head.insecure_grpc puts the variable in its env), since a client on ALTS cannot connect to it."""
    containers = {c.get("name"): c for c in head_template(jobset).get("containers") or []}
    env = (containers.get(ids.PROXY_CONTAINER) or {}).get("env") or []
    return {e["name"]: str(e["value"]) for e in env if e.get("name") == ids.INSECURE_GRPC_ENV and "value" in e}


def version_warning(jobset: Object, local_jax: str | None) -> str | None:
    """What differs between the local jax and the job's Pathways version (the IFRT proxy client and server must
    agree), with the fix; None when they match or the job recorded none."""
    server = (jobset.get("metadata", {}).get("annotations") or {}).get(ids.PATHWAYS_VERSION_ANNOTATION)
    if not server or server == local_jax:
        return None
    here = f"the local jax is {local_jax}" if local_jax else "jax is not installed here"
    return f"{here}, the job runs Pathways for jax {server}; fix: pip install jax=={server}"


def ended_error(kube: Kube, namespace: str, name: str, what: str) -> ClusterError:
    """A ClusterError saying ``what`` happened, followed by what `pwdeploy status` shows."""
    from pwdeploy.cluster.diagnose import findings_from
    from pwdeploy.cluster.status import read_status, status_lines

    lines = status_lines(read_status(kube, namespace, name, explain=findings_from))
    return ClusterError(
        "\n".join([what, *lines]),
        hint=f"pwdeploy logs {name} -n {namespace} --component proxy; remove it: pwdeploy delete {name} -n {namespace}",
    )


class ProxyWatch:
    """Polls a headless job until its proxy serves: the head pod Running, the proxy container started and its
    log showing READY_LINE (or, where this identity may not read logs, the container started alone)."""

    def __init__(self, kube: Kube, namespace: str, name: str, *, notify: Callable[[str], None]) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self.notify = notify
        self.logs_forbidden = False
        self.slices: SlicesReady | None = None  # the resource manager's count at the last poll

    def wait(
        self, port: int, *, timeout: float | None, on_progress: Callable[[str], None], poll: float = POLL_S
    ) -> Head:
        clock = self.kube.clock
        deadline = clock.now() + timeout if timeout is not None else None
        while True:
            head, waiting_for = self.poll(on_progress)
            if head is not None:
                if self.slices is not None and self.slices.ready < self.slices.total:
                    self.notify(
                        f"the proxy serves; {self.slices.text}: a client may connect now, its computations wait "
                        "for the other slices"
                    )
                return Head(head, port)
            if deadline is not None and clock.now() >= deadline:
                raise ClusterError(
                    f"the IFRT proxy of job {self.name} is not ready after {timeout:.0f} s ({waiting_for})",
                    hint=f"see pwdeploy status {self.name} -n {self.namespace}; wait longer with `timeout`",
                )
            clock.sleep(poll)

    def poll(self, on_progress: Callable[[str], None]) -> tuple[str | None, str]:
        """(the head pod's name once the proxy serves, else None; what it is waiting for)."""
        jobset = js.get_jobset(self.kube, self.namespace, self.name)
        if jobset is None:
            raise ClusterError(f"jobset {self.name} disappeared from namespace {self.namespace} (deleted?)")
        state = job_state(jobset)
        if state.phase in ("Completed", "Failed", "Deleting"):
            raise ended_error(self.kube, self.namespace, self.name, f"job {self.name} has ended ({state.phase})")
        pods = js.list_pods(self.kube, self.namespace, self.name)
        head = _newest_head(pods)
        waiting_for = "the head pod to be created" if head is None else self._head_state(head)
        self.slices = self._slices(jobset, head)
        rm = f"; {self.slices.text}" if self.slices is not None else ""
        on_progress(f"{progress_line(state, progress(jobset, pods))}; proxy: {waiting_for}{rm}")
        return (head["metadata"]["name"] if head is not None and waiting_for == "ready" else None), waiting_for

    def _slices(self, jobset: Object, head: Object | None) -> SlicesReady | None:
        """The resource manager's count of ready slices, once it runs (its log, as the proxy's)."""
        if head is None or self.logs_forbidden or not rm_running(head):
            return None
        try:
            return read_slices(self.kube, self.namespace, head["metadata"]["name"], worker_slices(jobset))
        except ApiError:  # the count is progress: the wait goes on without it
            return None

    def _head_state(self, pod: Object) -> str:
        name = pod["metadata"]["name"]
        phase = (pod.get("status") or {}).get("phase", "Pending")
        proxy = _container_status(pod, ids.PROXY_CONTAINER)
        terminated = (proxy.get("state") or {}).get("terminated")
        if phase in ("Failed", "Succeeded") or terminated:
            why = (
                f"its proxy exited with code {terminated.get('exitCode')} ({terminated.get('reason') or 'no reason'})"
                if terminated
                else f"phase {phase}"
            )
            raise ended_error(self.kube, self.namespace, self.name, f"head pod {name} stopped: {why}")
        if phase != "Running" or not (proxy.get("started") or (proxy.get("state") or {}).get("running")):
            return f"the head pod to run ({phase})"
        if self.logs_forbidden:
            return "ready"
        return "ready" if self._log_says_ready(name) else "its start line in the log"

    def _log_says_ready(self, pod: str) -> bool:
        query = [("container", ids.PROXY_CONTAINER), ("limitBytes", str(LOG_SCAN_BYTES))]
        lines = self.kube.stream_lines(
            Action("get", POD_LOGS, self.namespace, pod), POD_LOGS.path(self.namespace, pod), query
        )
        read = 0
        try:
            for line in lines:
                if READY_LINE in line:
                    return True
                read += len(line) + 1
        except ApiError as exc:
            if exc.status == 403:
                self.logs_forbidden = True
                self.notify(
                    f"cannot read the proxy's log ({exc.message}); taking its started container as ready "
                    "(the first connection may wait a few seconds more)"
                )
                return True
            if exc.status == 400:  # the container is not yet readable (waiting to start)
                return False
            raise
        finally:
            getattr(lines, "close", lambda: None)()
        # A log longer than the scan without the line: the start line rotated out of a long-running proxy's log.
        return read >= LOG_SCAN_BYTES


# A JAX client keeps its whole session with the IFRT proxy in one bidirectional gRPC stream (xla/python/ifrt_proxy/
# client/grpc_client_session.cc): once the connection under it ends, every call fails with "GrpcClientSession:
# writes no longer allowed" and nothing resumes it on a new connection; the proxy serves one client session at a
# time, and after an unexpected disconnection it may keep the old one, refusing the next client with "CANCELLED"
# (Google's "Troubleshoot Pathways on Cloud" page, "Internal error from proxy server" and "There is an existing
# connection to the Pathways cluster").
STREAM_BROKE = "the stream broke off"  # how the forwarder reports a connection it lost (pwdeploy.kube.portforward)
SESSION_LOST = (
    "the JAX session on that connection is lost: an IFRT proxy session does not resume on a new connection, its "
    "calls fail with `writes no longer allowed`; restart the client (a notebook: restart its kernel). If the new "
    "session fails with `CANCELLED`, the proxy still holds the old one: restart the head (pwdeploy delete {job} "
    "-n {namespace}, then submit it again; with scheduling.max_restarts > 0, kubectl delete pod {pod} -n "
    "{namespace} restarts the job and connect follows its new head)"
)


def session_notes(
    notify: Callable[[str], None], namespace: str, name: str, head_pod: Callable[[], str]
) -> Callable[[str], None]:
    """``notify`` for the forwarder of a connect session: after each lost connection, what it cost and what to
    do (in full the first time, in short after); ``head_pod``: the head pod the streams go to now."""
    told = False

    def note(line: str) -> None:
        nonlocal told
        notify(line)
        if STREAM_BROKE in line:
            notify(
                "the JAX session on that connection is lost: restart the client"
                if told
                else SESSION_LOST.format(job=name, namespace=namespace, pod=head_pod())
            )
            told = True

    return note


class HeadStreams:
    """Streams to the proxy of a job's head pod that follow the head across restarts: when the pod is gone (the
    JobSet recreated the job's pods after a failure), the job's new head pod is looked up and, once its proxy
    serves, used from then on. Until then a stream is refused as the API refuses one while it is busy (503), so the
    forwarder retries with backoff; a job that ended refuses every later stream (410)."""

    def __init__(self, kube: Kube, namespace: str, name: str, head: Head, *, notify: Callable[[str], None]) -> None:
        self.kube, self.namespace, self.name = kube, namespace, name
        self.head = head
        self.notify = notify
        self._lock = threading.Lock()

    def open(self) -> PortStream:
        from pwdeploy.kube.port_stream import open_port_stream

        head = self.head
        try:
            return open_port_stream(self.kube, self.namespace, head.pod, head.port)
        except ApiError as exc:
            if exc.status != 404 or exc.missing != "object":
                raise
        head = self._follow(head)
        return open_port_stream(self.kube, self.namespace, head.pod, head.port)

    def _follow(self, gone: Head) -> Head:
        with self._lock:
            if self.head != gone:  # another connection found the new head already
                return self.head
            try:
                pod, waiting_for = ProxyWatch(self.kube, self.namespace, self.name, notify=self.notify).poll(
                    lambda _: None
                )
            except ApiError:
                raise
            except ClusterError as exc:  # the job ended, or was deleted
                raise ApiError(f"pod {gone.pod} is gone and {exc}", status=410) from None
            if pod is None:
                raise ApiError(
                    f"pod {gone.pod} is gone (the job restarted?); its new head pod's proxy is not serving yet: "
                    f"waiting for {waiting_for}",
                    status=503,
                )
            self.notify(f"head pod {gone.pod} is gone (the job restarted); forwarding to pod/{pod} from now on")
            self.head = Head(pod, gone.port)
            return self.head


def _newest_head(pods: list[Object]) -> Object | None:
    heads = [
        p
        for p in pods
        if (p.get("metadata", {}).get("labels") or {}).get(ids.REPLICATED_JOB_LABEL) == ids.HEAD_JOB
        and not p.get("metadata", {}).get("deletionTimestamp")
    ]
    heads.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""))
    return heads[-1] if heads else None


def _container_status(pod: Object, container: str) -> Object:
    status = pod.get("status") or {}
    for s in [*(status.get("containerStatuses") or []), *(status.get("initContainerStatuses") or [])]:
        if s.get("name") == container:
            return dict(s)
    return {}
