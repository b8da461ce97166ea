"""`pwdeploy logs` against StubKubeApiServer (a loopback stub, not an API server), side by side.

1. One long line without a newline (a tqdm-style progress bar redrawn with ``\\r``): the line-splitting reader
   logs used before (``pending += chunk`` then ``split``, reproduced here), the byte stream logs uses now and
   ``stream_lines`` (diagnose's log tails), in process. Each reader's output is checked to be the bytes served.
2. ``pwdeploy logs NAME -f`` against ``kubectl logs -f POD`` (skipped when kubectl is not installed), each a whole
   process, through the same stub over TLS with the same token, alternately: wall time and the CPU seconds of the
   process (children's rusage), median of ``--runs``; both outputs are checked to be the bytes served. The stub
   answers a follow with the whole log and ends the stream, so each run is start-up + one log's transfer; the
   log is ``--follow-mib`` MiB of 100-byte lines (0: a few lines, start-up alone).

Usage: python3 benchmarks/bench_logs.py [--mib 16] [--runs 3] [--follow-mib 8]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
POD = "dp-example-pathways-head-0-0-x7k2p"


def progress_line(mib: int) -> bytes:
    """``\\r  1%|#  | 1/100`` redrawn until the line holds ``mib`` MiB, with no newline."""
    frame = b"\r 42%|####2     | 4200/10000 [00:42<00:58, 99.9it/s]"
    return frame * (mib * 2**20 // len(frame))


def old_lines(kube: Any, action: Any, path: str, query: list[tuple[str, str]]) -> Iterator[str]:
    """The reader logs used before: the pending line is concatenated and re-split on every 4 KiB chunk."""
    raw = kube.request(action, "GET", path, query=query, stream=True)
    pending = b""
    try:
        for chunk in raw.stream(4096, decode_content=True):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line.decode("utf-8", "replace")
        if pending:
            yield pending.decode("utf-8", "replace")
    finally:
        raw.release_conn()


def timed(read: Callable[[], bytes], expect: bytes, runs: int) -> float:
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        got = read()
        seconds.append(time.perf_counter() - start)
        assert got == expect, f"output differs: {len(got)} bytes against {len(expect)}"
    return statistics.median(seconds)


def measure(mib: int, runs: int) -> None:
    sys.path.insert(0, str(REPO))
    from pwdeploy.kube.kubeconfig import load_kube
    from pwdeploy.kube.seam import POD_LOGS, Action
    from tests.kube_stub import StubKubeApiServer

    line = progress_line(mib)
    with StubKubeApiServer() as stub, tempfile.TemporaryDirectory() as tmp:
        kubeconfig = stub.write_kubeconfig(Path(tmp) / "kc", {"s": ("stub-token", "default")}, "s")
        kube = load_kube(kubeconfig)
        stub.put(
            "pods", {"metadata": {"name": POD, "namespace": "default"}, "spec": {"containers": [{"name": "main"}]}}
        )
        stub.logs[("default", POD, "main")] = line
        action, path, query = (
            Action("get", POD_LOGS, "default", POD),
            POD_LOGS.path("default", POD),
            [("container", "main")],
        )
        readers: dict[str, Callable[[], bytes]] = {
            "before (split per chunk)": lambda: "".join(old_lines(kube, action, path, query)).encode(),
            "now: logs (byte stream)": lambda: b"".join(kube.stream_bytes(action, path, query)),
            "now: stream_lines": lambda: "".join(kube.stream_lines(action, path, query)).encode(),
        }
        print(f"one {len(line) / 2**20:.0f} MiB line of '\\r' progress frames, no newline; median of {runs} runs")
        results = {name: timed(read, line, runs) for name, read in readers.items()}
    now = results["now: logs (byte stream)"]
    for name, seconds in results.items():
        print(f"  {name:26} {seconds:8.3f} s   {seconds / now:7.1f}x of logs now")


def run_process(argv: list[str], expect: bytes) -> tuple[float, float]:
    """Wall and CPU seconds of one process; its stdout must be ``expect``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0 or done.stdout != expect:
        raise SystemExit(f"{argv[0]} failed or printed other bytes: rc {done.returncode}, {done.stderr[-500:]!r}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def versus_kubectl(mib: int, runs: int) -> None:
    """`pwdeploy logs NAME -f` and `kubectl logs -f POD`, whole processes, alternately, through one stub."""
    if shutil.which("kubectl") is None:
        print("kubectl is not installed: logs -f against kubectl skipped")
        return
    sys.path.insert(0, str(REPO))
    from pwdeploy import identifiers as ids
    from tests.kube_stub import StubKubeApiServer

    line = b"step 1234: loss 0.012345 " + b"x" * 74 + b"\n"  # 100 bytes
    log = line * max(3, mib * 2**20 // len(line))
    with StubKubeApiServer() as stub, tempfile.TemporaryDirectory() as tmp:
        kubeconfig = str(stub.write_kubeconfig(Path(tmp) / "kc", {"s": ("stub-token", "default")}, "s"))
        labels = {ids.JOBSET_NAME_LABEL: "dp-example", ids.REPLICATED_JOB_LABEL: ids.HEAD_JOB}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": POD, "namespace": "default", "labels": labels},
            "spec": {"containers": [{"name": ids.MAIN_CONTAINER}]},
            "status": {"phase": "Running"},
        }
        stub.put("pods", pod)
        stub.logs[("default", POD, ids.MAIN_CONTAINER)] = log
        tools = {
            "pwdeploy logs -f": [
                sys.executable,
                "-m",
                "pwdeploy",
                "logs",
                "dp-example",
                "-f",
                "--kubeconfig",
                kubeconfig,
            ],
            "kubectl logs -f": ["kubectl", "--kubeconfig", kubeconfig, "logs", "-f", POD, "-c", ids.MAIN_CONTAINER],
        }
        for argv in tools.values():
            run_process(argv, log)  # warm the page cache and the stub
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in tools}
        for _ in range(runs):
            for name, argv in tools.items():
                figures[name].append(run_process(argv, log))
    print(f"logs -f of {len(log) / 2**20:.1f} MiB ({len(log) // len(line)} lines), whole processes; median of {runs}")
    wall = {name: statistics.median(w for w, _ in runs_) for name, runs_ in figures.items()}
    cpu = {name: statistics.median(c for _, c in runs_) for name, runs_ in figures.items()}
    for name in figures:
        print(f"  {name:24} wall {wall[name]:7.3f} s   CPU {cpu[name]:7.3f} s")
    ours, theirs = "pwdeploy logs -f", "kubectl logs -f"
    print(f"  ratio pwdeploy / kubectl: wall {wall[ours] / wall[theirs]:.2f}x, CPU {cpu[ours] / cpu[theirs]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--follow-mib", type=int, default=8, help="the log `logs -f` and kubectl read (0: tiny)")
    args = parser.parse_args()
    measure(args.mib, args.runs)
    versus_kubectl(args.follow_mib, args.runs)


if __name__ == "__main__":
    main()
