"""`pwdeploy connect`'s forward against `kubectl port-forward` and a direct loopback connection, in one run.

Four paths to one TCP stand-in for the IFRT proxy (tests/portforward_fake.py's TcpStandIn):
  direct   the client connects to the stand-in;
  stream   the client speaks the port-forward stream itself (PortStream over a WebSocket to the API fake): what
           the stream protocol costs, with no local hop;
  forward  the client connects to 127.0.0.1 where connect's Forwarder gives the connection its own stream: the
           real path of a JAX client;
  kubectl  the client connects to `kubectl port-forward` (the tool users have today), through the same fake.
The API fake (PortForwardApiFake, Python, standing in for the Go API server and kubelet) serves HTTPS from a
throwaway CA, as a GKE control plane does (--plain-http for http). Each side runs in its own process, as in use:
the client, the forwarder (this process) or kubectl, and the API fake with the stand-in. Targets: forward at
least kubectl's throughput both ways and at most its round-trip time.

Measured: a SIZE MiB upload and download (MB/s), the round trip of small messages (median, p99), the CPU seconds
of each process, and the masking speed of pwdeploy and of the fake (so the fake is known not to be the bottleneck).
Each measurement opens a new connection and is timed from its first byte's answer (the path is set up then: the
forward has opened its stream, kubectl its SPDY streams); that setup time, connect included, is its own column.

Usage: python3 benchmarks/bench_forward.py [--size-mib 64] [--messages 2000] [--message-bytes 64] [--plain-http]
                                          [--repeat 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol

import psutil

from pwdeploy.kube.kubeconfig import load_kube
from pwdeploy.kube.port_stream import PortStream, open_port_stream
from pwdeploy.kube.portforward import CHUNK, Forwarder
from pwdeploy.kube.websockets import OP_BINARY, frame

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.portforward_fake: the API fake and the stand-in

from tests.portforward_fake import PortForwardApiFake, TcpStandIn, unmask  # noqa: E402

POD, PORT = "bench-pathways-head-0-0-x", 29000
BLOCK = bytes(range(256)) * 4096  # 1 MiB


class Pipe(Protocol):
    def send(self, data: bytes) -> None: ...

    def recv(self) -> bytes: ...

    def close(self) -> None: ...


class SocketPipe:
    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self) -> bytes:
        return self.sock.recv(1 << 20)

    def close(self) -> None:
        self.sock.close()


# ---------------------------------------------------------------------------------------------- stand-in


def bench_serve(conn: socket.socket) -> None:
    """P first: answer b"p" (the path is set up); then U<size>: read size bytes, answer b"k"; D<size>: send size
    bytes; E: echo until the end."""
    command = conn.recv(1)
    if command == b"P":
        conn.sendall(b"p")
        command = conn.recv(1)
    if command == b"E":
        while data := conn.recv(1 << 16):
            conn.sendall(data)
        return
    size = struct.unpack("!Q", _exactly(conn, 8))[0]
    if command == b"U":
        left = size
        while left > 0 and (data := conn.recv(1 << 20)):
            left -= len(data)
        conn.sendall(b"k")
    elif command == b"D":
        for offset in range(0, size, len(BLOCK)):
            conn.sendall(BLOCK[: min(len(BLOCK), size - offset)])
        conn.recv(1)  # until the client closes


def _exactly(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n and (more := conn.recv(n - len(data))):
        data += more
    return data


def run_api(pipe: Connection, kubeconfig: str, tls: bool) -> None:
    """The API fake and the stand-in, in a process of their own, until told to stop."""
    with PortForwardApiFake(tls=tls) as api, TcpStandIn(bench_serve) as standin:
        api.anonymous = None if tls else "system:anonymous"  # kubectl sends no token to an http:// server
        api.write_kubeconfig(Path(kubeconfig), {"bench": ("stub-token", None)}, current="bench")
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": POD, "namespace": "default"}}
        api.put("pods", {**pod, "status": {"phase": "Running"}})  # kubectl checks the phase
        api.route("default", POD, PORT, standin.address)
        pipe.send(standin.address)
        pipe.recv()


# ---------------------------------------------------------------------------------------------- client


def upload(pipe: Pipe, size: int) -> float:
    start = time.perf_counter()
    pipe.send(b"U" + struct.pack("!Q", size))
    for offset in range(0, size, len(BLOCK)):
        pipe.send(BLOCK[: min(len(BLOCK), size - offset)])
    if pipe.recv() != b"k":
        raise SystemExit("upload: no acknowledgement")
    return time.perf_counter() - start


def download(pipe: Pipe, size: int) -> float:
    start = time.perf_counter()
    pipe.send(b"D" + struct.pack("!Q", size))
    got = 0
    while got < size:
        data = pipe.recv()
        if not data:
            raise SystemExit(f"download: ended after {got} of {size} bytes")
        got += len(data)
    return time.perf_counter() - start


def round_trips(pipe: Pipe, count: int, size: int) -> list[float]:
    pipe.send(b"E")
    message, times = b"m" * size, []
    for _ in range(count):
        start = time.perf_counter()
        pipe.send(message)
        got = 0
        while got < size:
            got += len(pipe.recv())
        times.append(time.perf_counter() - start)
    return times


MODES = ("upload", "download", "rtt")


def measure(connect: Callable[[], Pipe], mode: str, args: argparse.Namespace) -> tuple[Any, float, float]:
    """(MB/s, or the round-trip times in s; the CPU seconds this process spent; the seconds until the path was set
    up). Every path is timed from the same point: once one byte went there and back on a new connection (for the
    forward: once its stream is open; for kubectl: once its SPDY streams are), that setup being reported apart."""
    size = args.size_mib << 20
    start = time.perf_counter()
    pipe = connect()
    pipe.send(b"P")
    if pipe.recv() != b"p":
        raise SystemExit("no answer to the first byte")
    setup = time.perf_counter() - start
    cpu = time.process_time()
    if mode == "rtt":
        result: Any = round_trips(pipe, args.messages, args.message_bytes)
    else:
        result = size / (upload if mode == "upload" else download)(pipe, size) / 1e6
    cpu = time.process_time() - cpu
    pipe.close()
    return result, cpu, setup


def client_process(address: tuple[str, int], mode: str, args: argparse.Namespace, out: Connection) -> None:
    out.send(measure(lambda: SocketPipe(address), mode, args))


def in_client_process(address: tuple[str, int], mode: str, args: argparse.Namespace) -> tuple[Any, float, float]:
    receive, send = mp.Pipe(duplex=False)
    proc = mp.Process(target=client_process, args=(address, mode, args, send))
    proc.start()
    result: tuple[Any, float, float] = receive.recv()
    proc.join()
    return result


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def measure_path(
    run: Callable[[str], tuple[Any, float, float]], api: psutil.Process, helper: psutil.Process | None = None
) -> dict[str, Any]:
    """Each mode of one path, with the CPU seconds of the client, the middle (this process: the forwarder; or
    ``helper``: kubectl) and the API fake."""
    middle, results = helper or psutil.Process(), dict[str, Any]()
    for mode in MODES:
        before = cpu_seconds(middle), cpu_seconds(api)
        results[mode], client_cpu, results[f"{mode}_setup"] = run(mode)
        results[f"{mode}_cpu"] = (client_cpu, cpu_seconds(middle) - before[0], cpu_seconds(api) - before[1])
    return results


class StreamPipe:
    """The client speaking the stream protocol itself (no local hop)."""

    def __init__(self, stream: PortStream) -> None:
        self.stream = stream

    def send(self, data: bytes) -> None:
        for offset in range(0, len(data), CHUNK):  # the forwarder's message size
            self.stream.send(data[offset : offset + CHUNK])

    def recv(self) -> bytes:
        return self.stream.recv()

    def close(self) -> None:
        self.stream.close()


def merged(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median throughput of the runs, every round trip of all of them, the median CPU seconds."""
    result: dict[str, Any] = {"rtt": [t for run in runs for t in run["rtt"]]}
    result["setup"] = statistics.median(run[f"{mode}_setup"] for run in runs for mode in MODES)
    for mode in ("upload", "download"):
        result[mode] = statistics.median(run[mode] for run in runs)
    for mode in MODES:
        cpu = [run[f"{mode}_cpu"] for run in runs]
        result[f"{mode}_cpu"] = tuple(statistics.median(values) for values in zip(*cpu, strict=True))
    return result


