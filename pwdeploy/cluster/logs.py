"""Which pod and container hold a component's logs, and reading them (optionally following, or, for `status` and
`diagnose`, the end of one in one bounded try: ``log_tail``)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

from pwdeploy import identifiers as ids
from pwdeploy.cluster import jobsets as js
from pwdeploy.errors import ClusterError
from pwdeploy.kube.api_errors import KubeletError, NoAnswerInTime
from pwdeploy.kube.seam import POD_LOGS, Action, ApiError, Kube
from pwdeploy.text import evidence

LINE_CHARS = 2000  # of one line of a log tail: a line without newlines is not kept whole

# component -> (replicatedJob, container)
COMPONENTS = {
    "main": (ids.HEAD_JOB, ids.MAIN_CONTAINER),
    "proxy": (ids.HEAD_JOB, ids.PROXY_CONTAINER),
    "rm": (ids.HEAD_JOB, ids.RM_CONTAINER),
    "worker": (ids.WORKER_JOB, ids.WORKER_CONTAINER),
    "sidecar": (ids.WORKER_JOB, ids.SIDECAR_CONTAINER),
}


def find_pod(kube: Kube, namespace: str, name: str, component: str, slice_index: int, host: int) -> str:
    """The name of the pod running ``component`` (for workers: of that slice and host), newest first."""
    replicated_job, container = COMPONENTS[component]
    labels = {ids.REPLICATED_JOB_LABEL: replicated_job}
    if replicated_job == ids.WORKER_JOB:
        labels |= {ids.JOB_INDEX_LABEL: str(slice_index), ids.COMPLETION_INDEX_LABEL: str(host)}
    pods = js.list_pods(kube, namespace, name, **labels)
    where = f"slice {slice_index} host {host} of " if replicated_job == ids.WORKER_JOB else ""
    if not pods:
        jobset = js.get_jobset(kube, namespace, name)
        if jobset is None:
            raise ClusterError(f"jobset {name} not found in namespace {namespace}", hint="list jobs: pwdeploy list")
        if replicated_job == ids.WORKER_JOB:
            check_worker_exists(jobset, slice_index, host)
        raise ClusterError(
            f"no {replicated_job} pod yet for {where}job {name}",
            hint=f"it may still be scheduling: pwdeploy status {name} -n {namespace}",
        )
    pods.sort(key=lambda p: (not p["metadata"].get("deletionTimestamp"), p["metadata"].get("creationTimestamp", "")))
    pod = pods[-1]
    spec = pod.get("spec") or {}
    names = [c.get("name") for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]]
    if container not in names:
        if component == "main":
            raise ClusterError(
                f"job {name} runs headless: it has no main container",
                hint="read the IFRT proxy's logs with --component proxy",
            )
        raise ClusterError(
            f"pod {pod['metadata']['name']} has no {container} container (containers: "
            f"{', '.join(str(n) for n in names)})"
        )
    return str(pod["metadata"]["name"])


def log_bytes(
    kube: Kube, namespace: str, pod: str, container: str, *, follow: bool, tail: int | None, previous: bool
) -> Iterator[bytes]:
    """The container's log as the API server sends it, byte for byte (as ``kubectl logs`` prints it: the program's
    own output, invalid UTF-8 and all, with no line held back or rewritten)."""
    query = [("container", container)]
    if follow:
        query.append(("follow", "true"))
    if tail is not None:
        query.append(("tailLines", str(tail)))
    if previous:
        query.append(("previous", "true"))
    action = Action("get", POD_LOGS, namespace, pod)
    return kube.stream_bytes(action, POD_LOGS.path(namespace, pod), query)


def check_worker_exists(jobset: js.Object, slice_index: int, host: int) -> None:
    """A slice or host the job does not have is an ArgumentError that says how many there are (not "scheduling")."""
    from pwdeploy.errors import ArgumentError

    workers = next((rj for rj in js.replicated_jobs(jobset) if rj.name == ids.WORKER_JOB), None)
    slices, hosts = (workers.replicas, workers.pods_per_job) if workers is not None else (0, 0)
    name = js.name_of(jobset)
    if slice_index >= slices:
        raise ArgumentError(
            "slice_index", f"job {name} has no slice {slice_index}: it has {slices} (slices 0 to {slices - 1})"
        )
    if host >= hosts:
        raise ArgumentError(
            "host", f"slice {slice_index} of job {name} has no host {host}: it has {hosts} (hosts 0 to {hosts - 1})"
        )


def rfc3339(at: datetime) -> str:
    """``at`` as the API server's ``sinceTime`` takes it (whole seconds, UTC: it drops any fraction)."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def split_stamp(line: str) -> tuple[str, str]:
    """``(timestamp, text)`` of a line read with ``timestamps=true`` (the kubelet's RFC 3339 with nanoseconds and a
    space before the text); ``("", line)`` for a line without one."""
    stamp, sep, text = line.partition(" ")
    if sep and len(stamp) >= 20 and stamp[4:5] == "-" and stamp[10:11] == "T":
        return stamp, text
    return "", line


