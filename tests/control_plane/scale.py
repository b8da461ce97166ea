"""A job of N slices of v5p-32 (4 VMs of 4 chips a slice: 4 worker pods, and the head) on the control plane's KWOK
nodes, and what commands cost on it as the API server counts them: the scale test (tests/test_control_plane_scale.py)
and the scale benchmark (benchmarks/bench_scale.py) share these.

Requests are counted from the API server's audit log (the control plane records every request of the
namespace-scoped user alice, with its User-Agent), so pwdeploy's and kubectl's are counted alike, on the server's
side; each request is one audit ID (a watch or a log stream is one request, however long it lasts). A command's
CPU time and peak memory are its process's own (``os.wait4``), its first line the time from its start to the first
line it printed.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import IO

from tests.control_plane.cluster import ControlPlane, NodePool, TpuPool
from tests.control_plane.commands import HEAD_POOL, PWDEPLOY

V5P_2X2X4 = TpuPool("tpu-v5p-slice", "2x2x4", 4)  # one VM of a v5p-32 slice: 4 chips
HOSTS = 4  # VMs (worker pods) of a v5p-32 slice


def pools(slices: int) -> list[NodePool]:
    """The head's CPU pool and a TPU node pool of 4 nodes per slice: a multi-host slice is a node pool of its own
    on GKE, and JobSet places each slice's pods in one (its exclusive topology is the node pool)."""
    return [HEAD_POOL] + [NodePool(f"tpu-v5p-32-{i}", nodes=HOSTS, tpu=V5P_2X2X4) for i in range(slices)]


def stand_up(plane: ControlPlane, node_pools: Sequence[NodePool], timeout: float = 1200) -> float:
    """Create every node of ``node_pools`` (8 at a time) and wait until all are Ready; the seconds it took. One
    node after another, each waited for, takes about a second a node on a busy machine (1,025 nodes: 19 minutes)."""
    from concurrent.futures import ThreadPoolExecutor

    began = time.monotonic()
    nodes = [node for pool in node_pools for node in pool.manifests()]
    with ThreadPoolExecutor(8) as workers:
        list(workers.map(lambda node: plane.api.request("POST", "/api/v1/nodes", node), nodes))
    wanted = {str(node["metadata"]["name"]) for node in nodes}
    while wanted - _ready_nodes(plane):
        if time.monotonic() - began > timeout:
            raise TimeoutError(f"{len(wanted - _ready_nodes(plane))} nodes not Ready after {timeout:.0f} s")
        time.sleep(1.0)
    return time.monotonic() - began


def take_down(plane: ControlPlane, node_pools: Sequence[NodePool]) -> None:
    """Delete every node of ``node_pools`` (8 at a time)."""
    from concurrent.futures import ThreadPoolExecutor

    names = [str(node["metadata"]["name"]) for pool in node_pools for node in pool.manifests()]
    with ThreadPoolExecutor(8) as workers:
        list(workers.map(lambda name: plane.api.delete({"kind": "Node", "metadata": {"name": name}}), names))


def _ready_nodes(plane: ControlPlane) -> set[str]:
    ready = set()
    for node in plane.api.get("/api/v1/nodes")["items"]:
        conditions = (node.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            ready.add(str(node["metadata"]["name"]))
    return ready


def job_flags(name: str, namespace: str, slices: int) -> list[str]:
    return [
        "--name", name, "--namespace", namespace, "--tpu-type", "v5p-32", "--num-slices", str(slices),
        "--image", "python:3.11.9-slim", "--command", "python3 train.py", "--gcs-scratch", "gs://pwdeploy-e2e/scratch",
        "--max-restarts", "3",  # a lost slice restarts the job (a drill's)
    ]  # fmt: skip


def serve_logs(plane: ControlPlane, namespace: str, lines: Sequence[str]) -> None:
    """Every container of every pod in ``namespace`` serves ``lines`` (KWOK's ClusterLogs, one object for all)."""
    path = plane.folder / f"pod-logs/{namespace}.all-pods.log"
    path.parent.mkdir(exist_ok=True)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime())
    path.write_text("".join(f"{stamp} stdout F {line}\n" for line in lines))
    plane.api.apply(
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "ClusterLogs",
            "metadata": {"name": f"all-pods-{namespace}"},
            "spec": {"selector": {"matchNamespaces": [namespace]}, "logs": [{"logsFile": str(path)}]},
        }
    )


@dataclass(frozen=True)
class Request:
    """One request as the API server's audit log has it."""

    verb: str  # get, list, watch, create, patch, delete
    resource: str  # pods, jobs, events, jobsets, ... (pods/log for a log)
    uri: str

    @property
    def page(self) -> str:
        """``first`` for a list's first answer, ``next`` for one that continues it (``continue=``), else ``""``."""
        if self.verb != "list":
            return ""
        return "next" if "continue=" in self.uri else "first"