def start_kubectl(kubeconfig: str) -> tuple[subprocess.Popen[str], int]:
    """`kubectl port-forward` to the pod through the fake, on a free local port (its default transport: SPDY
    tunnelled in a WebSocket)."""
    args = ["kubectl", "--kubeconfig", kubeconfig, "port-forward", f"pod/{POD}", f"0:{PORT}", "--address", "127.0.0.1"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    found = re.search(r"127\.0\.0\.1:(\d+) ->", proc.stdout.readline())
    if found is None:
        proc.kill()
        raise SystemExit("kubectl port-forward did not start")
    return proc, int(found[1])


def masking_speeds(size: int = 64 << 20) -> dict[str, float]:
    """MB/s of pwdeploy's client framing (masking included) and of the fake's unmasking, on 64 KiB messages."""
    piece, key = os.urandom(CHUNK), os.urandom(4)
    works: dict[str, Callable[[], object]] = {
        "pwdeploy frame+mask": lambda: frame(OP_BINARY, piece, key),
        "fake unmask": lambda: unmask(piece, key),
    }
    speeds = {}
    for name, work in works.items():
        work()
        start = time.perf_counter()
        for _ in range(size // CHUNK):
            work()
        speeds[name] = size / (time.perf_counter() - start) / 1e6
    return speeds


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=64)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--message-bytes", type=int, default=64)
    parser.add_argument("--plain-http", action="store_true", help="the fake serves http instead of https")
    parser.add_argument("--repeat", type=int, default=3, help="runs of every path, interleaved; medians reported")
    return parser.parse_args()


def measured_paths(
    args: argparse.Namespace,
    api: psutil.Process,
    standin: tuple[str, int],
    new_stream: Callable[[], PortStream],
    forward_port: int,
    kubectl: tuple[subprocess.Popen[str], int] | None,
) -> dict[str, Callable[[], dict[str, Any]]]:
    """One measurement of every path, by name."""
    paths: dict[str, Callable[[], dict[str, Any]]] = {
        "direct": lambda: measure_path(lambda mode: in_client_process(standin, mode, args), api),
        "stream": lambda: measure_path(lambda mode: measure(lambda: StreamPipe(new_stream()), mode, args), api),
        "forward": lambda: measure_path(lambda mode: in_client_process(("127.0.0.1", forward_port), mode, args), api),
    }
    if kubectl is not None:
        helper = psutil.Process(kubectl[0].pid)
        paths["kubectl"] = lambda: measure_path(
            lambda mode: in_client_process(("127.0.0.1", kubectl[1]), mode, args), api, helper=helper
        )
    return paths


def main() -> None:
    args = parse_args()
    mp.set_start_method("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = f"{tmp}/kubeconfig"
        control, child = mp.Pipe()
        api = mp.Process(target=run_api, args=(child, kubeconfig, not args.plain_http))
        api.start()
        standin = control.recv()
        kube = load_kube(Path(kubeconfig))

        def new_stream() -> PortStream:
            return open_port_stream(kube, "default", POD, PORT)

        forwarder = Forwarder(socket.create_server(("127.0.0.1", 0)), new_stream, print, f"pod/{POD}", time.sleep)
        forwarder.start()
        kubectl = start_kubectl(kubeconfig) if shutil.which("kubectl") else None
        try:
            paths = measured_paths(args, psutil.Process(api.pid), standin, new_stream, forwarder.port, kubectl)
            runs = [{name: path() for name, path in paths.items()} for _ in range(args.repeat)]  # interleaved
            results = {name: merged([run[name] for run in runs]) for name in paths}
        finally:
            forwarder.close()
            if kubectl is not None:
                kubectl[0].terminate()
                kubectl[0].wait(timeout=10)
            control.send("stop")
            api.join()
    report(results, args)
    for name, speed in masking_speeds().items():
        print(f"masking: {name} {speed:.0f} MB/s (one core)")


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    scheme = "http" if args.plain_http else "https (TLS)"
    print(
        f"{args.size_mib} MiB transfers, {args.messages} round trips of {args.message_bytes} B; API fake over "
        f"{scheme}; medians of {args.repeat} interleaved runs"
    )
    print(
        f"{'path':8} {'upload MB/s':>12} {'download MB/s':>14} {'rtt median us':>14} {'rtt p99 us':>11} {'setup ms':>9}"
    )
    for name, r in results.items():
        times = r["rtt"]
        r["rtt_median"], r["rtt_p99"] = statistics.median(times) * 1e6, statistics.quantiles(times, n=100)[98] * 1e6
        print(
            f"{name:8} {r['upload']:12.0f} {r['download']:14.0f} {r['rtt_median']:14.0f} {r['rtt_p99']:11.0f} "
            f"{r['setup'] * 1e3:9.1f}"
        )
    pairs = [("forward/direct", "forward", "direct"), ("forward/stream", "forward", "stream")]
    if "kubectl" in results:
        pairs += [("forward/kubectl", "forward", "kubectl"), ("kubectl/direct", "kubectl", "direct")]
    else:
        print("kubectl is not installed: no kubectl port-forward row")
    for label, a_name, b_name in pairs:
        a, b = results[a_name], results[b_name]
        print(
            f"{label}: throughput up {a['upload'] / b['upload']:.3f}, down {a['download'] / b['download']:.3f}; "
            f"rtt median {a['rtt_median'] / b['rtt_median']:.2f}x"
        )
    print("CPU seconds (client / middle: this process, or kubectl / API fake + stand-in):")
    for name, r in results.items():
        cells = [f"{mode} " + " / ".join(f"{v:.2f}" for v in r[f"{mode}_cpu"]) for mode in MODES]
        print(f"  {name:8} " + "; ".join(cells))


if __name__ == "__main__":
    main()