def stamp_key(stamp: str) -> str:
    """A log timestamp that sorts as text: the fraction padded to nanoseconds (RFC 3339 allows any number of
    digits, and Go's RFC3339Nano drops trailing zeros, so ``...:05Z`` would sort after ``...:05.5Z``)."""
    if not stamp.endswith("Z") or len(stamp) < 20:
        return stamp
    whole, _, fraction = stamp[:-1].partition(".")
    return f"{whole}.{fraction[:9].ljust(9, '0')}Z"


def read_lines(
    kube: Kube,
    namespace: str,
    pod: str,
    container: str,
    *,
    tail: int | None = None,
    since: datetime | None = None,
    limit_bytes: int = 4 * 2**20,
) -> list[tuple[str, str]]:
    """The container's log now (not followed) as ``(timestamp, text)`` lines, at most ``limit_bytes`` of it
    (``limitBytes``: an answer is untrusted input); ``[]`` when the pod or container is gone or not started."""
    query = [("container", container), ("timestamps", "true"), ("limitBytes", str(limit_bytes))]
    if tail is not None:
        query.append(("tailLines", str(tail)))
    if since is not None:
        query.append(("sinceTime", rfc3339(since)))
    try:
        lines = kube.stream_lines(Action("get", POD_LOGS, namespace, pod), POD_LOGS.path(namespace, pod), query)
        return [split_stamp(line) for line in lines]
    except ApiError as exc:
        if exc.status in (400, 404):  # gone, or a container that has not started (ContainerCreating)
            return []
        raise


def log_tail(
    kube: Kube,
    namespace: str,
    pod: str,
    container: str,
    *,
    lines: int,
    max_bytes: int,
    within: float,
    previous: bool = False,
) -> list[str]:
    """The last ``lines`` lines of the container's log (``tailLines``, ``limitBytes``), in one try of at most
    ``within`` seconds (``Kube.read_once``): a log worth a glance never holds up the command. An ``ApiError``
    when it cannot be read (``unread_reason`` says why in a few words)."""
    query = [("container", container), ("tailLines", str(lines)), ("limitBytes", str(max_bytes))]
    query += [("previous", "true")] if previous else []
    action = Action("get", POD_LOGS, namespace, pod)
    body = kube.read_once(action, POD_LOGS.path(namespace, pod), query, within=within, max_bytes=max_bytes)
    text = body.decode("utf-8", "replace").splitlines()
    return [line[:LINE_CHARS] for line in text[-lines:]]  # a server that ignores tailLines


def unread_reason(error: ApiError, node: str = "") -> str:
    """Why a log could not be read, in a few words that name the component at fault: the node's kubelet (down,
    unreachable, not answering), the API server's authorization, or the API server itself. ``node``: the pod's,
    for when the error does not name one."""
    on = f" on node {node}" if node else ""
    if isinstance(error, KubeletError):
        said = error.message.rsplit('": ', 1)[-1]  # the kubelet dial's own words, after the URL the API server quotes
        at = f" on node {error.node}" if error.node else on
        return f"the kubelet{at} did not serve it ({error.status}: {evidence(said, 160)}); the API server is fine"
    if isinstance(error, NoAnswerInTime):
        if error.component == "kubelet":
            return (
                f"no answer within {error.within:g} s from the kubelet{on} (the API server passes log reads to it and "
                "answered this command's other requests)"
            )
        return f"the API server did not answer within {error.within:g} s"
    if error.status == 403:
        check = (error.hint or "").partition("check with: ")[2]  # rbac_hint's kubectl auth can-i line
        return "the API server's authorization (RBAC) refuses this identity `get pods/log`" + (
            f" (check: {check})" if check else ""
        )
    return f"the API server: {evidence(error.message, 200)}"
