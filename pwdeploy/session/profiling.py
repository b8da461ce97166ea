"""On-demand profiles of a running job, with no port open on the node: pathwaysutils' profiler server (started
by the program with ``jax.profiler.start_server(PORT)`` once pathwaysutils is initialised, bound to 127.0.0.1 of
the head node by default) is asked for a trace through the API server's port-forward to the head pod, the same
stream client as `pwdeploy connect`, and writes it to the job's ``storage.profiles``.

The request is what pathwaysutils' own client sends (pathwaysutils/profiling.py ``collect_profile`` and the
server's ``ProfilingConfig``, 0.1.13): ``POST /profiling`` with the JSON body ``{"duration_ms": <int>,
"repository_path": "gs://..."}``, and ``Authorization: Bearer <PATHWAYS_PROFILING_AUTH_TOKEN>`` when that variable
is set. The server answers once the trace is written (``{"response": "profiling completed"}``); its trace covers
one TPU host (the request has no host count: ``start_trace``'s ``max_num_hosts`` stays 1).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, NamedTuple

from pwdeploy import identifiers as ids
from pwdeploy.cluster import jobsets as js
from pwdeploy.cluster.jobsets import Object
from pwdeploy.errors import ArgumentError, ClusterError, ConfigError
from pwdeploy.session.headless import head_template

if TYPE_CHECKING:
    from pwdeploy.kube.port_stream import PortStream
    from pwdeploy.kube.seam import Kube

PROFILE_PATH = "/profiling"
TOKEN_ENV = "PATHWAYS_PROFILING_AUTH_TOKEN"  # read by pathwaysutils' server and by its client
MAX_DURATION_S = 3600.0
ANSWER_MARGIN_S = 120.0  # beyond the capture: starting and stopping the trace on the hosts, writing it to GCS
MAX_ANSWER = 64 * 1024  # bytes of the server's answer read at most
TRACE_SUBDIR = "plugins/profile"  # where jax.profiler puts each capture under the log dir (TensorBoard's layout)


class Capture(NamedTuple):
    job: str
    pod: str
    port: int
    log_dir: str  # the job's storage.profiles
    seconds: float

    @property
    def trace_dir(self) -> str:
        return f"{self.log_dir.rstrip('/')}/{TRACE_SUBDIR}/"


def profile_dir(jobset: Object) -> str:
    """The job's storage.profiles, as rendered into its program's environment (PWDEPLOY_PROFILE_DIR)."""
    name = jobset["metadata"]["name"]
    containers = {c.get("name"): c for c in head_template(jobset).get("containers") or []}
    main = containers.get(ids.MAIN_CONTAINER)
    if main is None:
        raise ConfigError(
            None,
            f"job {name} is headless: its program runs where you connect from, and so does its profiler server",
            hint="profile it there: python -m pathwaysutils.collect_profile PORT DURATION_MS --log_dir gs://...",
        )
    env = {e.get("name"): e.get("value") for e in main.get("env") or [] if isinstance(e, dict)}
    location = env.get(ids.PROFILE_DIR_ENV)
    if not isinstance(location, str) or not location.startswith("gs://"):
        raise ConfigError(
            "storage.profiles",
            f"job {name} has no profile location (it was submitted without storage.profiles)",
            hint="submit it with --profile-dir gs://BUCKET/profiles (or storage.profiles in the config)",
        )
    return location


def running_head(kube: Kube, namespace: str, name: str) -> str:
    """The head pod whose program runs now; a job that is not running is a ClusterError with its state."""
    heads = [
        p
        for p in js.list_pods(kube, namespace, name)
        if (p.get("metadata", {}).get("labels") or {}).get(ids.REPLICATED_JOB_LABEL) == ids.HEAD_JOB
        and not p.get("metadata", {}).get("deletionTimestamp")
    ]
    heads.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""))
    for pod in reversed(heads):
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        main: Object = next((s for s in statuses if s.get("name") == ids.MAIN_CONTAINER), {})
        if (pod.get("status") or {}).get("phase") == "Running" and "running" in (main.get("state") or {}):
            return str(pod["metadata"]["name"])
    raise ClusterError(
        f"job {name} has no head pod whose program runs now: nothing to profile",
        hint=f"see pwdeploy status {name} -n {namespace}",
    )


def check_request(duration_s: float, hosts: int) -> int:
    """The capture's length in milliseconds; a request the profiler server cannot carry out is an ArgumentError."""
    if not 0 < duration_s <= MAX_DURATION_S:
        raise ArgumentError("duration", f"{duration_s:g} s is not in (0, {MAX_DURATION_S:g}] seconds")
    if hosts != 1:
        raise ArgumentError(
            "hosts",
            f"{hosts}: pathwaysutils' profiler server (POST /profiling, pathwaysutils 0.1.13) takes a duration and a "
            "location only, and traces one TPU host",
            hint="to trace more hosts, trace from the program: jax.profiler.trace(dir, max_num_hosts=N) once "
            "pathwaysutils is initialised",
        )
    return max(1, round(duration_s * 1000))


def http_request(duration_ms: int, log_dir: str, token: str | None) -> bytes:
    body = json.dumps({"duration_ms": duration_ms, "repository_path": log_dir}).encode()
    headers = [
        f"POST {PROFILE_PATH} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *([f"Authorization: Bearer {token}"] if token else []),
    ]
    return ("\r\n".join(headers) + "\r\n\r\n").encode() + body


