"""One stream to one port of a pod, through the API server's pods/portforward subresource.

The stream protocol is ``v4.channel.k8s.io`` over one WebSocket per stream, as the kubelet serves it
(kubernetes/kubernetes ``staging/src/k8s.io/kubelet/pkg/cri/streaming/portforward/websocket.go``): each binary
message starts with a channel byte; for the one port forwarded here, channel 0 carries data both ways and
channel 1 error text from the server; the first message the server sends on each channel is the port number
(2 bytes, little-endian), not data. pwdeploy.kube.portforward forwards local connections over such streams.
"""

from __future__ import annotations

from typing import Any

from pwdeploy.kube.answers import printable
from pwdeploy.kube.seam import POD_PORTFORWARD, Action, ApiError, Kube
from pwdeploy.kube.websockets import (
    OP_BINARY,
    OP_CLOSE,
    OP_PING,
    FrameError,
    Frames,
    close_status,
    describe_close,
)

V4_CHANNEL = "v4.channel.k8s.io"
DATA, ERROR = 0, 1  # the channels of the first (only) port
COALESCE = 1 << 20  # bytes of messages already read that go to the local program in one write


class StreamBroken(Exception):
    """The stream ended abnormally: a reset, an error from the server, or a message outside the protocol."""


class PortStream:
    """One stream to one port of a pod: the channel framing over a connected WebSocket."""

    def __init__(self, ws: Any, port: int) -> None:
        self.ws = ws
        self.port = port
        self.frames = Frames(ws)
        self._started: set[int] = set()  # channels whose port-number message has arrived
        self._closed = False  # the server's close came (after bytes still to deliver)
        self._broken: StreamBroken | None = None  # the stream broke (after bytes still to deliver)

    def send(self, data: bytes) -> None:
        self.frames.send(OP_BINARY, bytes((DATA,)) + data)

    def recv(self) -> bytes:
        """The next bytes from the pod, with those of the messages already read behind them (one write to the
        local program, not one per message); b"" once the server closed the stream. StreamBroken otherwise, once
        the bytes that came before it are delivered."""
        if self._broken is not None:
            raise self._broken
        if self._closed:
            return b""
        parts: list[bytes] = []
        size = 0
        while not parts or (size < COALESCE and self.frames.buffered()):
            try:
                data = self._next()
            except StreamBroken as exc:
                if not parts:
                    raise
                self._broken = exc
                break
            if data is None:
                self._closed = True
                break
            if data:
                parts.append(data)
                size += len(data)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def started(self) -> None:
        """Read until the server has announced the port on both channels (a probe: no data is expected)."""
        while len(self._started) < 2:
            data = self._next()
            if data is None or data:
                raise StreamBroken("the stream ended or carried data before the server announced the port")

    def _next(self) -> bytes | None:
        """One message's data (b"" for a port announcement); None for the server's close."""
        try:
            opcode, payload = self.frames.next()
            if opcode == OP_CLOSE:
                code, reason = close_status(payload)
        except (FrameError, OSError) as exc:  # Frames reads the socket itself: no websocket-client error here
            raise StreamBroken(str(exc) or type(exc).__name__) from None
        if opcode == OP_CLOSE:
            if code not in (None, 1000):  # RFC 6455 section 7.4: anything but a normal closure is said
                raise StreamBroken(f"the API server closed the stream with {describe_close(code, reason)}")
            return None
        if opcode != OP_BINARY or not payload:
            raise StreamBroken(f"unexpected WebSocket message (opcode {opcode}, {len(payload)} bytes)")
        return self._message(payload)

    def _message(self, payload: bytes) -> bytes:
        channel, body = payload[0], payload[1:]
        if channel not in (DATA, ERROR):
            raise StreamBroken(f"message on channel {channel}; only channels 0 and 1 exist for one port")
        if channel not in self._started:
            announced = int.from_bytes(body[:2], "little") if len(body) >= 2 else None
            if announced != self.port:
                raise StreamBroken(f"channel {channel} announced port {announced}, expected {self.port}")
            self._started.add(channel)
            body = body[2:]
        if channel == ERROR and body:
            raise StreamBroken(f"the API server reported: {printable(body.decode('utf-8', 'replace'), 500).strip()}")
        return body if channel == DATA else b""

    def ping(self) -> None:
        """A ping, unless sending would wait (data is going out, or the server stopped reading)."""
        self.frames.send_control(OP_PING)

    def close(self) -> None:
        """Say goodbye if the socket takes it at once, then shut it (which also wakes a thread blocked reading or
        writing): closing never waits for a server that stopped reading."""
        self.frames.send_control(OP_CLOSE, (1000).to_bytes(2, "big"))
        self.abort()

    def abort(self) -> None:
        try:
            self.ws.abort()
        finally:
            self.ws.shutdown()


def open_port_stream(kube: Kube, namespace: str, pod: str, port: int) -> PortStream:
    """A new stream to ``port`` of ``pod``; refusals are ApiError (403 names ``create pods/portforward``)."""
    action = Action("create", POD_PORTFORWARD, namespace, pod)
    query = [("ports", str(port))]
    try:
        ws = kube.open_websocket(action, POD_PORTFORWARD.path(namespace, pod), query, subprotocols=[V4_CHANNEL])
    except ApiError as exc:
        if exc.status == 403:  # the server's message names the verb and resource apart; say it as RBAC does
            raise ApiError(f"cannot {action.describe()}: {exc.message}", status=403, hint=exc.hint) from None
        raise
    return PortStream(ws, port)
