"""`diagnose` against `status` on one job, in one process, against StubKubeApiServer (a loopback stub, not an
API server): requests sent and wall time (medians of interleaved rounds).

The job: 64 slices of v5p-32 (1 head pod + 64 x 4 worker pods); every worker restarted after exit 1 (so diagnose
reads logs, at most MAX_LOGS of them) and has FailedScheduling, Pulling and BackOff events, plus unrelated events
of other jobs in the namespace: a few thousand events in all. Also the same job with 2 slices, to show that the
number of requests does not grow with the number of pods. ``--latency`` delays every answer of the stub (a
remote API server); the default 0 measures the client's own cost.

Usage: python3 benchmarks/bench_diagnose.py [--runs N] [--latency SECONDS]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def crashing_workers() -> dict[str, Any]:
    status = {
        "phase": "Running",
        "conditions": [{"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [
            {
                "name": "pathways-worker",
                "restartCount": 3,
                "state": {"running": {"startedAt": "2026-01-01T00:04:00Z"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
            }
        ],
    }
    events = [
        {
            "for": "worker",
            "type": "Warning",
            "reason": "FailedScheduling",
            "message": "0/300 nodes are available: "
            "256 Insufficient google.com/tpu, 44 node(s) didn't match Pod's node affinity/selector.",
        },
        {"for": "worker", "type": "Normal", "reason": "Pulling", "message": 'Pulling image "server:jax-0.10.2"'},
        {"for": "worker", "type": "Warning", "reason": "BackOff", "message": "Back-off restarting failed container"},
    ]
    logs = [{"for": "worker", "container": "pathways-worker", "previous": True, "text": "F0101 check failed\n" * 50}]
    return {"pods": {"worker": {"status": status}}, "events": events, "logs": logs}


def other_events(stub: Any, count: int) -> None:
    for i in range(count):
        stub.put(
            "events",
            {
                "metadata": {"name": f"other.{i}"},
                "type": "Normal",
                "reason": "Scheduled",
                "message": "Successfully assigned",
                "involvedObject": {"kind": "Pod", "name": f"other-{i}"},
            },
        )


def measure(runs: int, latency: float) -> None:
    sys.path.insert(0, str(REPO))
    from pwdeploy.cluster.diagnose import diagnose
    from pwdeploy.cluster.status import read_status, status_lines
    from pwdeploy.kube.kubeconfig import load_kube
    from tests.diagnose_cases import serve
    from tests.kube_stub import StubKubeApiServer

    with StubKubeApiServer() as stub, tempfile.TemporaryDirectory() as tmp:
        kube = load_kube(stub.write_kubeconfig(Path(tmp) / "kc", {"s": ("stub-token", None)}, "s"))
        pods = {}
        for job, slices in (("small", 2), ("big", 64)):
            pods[job] = serve(stub, crashing_workers(), job=job, slices=slices, tpu_type="v5p-32")
        other_events(stub, 2000)
        events = sum(1 for key in stub.objects if key[0] == "events")
        print(
            f"namespace: {events} events; big job: {len(pods['big']['head'])} head + {len(pods['big']['worker'])} "
            f"worker pods; small job: {len(pods['small']['worker'])} worker pods; stub latency {latency * 1000:.0f} ms"
        )
        stub.latency = latency

        def run(what: str, job: str) -> tuple[int, int, float]:
            before, logs_before = len(stub.requests), len(stub.sent("GET", "/log"))
            start = time.perf_counter()
            if what == "diagnose":
                found = diagnose(kube, "default", job)
                assert found.findings, "the benchmark job must have findings"
            else:
                status_lines(read_status(kube, "default", job))
            return len(stub.requests) - before, len(stub.sent("GET", "/log")) - logs_before, time.perf_counter() - start

        times: dict[tuple[str, str], list[float]] = {}
        requests: dict[tuple[str, str], tuple[int, int]] = {}
        for _ in range(runs):  # interleaved rounds
            for what in ("status", "diagnose"):
                for job in ("small", "big"):
                    sent, logs, seconds = run(what, job)
                    requests[(what, job)] = (sent, logs)
                    times.setdefault((what, job), []).append(seconds)
    for (what, job), (sent, logs) in sorted(requests.items()):
        median = statistics.median(times[(what, job)]) * 1000
        print(f"{what:8} {job:5}: {sent} requests ({logs} of them logs), median {median:.1f} ms over {runs} runs")
    ratio = statistics.median(times[("diagnose", "big")]) / statistics.median(times[("status", "big")])
    print(f"diagnose / status wall time on the 64-slice job: {ratio:.2f}x")
    grows = requests[("diagnose", "big")][0] - requests[("diagnose", "small")][0]
    print(f"requests of diagnose, 64 slices minus 2 slices: {grows}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds the stub waits before each answer")
    args = parser.parse_args()
    measure(args.runs, args.latency)


if __name__ == "__main__":
    main()
