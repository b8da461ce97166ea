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
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
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
    requests: Counter[str]  # by verb (get, list, watch, create, patch, delete) as the API server saw them

    @property
    def sent(self) -> int:
        return sum(self.requests.values())


class Audit:
    """The audit log's requests of the namespace-scoped user, between two points of a test."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane

    def mark(self) -> int:
        return len(self.plane.audit_lines())

    def since(self, mark: int, agent: str) -> Counter[str]:
        """Requests whose User-Agent starts with ``agent`` (``pwdeploy/``, ``kubectl/``) after ``mark``, by verb."""
        verbs: dict[str, str] = {}
        for line in self.plane.audit_lines()[mark:]:
            event = json.loads(line)
            if str(event.get("userAgent", "")).startswith(agent):
                verbs[str(event["auditID"])] = str(event.get("verb"))
        return Counter(verbs.values())


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
    requests the audit log does not record), measured; ``settle``: seconds for the audit log to be written;
    ``interrupt_after``: Ctrl-C (SIGINT) that many seconds after the first line (a follow that would not end)."""
    audit = Audit(plane)
    mark = audit.mark()
    command = [str(PWDEPLOY) if argv[0] == "pwdeploy" else argv[0], *argv[1:]]
    started = time.monotonic()
    process = subprocess.Popen(
        command, env=plane.env(user=user), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stderr is not None
    errors: list[str] = []
    reader = threading.Thread(target=lambda: errors.append(process.stderr.read()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    first: list[float] = []
    done = threading.Event()
    if interrupt_after is not None:
        threading.Thread(target=_interrupt, args=(process.pid, first, done, interrupt_after), daemon=True).start()
    out = _read_lines(process.stdout, first, started, timeout)
    reader.join(timeout)
    err = "".join(errors)
    _, status, usage = os.wait4(process.pid, 0)
    done.set()
    process.stdout.close()
    process.stderr.close()
    process.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    time.sleep(settle)
    return Run(
        list(argv),
        process.returncode,
        out,
        err,
        wall,
        usage.ru_utime + usage.ru_stime,
        usage.ru_maxrss / 1024,
        first[0] if first else None,
        audit.since(mark, agent),
    )


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
