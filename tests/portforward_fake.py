"""PortForwardApiFake: StubKubeApiServer plus the pods/portforward subresource over WebSocket, and TcpStandIn, a
loopback TCP server standing in for the IFRT proxy.

It is a stub, not an API server or a kubelet. What it does as they do: the upgrade request on
``GET /api/v1/namespaces/NS/pods/POD/portforward?ports=P`` with bearer-token authentication and RBAC refusals
(403 ``Status`` on ``create pods/portforward``), the ``v4.channel.k8s.io`` subprotocol, binary messages whose
first byte is the channel (0 data, 1 error), the 2-byte little-endian port number sent first on each channel, data
in messages of at most 32 KiB (Go's io.Copy buffer; several go out in one write), error text on channel 1 when the
pod's port cannot be reached, and closing the WebSocket when the pod side closes (kubelet: staging/src/k8s.io/
kubelet/pkg/cri/streaming/portforward/websocket.go). ``drop_streams`` resets every open stream at the TCP level, as
a restarted API server or a load balancer's idle timeout does. kubectl port-forward's SPDY streams (tunnelled in a
WebSocket, or after an ``Upgrade: SPDY/3.1``) are served by tests/spdy_fake.py, to the same stand-ins. Like the
stub, it serves HTTPS by default; every accepted connection has TCP_NODELAY set, as Go's net package does.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import socket
import struct
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from io import BufferedIOBase
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.kube_answers import Recorded, Reply, status_body
from tests.kube_stub import StubKubeApiServer, peer_name
from tests.loopback import LoopbackServer, per_connection
from tests.spdy_fake import SPDY_WEBSOCKET, SpdyPortForward

V4_CHANNEL = "v4.channel.k8s.io"
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 section 1.3
BINARY, CLOSE, PING, PONG = 0x2, 0x8, 0x9, 0xA
POD_READ = 32 * 1024  # bytes per message, as Go's io.Copy buffer makes them
POD_BATCH = 8 * POD_READ  # bytes read from the pod side at once, then sent as messages of POD_READ in one write
PORTFORWARD_PATH = re.compile(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/portforward")


def server_frame(opcode: int, payload: bytes) -> tuple[bytes, bytes]:
    """An unmasked frame (the server's side), as header and payload."""
    return frame_header(opcode, len(payload)), payload


def frame_header(opcode: int, n: int) -> bytes:
    """The header of a final unmasked frame with an ``n``-byte payload."""
    if n < 126:
        return struct.pack("!BB", 0x80 | opcode, n)
    if n < 1 << 16:
        return struct.pack("!BBH", 0x80 | opcode, 126, n)
    return struct.pack("!BBQ", 0x80 | opcode, 127, n)


def unmask(data: bytes, mask: bytes) -> bytes:
    """``data`` XOR the repeated 4-byte ``mask``, through numpy: the fake's own masking is never the bottleneck
    of a throughput measurement (benchmarks/bench_forward.py)."""
    import numpy as np

    n = len(data)
    words = n // 4
    out = bytearray(n)
    np.bitwise_xor(
        np.frombuffer(data, "<u4", words), np.frombuffer(mask, "<u4")[0], out=np.frombuffer(out, "<u4", words)
    )
    for i in range(words * 4, n):
        out[i] = data[i] ^ mask[i % 4]
    return bytes(out)


def read_frame(rfile: BufferedIOBase) -> tuple[int, bytes]:
    """One client frame (masked, as RFC 6455 requires of clients), unmasked; (CLOSE, b"") at end of input."""
    head = rfile.read(2)
    if len(head) < 2:
        return CLOSE, b""
    opcode, length = head[0] & 0x0F, head[1] & 0x7F
    if length == 126:
        (length,) = struct.unpack("!H", rfile.read(2))
    elif length == 127:
        (length,) = struct.unpack("!Q", rfile.read(8))
    mask = rfile.read(4) if head[1] & 0x80 else b""
    data = rfile.read(length)
    return opcode, unmask(data, mask) if mask else data


class FakeStream:
    """One upgraded port-forward stream: the client's socket and the connection to the stand-in."""

    def __init__(self, client: socket.socket, rfile: BufferedIOBase, port: int) -> None:
        self.client, self.rfile, self.port = client, rfile, port
        self.pod_side: socket.socket | None = None
        self._send_lock = threading.Lock()
        self.was_reset = False
        self.from_client = 0  # data bytes received on channel 0

    def send(self, opcode: int, payload: bytes) -> None:
        if self.was_reset:
            raise ConnectionResetError("the fake reset this stream")
        with self._send_lock:
            self.client.sendall(b"".join(server_frame(opcode, payload)))

    def send_channel(self, channel: int, data: bytes) -> None:
        self.send_binary(data, bytes((channel,)))

    def send_binary(self, data: bytes, prefix: bytes = b"", size: int = POD_READ) -> None:
        """``data`` in binary messages of ``prefix`` and at most ``size`` bytes, all in one write (one TLS write:
        the fake's Python, not the client, would otherwise bound a throughput measurement)."""
        if self.was_reset:
            raise ConnectionResetError("the fake reset this stream")
        parts: list[bytes | memoryview] = []
        with memoryview(data) as view:
            for offset in range(0, max(len(data), 1), size):
                piece = view[offset : offset + size]
                parts += (frame_header(BINARY, len(prefix) + len(piece)), prefix, piece)
            joined = b"".join(parts)
        with self._send_lock:
            self.client.sendall(joined)

    def reset(self) -> None:
        """Drop the stream at the TCP level: the client gets a reset (RST), not a close; the pod side closes.

        shutdown(SHUT_RD) wakes the thread reading the client without sending anything; that thread then closes
        the socket with a zero linger time, which is what sends the RST (``finish_reset``)."""
        self.was_reset = True
        with contextlib.suppress(OSError):
            self.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.client.shutdown(socket.SHUT_RD)
        if self.pod_side is not None:
            with contextlib.suppress(OSError):
                self.pod_side.shutdown(socket.SHUT_RDWR)

    def finish_reset(self) -> None:
        self.rfile.close()  # the buffered reader holds a reference: the socket closes (RST) once it is gone too
        self.client.close()
        if self.pod_side is not None:
            self.pod_side.close()


class PortForwardApiFake(StubKubeApiServer):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.targets: dict[tuple[str, str, int], tuple[str, int]] = {}  # (namespace, pod, port) -> stand-in
        self.streams: list[FakeStream] = []  # open now
        self.upgrades = 0  # streams opened
        self.pod_error: str | None = None  # text every new stream reports on its error channel instead of data
        self.deaf = False  # ignore pings, as a connection that went dead on the way does
        self.pings = 0
        self.subprotocol: str | None = V4_CHANNEL  # the subprotocol the v4 upgrade answers (None: no header)
        self.close_with: tuple[int, bytes] | None = None  # close every new stream at once with (code, reason)
        self.spdy_pairs = 0  # kubectl connections served over SPDY
        self.wrong_accept = False  # answer the WebSocket upgrade with a Sec-WebSocket-Accept for another key

    def route(self, namespace: str, pod: str, port: int, address: tuple[str, int]) -> None:
        self.targets[(namespace, pod, port)] = address

    def drop_streams(self) -> int:
        with self._lock:
            streams, self.streams = list(self.streams), []
        for stream in streams:
            stream.reset()
        return len(streams)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        base = super()._handler_class()
        fake = self

        class Handler(base):  # type: ignore[valid-type,misc]
            def do_GET(self) -> None:
                if (self.headers.get("Upgrade") or "").lower() == "websocket":
                    fake._upgrade(self)
                else:
                    super().do_GET()

            def do_POST(self) -> None:
                if (self.headers.get("Upgrade") or "").lower() == "spdy/3.1":
                    fake._upgrade(self)
                else:
                    super().do_POST()

        return Handler

    # ------------------------------------------------------------------------------------------ handshake

    def _refuse(self, h: BaseHTTPRequestHandler, code: int, reason: str, message: str, **details: Any) -> None:
        body = json.dumps(status_body(code, reason, message, details or None)).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _upgrade(self, h: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        record = Recorded(
            h.command,
            parts.path,
            parse_qs(parts.query),
            dict(h.headers.items()),
            None,
            peer_name(h.connection),
            list(h.headers.items()),
        )
        with self._lock:
            self.requests.append(record)
        match = PORTFORWARD_PATH.fullmatch(parts.path)
        if match is None:
            return self._refuse(h, 404, "NotFound", "the server could not find the requested resource")
        namespace, pod = match[1], match[2]
        try:
            self._inject(record)  # fail(...): answer the upgrade with an error status, as an overloaded server does
        except Reply as reply:
            return self._refuse(h, reply.code, str(reply.body.get("reason")), str(reply.body.get("message")))
        user = self.user_of(record)
        if user is None:
            return self._refuse(h, 401, "Unauthorized", "Unauthorized")
        if ("create", "pods/portforward") in self.forbidden:
            message = (
                f'pods "{pod}" is forbidden: User "{user}" cannot create resource "pods/portforward" in API group "" '
                f'in the namespace "{namespace}"'
            )
            return self._refuse(h, 403, "Forbidden", message, name=pod, kind="pods")
        if ("pods", namespace, pod) not in self.objects:
            return self._refuse(h, 404, "NotFound", f'pods "{pod}" not found', name=pod, kind="pods")
        if h.command == "POST":  # kubectl's SPDY upgrade: ports are named per stream
            self._switch(h, {"Upgrade": "SPDY/3.1", "X-Stream-Protocol-Version": "portforward.k8s.io"})
            return self._serve_spdy(SocketBytes(h), namespace, pod)
        ports = record.q("ports") or ""
        offered = [p.strip() for p in (h.headers.get("Sec-WebSocket-Protocol") or "").split(",")]
        key = h.headers["Sec-WebSocket-Key"] + ("x" if self.wrong_accept else "")
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest())
        websocket = {"Upgrade": "websocket", "Sec-WebSocket-Accept": accept.decode()}
        if SPDY_WEBSOCKET in offered and V4_CHANNEL not in offered:
            self._switch(h, {**websocket, "Sec-WebSocket-Protocol": SPDY_WEBSOCKET})
            return self._serve_spdy(WebSocketBytes(FakeStream(h.connection, h.rfile, 0)), namespace, pod)
        if not ports.isdigit() or V4_CHANNEL not in offered:
            return self._refuse(h, 400, "BadRequest", f"ports {ports!r} / subprotocols {offered}: not served")
        answer = {"Sec-WebSocket-Protocol": self.subprotocol} if self.subprotocol else {}
        with self._lock:  # counted before the 101 goes out: a client may act on it (and a test read this) at once
            self.upgrades += 1
        self._switch(h, {**websocket, **answer})
        self._serve_stream(FakeStream(h.connection, h.rfile, int(ports)), namespace, pod)
        return None

    def _switch(self, h: BaseHTTPRequestHandler, headers: dict[str, str]) -> None:
        h.send_response(101)
        h.send_header("Connection", "Upgrade")
        for key, value in headers.items():
            h.send_header(key, value)
        h.end_headers()
        h.wfile.flush()
        h.close_connection = True

    def _serve_spdy(self, conn: SocketBytes | WebSocketBytes, namespace: str, pod: str) -> None:
        def dial(port: int) -> socket.socket:
            address = self.targets.get((namespace, pod, port))
            if address is None:
                raise OSError(f"error forwarding port {port} to pod {pod}: no stand-in routed for this pod and port")
            sock = socket.create_connection(address, timeout=5)
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock

        def paired() -> None:
            with self._lock:
                self.spdy_pairs += 1

        with self._lock:
            self.upgrades += 1
        SpdyPortForward(conn, dial, paired).serve()

    # ------------------------------------------------------------------------------------------ streaming

    def _serve_stream(self, stream: FakeStream, namespace: str, pod: str) -> None:
        with self._lock:
            self.streams.append(stream)
        announce = stream.port.to_bytes(2, "little")
        try:
            if self.close_with is not None:  # before any data, as a server that cannot serve the stream does
                stream.send(CLOSE, struct.pack("!H", self.close_with[0]) + self.close_with[1])
                return
            stream.send_channel(0, announce)
            stream.send_channel(1, announce)
            address = self.targets.get((namespace, pod, stream.port))
            failure = self.pod_error
            if failure is None and address is not None:
                try:
                    stream.pod_side = socket.create_connection(address, timeout=5)
                    stream.pod_side.settimeout(None)
                    stream.pod_side.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except OSError as exc:
                    failure = f"dial tcp4 127.0.0.1:{stream.port}: {exc.strerror or exc}"
            if failure is not None or stream.pod_side is None:
                text = failure or "no stand-in routed for this pod and port"
                message = f"error forwarding port {stream.port} to pod {pod}: failed to connect: {text}"
                stream.send_channel(1, message.encode())
                stream.send(CLOSE, struct.pack("!H", 1000))
                return
            threading.Thread(target=self._pod_to_client, args=(stream,), daemon=True).start()
            self._client_to_pod(stream)
        except OSError:
            pass  # reset (drop_streams) or the client went away
        finally:
            with self._lock:
                if stream in self.streams:
                    self.streams.remove(stream)
            if stream.was_reset:
                stream.finish_reset()
            elif stream.pod_side is not None:  # the client went away: so does this stream's pod connection
                stream.pod_side.close()

    def _client_to_pod(self, stream: FakeStream) -> None:
        assert stream.pod_side is not None
        while True:
            opcode, data = read_frame(stream.rfile)
            if opcode == CLOSE:
                with contextlib.suppress(OSError):
                    stream.send(CLOSE, data[:2])
                stream.pod_side.close()
                return
            if opcode == PING:
                self.pings += 1
                if not self.deaf:
                    stream.send(PONG, data)
            elif opcode == BINARY and data[:1] == b"\x00":
                stream.from_client += len(data) - 1
                stream.pod_side.sendall(data[1:])

    def _pod_to_client(self, stream: FakeStream) -> None:
        assert stream.pod_side is not None
        try:
            while data := stream.pod_side.recv(POD_BATCH):
                stream.send_channel(0, data)
            stream.send(CLOSE, struct.pack("!H", 1000))  # the pod side closed: so does the stream
        except OSError:
            pass


class SocketBytes:
    """The upgraded connection itself, as bytes (kubectl's ``Upgrade: SPDY/3.1``)."""

    def __init__(self, h: BaseHTTPRequestHandler) -> None:
        self.rfile, self.sock = h.rfile, h.connection

    def read(self, n: int) -> bytes:
        return self.rfile.read(n)

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)


class WebSocketBytes:
    """The bytes carried by a WebSocket's binary messages, both ways (SPDY tunnelled in a WebSocket)."""

    def __init__(self, stream: FakeStream) -> None:
        self.stream, self._buffer = stream, bytearray()

    def read(self, n: int) -> bytes:
        while len(self._buffer) < n:
            opcode, data = read_frame(self.stream.rfile)
            if opcode == CLOSE:
                break
            if opcode == PING:
                self.stream.send(PONG, data)
            elif opcode in (0x0, BINARY):
                self._buffer += data
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    def sendall(self, data: bytes) -> None:
        self.stream.send_binary(data, size=POD_READ + 8)  # a message per SPDY data frame (8-byte header)


class TcpStandIn(LoopbackServer):
    """A loopback TCP server standing in for the proxy: ``serve(conn)`` runs in a thread per connection
    (default: echo every byte back)."""

    def __init__(self, serve: Callable[[socket.socket], None] | None = None) -> None:
        super().__init__(per_connection(serve or echo))


def echo(conn: socket.socket) -> None:
    while data := conn.recv(POD_READ):
        conn.sendall(data)