@dataclass
class Run:
    """One command as it ran: exit status, output, wall and CPU seconds, peak memory, first line, requests."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    wall: float
    cpu: float
    max_rss_mib: float
    first_line: float | None  # seconds from the start to the first line on stdout
    calls: list[Request]  # each request, as the API server saw it

    @property
    def requests(self) -> Counter[str]:
        """The requests by verb (get, list, watch, create, patch, delete)."""
        return Counter(call.verb for call in self.calls)

    def counted(self) -> Counter[tuple[str, str, str]]:
        """The requests by verb, resource and, for a list, page (first, next)."""
        return Counter((call.verb, call.resource, call.page) for call in self.calls)

    @property
    def sent(self) -> int:
        return len(self.calls)


class Audit:
    """The audit log's requests of the namespace-scoped user while a command ran."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def mark(self) -> int:
        return len(self.plane.audit_lines())

    def settled(self, settle: float, timeout: float = 30.0) -> None:
        """Until the log has had no new line for ``settle`` seconds: a request's line is written once it has been
        answered, which on a busy machine may come after its client ended. ``settle`` 0: not waited for (users at
        once, whose requests never stop while one of them ends)."""
        deadline, lines = time.monotonic() + timeout, self.mark()
        while settle > 0 and time.monotonic() < deadline:
            time.sleep(settle)
            if (now := self.mark()) == lines:
                return
            lines = now

    def since(self, mark: int, agent: str, received: float) -> list[Request]:
        """Requests whose User-Agent starts with ``agent`` (``pwdeploy/``, ``kubectl/``) received at or after
        ``received`` (seconds since the epoch), in the lines after ``mark``. A line of an earlier command's request
        may come after ``mark`` (written when it ended: a watch cut by its client's exit, an answer late on a busy
        machine), so the time the server received each is what tells whose it is."""
        calls: dict[str, Request] = {}
        for line in self.plane.audit_lines()[mark:]:
            event = json.loads(line)
            at = datetime.fromisoformat(str(event["requestReceivedTimestamp"]).replace("Z", "+00:00")).timestamp()
            if str(event.get("userAgent", "")).startswith(agent) and at >= received:
                ref = event.get("objectRef") or {}
                kind = "/".join(filter(None, (ref.get("resource"), ref.get("subresource"))))
                calls[str(event["auditID"])] = Request(str(event.get("verb")), kind, str(event["requestURI"]))
        return list(calls.values())


def run(
    plane: ControlPlane,
    argv: Sequence[str],
    *,
    agent: str = "pwdeploy/",
    user: bool = True,
    timeout: float = 600,
    settle: float = 1.0,
    interrupt_after: float | None = None,
) -> Run:
    """``argv`` (``pwdeploy ...`` or ``kubectl ...``) as the namespace-scoped user (``user=False``: the admin, whose
    requests the audit log does not record), measured; ``settle``: the quiet time that says the audit log is
    written; ``interrupt_after``: Ctrl-C (SIGINT) that many seconds after the first line (a follow that would not
    end). A command that outlives ``timeout`` is killed, and its pipes closed, whatever stops the measurement."""
    audit = Audit(plane)
    mark, received = audit.mark(), time.time()
    command = [str(PWDEPLOY) if argv[0] == "pwdeploy" else argv[0], *argv[1:]]
    started = time.monotonic()
    with subprocess.Popen(
        command, env=plane.env(user=user), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            out, err, first, usage = _measure(process, started, timeout, interrupt_after)
        finally:
            if process.returncode is None:  # the measurement failed: the command ends here, not after the test
                process.kill()
    wall = time.monotonic() - started
    audit.settled(settle)
    cpu = usage.ru_utime + usage.ru_stime
    return Run(list(argv), process.returncode, out, err, wall, cpu, usage.ru_maxrss / 1024, first,
               audit.since(mark, agent, received))  # fmt: skip


def _measure(
    process: subprocess.Popen[str], started: float, timeout: float, interrupt_after: float | None
) -> tuple[str, str, float | None, resource.struct_rusage]:
    """Its output, first line and resource use, once it has ended (waited for here, for its rusage)."""
    assert process.stdout is not None and process.stderr is not None
    stderr = process.stderr
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.append(stderr.read()), daemon=True)
    reader.start()
    first: list[float] = []
    done = threading.Event()
    if interrupt_after is not None:
        threading.Thread(target=_interrupt, args=(process.pid, first, done, interrupt_after), daemon=True).start()
    try:
        out = _read_lines(process.stdout, first, started, timeout)
        reader.join(timeout)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    finally:
        done.set()
    return out, "".join(errors), first[0] if first else None, usage


def _interrupt(pid: int, first: list[float], done: threading.Event, after: float) -> None:
    """Ctrl-C ``after`` seconds after the first line, unless the process ended (and was waited for) before."""
    while not first and not done.wait(0.05):
        pass
    if not done.wait(after):
        os.kill(pid, signal.SIGINT)


def _read_lines(stream: IO[str], first: list[float], started: float, timeout: float) -> str:
    lines = []
    for line in stream:
        if not first:
            first.append(time.monotonic() - started)
        lines.append(line)
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"still printing after {timeout:.0f} s")
    return "".join(lines)
