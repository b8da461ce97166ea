"""CutWire: a TCP forwarder on 127.0.0.1 in front of a real server (the control plane's API server), whose
connections a test cuts at the moment it chooses, as a network that drops them does (a load balancer's idle
timeout, a node's connection tracking table flushed). Bytes pass through untouched (TLS is end to end), so the
client talks to the real server; ``cut`` shuts every connection open now, both ways, and later ones pass again.
``connections`` counts the connections made through it."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Self

from tests.loopback import LoopbackServer, per_connection


class CutWire:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.connections = 0
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._server = LoopbackServer(per_connection(self._serve))

    @property
    def url(self) -> str:
        return f"https://{self._server.netloc}"

    def cut(self) -> int:
        """Shut every connection open now; how many there were (each counted once, both of its sockets)."""
        with self._lock:
            socks, self._open = list(self._open), set()
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        return len(socks) // 2

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self.target, timeout=10)
        upstream.settimeout(None)
        with self._lock:
            self.connections += 1
            self._open |= {client, upstream}
        pump = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
        pump.start()
        try:
            _pump(client, upstream)
        finally:
            pump.join(10)
            with self._lock:
                self._open -= {client, upstream}
            upstream.close()

    def __enter__(self) -> Self:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cut()
        self._server.stop()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy ``source`` to ``sink`` until either ends; then end both ways."""
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    for sock in (source, sink):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
