"""`pwdeploy logs` on one long line without a newline (a tqdm-style progress bar redrawn with ``\\r``), against
StubKubeApiServer (a loopback stub, not an API server), side by side: the line-splitting reader logs used before
(``pending += chunk`` then ``split``, reproduced here), the byte stream logs uses now and ``stream_lines``
(diagnose's log tails). Each reader's output is checked to be the bytes the stub served. (kubectl cannot be put
beside them here: client-go sends no bearer token to a plain-http server such as the stub.)

Usage: python3 benchmarks/bench_logs.py [--mib 16] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
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
    from pwdeploy.kube.api import POD_LOGS, Action
    from pwdeploy.kube.kubeconfig import load_kube
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    measure(args.mib, args.runs)


if __name__ == "__main__":
    main()