class Plan(NamedTuple):
    """A trace request checked against the job before anything is traced: what ``run`` sends, and to which pod."""

    job: str
    namespace: str
    pod: str
    port: int
    log_dir: str
    duration_ms: int


def plan(kube: Kube, namespace: str, name: str, *, duration_s: float, port: int, hosts: int = 1) -> Plan:
    """Check the request (``duration_s``, ``hosts``), that the job has a place for profiles and is not headless,
    and find its running head pod: everything that can refuse, before the user is told that tracing begins."""
    duration_ms = check_request(duration_s, hosts)
    log_dir = profile_dir(js.require_jobset(kube, namespace, name))
    return Plan(name, namespace, running_head(kube, namespace, name), port, log_dir, duration_ms)


def run(kube: Kube, planned: Plan) -> Capture:
    """Ask the profiler server for the planned trace; returns once the server says, in a whole answer, that it
    is written."""
    from pwdeploy.kube.port_stream import open_port_stream

    name, pod, port = planned.job, planned.pod, planned.port
    stream = open_port_stream(kube, planned.namespace, pod, port)
    try:
        stream.frames.sock.settimeout(planned.duration_ms / 1000 + ANSWER_MARGIN_S)  # this stream only
        stream.send(http_request(planned.duration_ms, planned.log_dir, os.environ.get(TOKEN_ENV) or None))
        status, body = read_answer(stream, f"pod/{pod}:{port}", name)
    finally:
        stream.close()
    _check_answer(status, body, port)
    return Capture(name, pod, port, planned.log_dir, planned.duration_ms / 1000)


def capture(kube: Kube, namespace: str, name: str, *, duration_s: float, port: int, hosts: int = 1) -> Capture:
    """``plan`` then ``run``: a trace of ``duration_s`` seconds into the job's storage.profiles."""
    return run(kube, plan(kube, namespace, name, duration_s=duration_s, port=port, hosts=hosts))


def read_answer(stream: PortStream, target: str, job: str) -> tuple[int, str]:
    """(HTTP status, body) of the server's answer, at most MAX_ANSWER bytes of it."""
    from pwdeploy.kube.port_stream import StreamBroken

    data = b""
    try:
        while len(data) < MAX_ANSWER and not _complete(data):
            chunk = stream.recv()
            if not chunk:
                break
            data += chunk
    except StreamBroken as exc:
        if data or "timed out" in str(exc):  # the server took the request and then went quiet, or away
            raise ClusterError(
                f"the profiler server on {target} stopped answering ({exc}) before the trace was written",
                hint=f"read the program's log: pwdeploy logs {job} --component main",
            ) from None
        raise ClusterError(
            f"no answer from a profiler server on {target}: {exc}",
            hint=f"the program must start it: jax.profiler.start_server({target.rsplit(':', 1)[1]}) after "
            "pathwaysutils.initialize() (another port: --port N)",
        ) from None
    head, sep, body = data.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ClusterError(f"{target} did not answer as an HTTP server: {_excerpt(data)}")
    short = _cut_short(head, body) if sep else "its headers"
    if short is not None:  # a 200 that broke off says nothing about the trace: the server may have failed after it
        raise ClusterError(
            f"the profiler server on {target} answered HTTP {parts[1]}, but the answer broke off ({short}): the "
            "trace may not be written",
            hint=f"look under storage.profiles, and read the program's log: pwdeploy logs {job} --component main",
        )
    return int(parts[1]), body[:MAX_ANSWER].decode("utf-8", "replace")


def _cut_short(head: bytes, body: bytes) -> str | None:
    """What is missing from an answer that ended (None when it is whole): by Content-Length, or the last chunk of
    a chunked one. An answer with neither ends with the connection, as HTTP/1.1 lets it."""
    fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in head.split(b"\r\n")[1:])}
    length = fields.get(b"content-length", b"")
    if length.isdigit() and len(body) < int(length):
        return f"{len(body)} of {int(length)} bytes"
    if b"chunked" in fields.get(b"transfer-encoding", b"").lower() and not body.endswith(b"0\r\n\r\n"):
        return "no last chunk"
    return None


def _complete(data: bytes) -> bool:
    """Whether ``data`` holds a whole answer with a Content-Length (a server that keeps the stream open)."""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == b"content-length" and value.strip().isdigit():
            return len(body) >= int(value.strip())
    return False


def _check_answer(status: int, body: str, port: int) -> None:
    if status == 200:
        return
    if status == 401:
        raise ClusterError(
            f"the profiler server on port {port} wants a token (HTTP 401)",
            hint=f"set {TOKEN_ENV} here to the job's value and run again",
        )
    if status in (404, 405):
        raise ClusterError(
            f"port {port} of the head pod answers HTTP {status} to POST {PROFILE_PATH}: not pathwaysutils' "
            "profiler server (jax's own profiler server speaks gRPC)",
            hint="call jax.profiler.start_server(PORT) after pathwaysutils.initialize(), which replaces it",
        )
    raise ClusterError(f"the profiler server on port {port} answered HTTP {status}: {_excerpt(body.encode())}")


def _excerpt(data: bytes, limit: int = 300) -> str:
    text = "".join(ch if ch.isprintable() else " " for ch in data.decode("utf-8", "replace"))
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")
