"""`preflight --cluster`'s readiness rows for the example job, in one process, against StubKubeApiServer (a loopback
stub, not an API server) holding a ready cluster (two TPU pools, a CPU node, the JobSet controller's Deployment)
and another job's pods on those nodes: requests sent, and wall time one check after another (``max_workers=1``)
and side by side (the default), medians of interleaved rounds. ``--latency`` delays every answer of the stub (a
remote API server).

Usage: python3 benchmarks/bench_readiness.py [--runs N] [--latency SECONDS]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def measure(runs: int, latency: float) -> None:
    sys.path.insert(0, str(REPO))
    from pwdeploy.config import load_job
    from pwdeploy.kube.kubeconfig import load_kube
    from pwdeploy.readiness import check_cluster
    from tests.kube_stub import StubKubeApiServer
    from tests.test_readiness_capacity_held_stub import other_jobs_pods
    from tests.test_readiness_stub import ready

    job = load_job(REPO / "examples" / "data_parallel" / "job.yaml", {"tpu.type": "v5p-8", "tpu.slices": 2})
    with StubKubeApiServer() as stub, tempfile.TemporaryDirectory() as tmp:
        kube = load_kube(stub.write_kubeconfig(Path(tmp) / "kc", {"s": ("stub-token", None)}, "s"))
        other_jobs_pods(ready(stub))
        stub.latency = latency
        times: dict[int, list[float]] = {}
        sent: dict[int, int] = {}
        for _ in range(runs):  # interleaved rounds
            for workers in (1, 8):
                before = len(stub.requests)
                start = time.perf_counter()
                rows = check_cluster(job, kube, max_workers=workers)
                times.setdefault(workers, []).append(time.perf_counter() - start)
                sent[workers] = len(stub.requests) - before
    print(f"{len(rows)} rows: " + ", ".join(f"{r.id} {r.status.value}" for r in rows))
    for workers in (1, 8):
        median = statistics.median(times[workers]) * 1000
        print(f"max_workers={workers}: {sent[workers]} requests, median {median:.0f} ms over {runs} runs")
    print(f"one after another / side by side: {statistics.median(times[1]) / statistics.median(times[8]):.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds the stub waits before each answer")
    args = parser.parse_args()
    measure(args.runs, args.latency)


if __name__ == "__main__":
    main()
