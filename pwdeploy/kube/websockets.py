"""WebSockets to the API server (RFC 6455), for streaming subresources such as pods/portforward: opened over the
connection ``pwdeploy.kube.transport`` makes from the client's ``Configuration`` (TLS, client certificates, proxy,
as its REST requests), then read and written here frame by frame. Only ``Kube.open_websocket`` opens one, with
``open_websocket``, which converts the errors of websocket-client's handshake; a subprotocol the server answers
that was not offered is an ``ApiError`` raised here, never retried."""

from __future__ import annotations

import os
import select
import struct
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from pwdeploy.kube.answers import printable, without_userinfo
from pwdeploy.kube.api_errors import ApiError, cluster_error
from pwdeploy.kube.http_client import HttpFailure

if TYPE_CHECKING:
    from pwdeploy.kube.resources import Action


class Client(Protocol):
    """What opening a WebSocket needs of ``Kube``: its client, connect timeout, Impersonate-* headers and where."""

    api_client: Any
    timeout: tuple[float, float]
    impersonate: tuple[tuple[str, str], ...]

    def where(self) -> str: ...


def open_websocket(
    kube: Client, action: Action, path: str, query: Sequence[tuple[str, str]], subprotocols: Sequence[str]
) -> Any:
    """``Kube.open_websocket``'s handshake, sent once: websocket-client's refusals and failures as the ``ApiError``
    ``cluster_error`` makes of a refused request; a rewritten Sec-WebSocket-Accept is one that lasts."""
    import websocket

    url, headers = kube.api_client.url(path, query), kube.api_client.headers({})
    try:
        return connect_websocket(
            kube.api_client.configuration,
            url,
            headers,
            subprotocols,
            connect_timeout=kube.timeout[0],
            impersonate=kube.impersonate,
        )
    except websocket.WebSocketBadStatusException as exc:
        body = exc.resp_body.decode("utf-8", "replace") if exc.resp_body else None
        refused = HttpFailure(exc.status_code, exc.status_message or "", body, exc.resp_headers)
        raise cluster_error(refused, action, kube=kube) from None
    except websocket.WebSocketException as exc:
        if str(exc) == "Invalid WebSocket Header":  # websocket-client's words for a wrong Sec-WebSocket-Accept
            raise ApiError(
                f"the API server{kube.where()} answered the WebSocket upgrade to {action.describe()} with a "
                "Sec-WebSocket-Accept that does not match the key sent (RFC 6455 section 4.1)",
                status=101,
                hint="something between you and the API server (a proxy) rewrote the upgrade; kubectl "
                "port-forward refuses it too: check the kubeconfig's server URL and proxy-url",
                lasting=True,
            ) from None
        raise cluster_error(exc, action, kube=kube) from None
    except OSError as exc:
        raise cluster_error(exc, action, kube=kube) from None


def connect_websocket(
    conf: Any,
    url: str,
    headers: Mapping[str, str],
    subprotocols: Sequence[str],
    *,
    connect_timeout: float,
    impersonate: Sequence[tuple[str, str]] = (),
) -> Any:
    """A connected ``websocket.WebSocket`` to ``url`` (http(s):// becomes ws(s)://) that speaks one of
    ``subprotocols``; of ``headers`` only Authorization and User-Agent are sent along, then the ``impersonate``
    headers, each on its own line. Raises websocket-client's exceptions, OSError, or ApiError (TLS, proxy,
    subprotocol)."""
    import websocket

    from pwdeploy.kube.transport import open_socket

    sock = open_socket(conf, url, connect_timeout)
    ws = websocket.WebSocket(enable_multithread=True, skip_utf8_validation=True)
    header = [f"{k}: {v}" for k, v in headers.items() if k.lower() in ("authorization", "user-agent")]
    header += [f"{k}: {v}" for k, v in impersonate]
    if subprotocols:  # sent here, checked below: websocket-client's own check says only "Invalid WebSocket Header"
        header.append(f"Sec-WebSocket-Protocol: {', '.join(subprotocols)}")
    try:
        ws.connect(  # type: ignore[no-untyped-call]
            "ws" + url.removeprefix("http"), socket=sock, header=header, timeout=connect_timeout, suppress_origin=True
        )
        _check_subprotocol(conf, ws, subprotocols)
    except BaseException:
        sock.close()
        raise
    ws.settimeout(None)  # a stream may stay idle for hours; its readers block until data or a close
    return ws


def _check_subprotocol(conf: Any, ws: Any, offered: Sequence[str]) -> None:
    answered = str((ws.getheaders() or {}).get("sec-websocket-protocol") or "").strip()
    if not offered or answered.lower() in (p.lower() for p in offered):
        return
    shown = repr(printable(answered, 100)) if answered else "none"
    raise ApiError(
        f"the API server {without_userinfo(str(conf.host))} answered the WebSocket upgrade with subprotocol {shown}; "
        f"pwdeploy offered {', '.join(offered)}",
        status=101,
        hint="the server (or a proxy in front of it) does not speak this stream protocol; kubectl port-forward "
        "may still work there: please report the server's version",
        lasting=True,
    )


# ---------------------------------------------------------------------------------------------- frames

OP_CONTINUATION, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x2, 0x8, 0x9, 0xA
DATA_OPCODES = frozenset({OP_CONTINUATION, 0x1, OP_BINARY})
CONTROL_OPCODES = frozenset({OP_CLOSE, OP_PING, OP_PONG})
MAX_CONTROL = 125  # RFC 6455 section 5.5: a control frame's payload
MAX_MESSAGE = 16 << 20  # an answer is untrusted: a message claiming more is an error, not an allocation
READ_SIZE = 1 << 20
NUMPY_FROM = 1024  # bytes from which masking goes through numpy (a ping or a close never imports it)

# RFC 6455 section 7.4.1, for messages
CLOSE_CODES = {
    1000: "normal closure",
    1001: "going away",
    1002: "protocol error",
    1003: "unsupported data",
    1007: "invalid data",
    1008: "policy violation",
    1009: "message too big",
    1010: "extension required",
    1011: "internal server error",
    1012: "service restart",
    1013: "try again later",
}


def frame(opcode: int, payload: bytes, key: bytes) -> bytes | bytearray:
    """A final client frame: header, masking ``key`` (4 bytes) and ``payload`` masked with it (RFC 6455 5.3)."""
    n = len(payload)
    if n < 126:
        header = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 1 << 16:
        header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    if n < NUMPY_FROM:
        mask = (key * (n // 4 + 1))[:n]
        body = (int.from_bytes(payload, "little") ^ int.from_bytes(mask, "little")).to_bytes(n, "little")
        return header + key + body
    import numpy as np  # XOR at memory speed: 20x what Python's big integers do, on one thread

    out = bytearray(len(header) + 4 + n)
    start = len(header) + 4
    out[:start] = header + key
    words = n // 4
    np.bitwise_xor(
        np.frombuffer(payload, "<u4", words),
        np.frombuffer(key, "<u4")[0],
        out=np.frombuffer(out, "<u4", words, start),
    )
    for i in range(words * 4, n):
        out[start + i] = payload[i] ^ key[i % 4]
    return out


def close_status(payload: bytes) -> tuple[int | None, str]:
    """The code and (printable) reason of a close frame's payload; (None, "") for an empty one."""
    if not payload:
        return None, ""
    if len(payload) == 1:
        raise FrameError("a close frame with a 1-byte payload (a close code has 2)")
    return int.from_bytes(payload[:2], "big"), printable(payload[2:].decode("utf-8", "replace"), MAX_CONTROL)


def describe_close(code: int, reason: str) -> str:
    """``code 1011 (internal server error): <reason>``."""
    name = CLOSE_CODES.get(code, "application-defined" if code >= 3000 else "not a defined code")
    return f"code {code} ({name})" + (f": {reason}" if reason.strip() else "")


class FrameError(Exception):
    """The server broke the WebSocket framing (RFC 6455 section 5), or closed the connection."""


class Frames:
    """Messages over a connected WebSocket's socket (plain or TLS), read and written here rather than by
    websocket-client, which reads each frame header apart and at most 16 KiB per call, and copies what is left of
    a frame after every partial send. Client frames are masked with a fresh random key (RFC 6455 section 5.3).
    One thread reads while others send (under a lock), as websocket-client's ``enable_multithread`` does."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.sock = ws.sock  # kept: websocket-client forgets its socket once shut down
        self._buffer = bytearray()
        self._send_lock = threading.Lock()
        self.heard = time.monotonic()  # when the last frame arrived
        self.pongs = 0  # answers to pings: once there was one, a missing answer means the connection is gone

    def send(self, opcode: int, payload: bytes) -> None:
        data = frame(opcode, payload, os.urandom(4))
        with self._send_lock:
            self.sock.sendall(data)

    def send_control(self, opcode: int, payload: bytes = b"") -> bool:
        """A small control frame (ping, close) sent without waiting: not while another thread is sending (a
        server that stopped reading holds that thread), and not unless the socket has room for it now (a TLS
        socket takes no MSG_DONTWAIT: its writability is asked first, and only this thread can fill it then).
        Whether it went out."""
        if not self._send_lock.acquire(blocking=False):
            return False
        try:
            data = frame(opcode, payload[:MAX_CONTROL], os.urandom(4))
            poller = select.poll()
            poller.register(self.sock.fileno(), select.POLLOUT)
            if not poller.poll(0):
                return False
            self.sock.sendall(data)
            return True
        except (OSError, ValueError):  # the socket is gone (closed: fileno -1)
            return False
        finally:
            self._send_lock.release()

    def next(self) -> tuple[int, bytes]:
        """(opcode, payload) of the next data message, or (OP_CLOSE, payload) for the server's close."""
        opcode, parts, size = -1, [], 0
        while True:
            final, frame_opcode, payload = self._frame()
            if frame_opcode == OP_PING:
                self.send(OP_PONG, payload)
            elif frame_opcode == OP_CLOSE:
                return OP_CLOSE, payload
            elif frame_opcode == OP_PONG:
                self.pongs += 1
            else:
                if (frame_opcode == OP_CONTINUATION) != (opcode != -1):
                    raise FrameError(f"unexpected frame (opcode {frame_opcode}) in a message")
                opcode = frame_opcode if opcode == -1 else opcode
                size += len(payload)
                if size > MAX_MESSAGE:
                    raise FrameError(f"a message of more than {MAX_MESSAGE} bytes")
                parts.append(payload)
                if final:
                    return opcode, parts[0] if len(parts) == 1 else b"".join(parts)

    def buffered(self) -> bool:
        """Whether a whole one-frame data message has been read already, so that ``next`` returns it without
        waiting for the socket (a control frame first, a ping or a pong, says no: ``next`` would go on reading)."""
        buffer = self._buffer
        if len(buffer) < 2 or not buffer[0] & 0x80 or buffer[0] & 0x7F not in (0x1, OP_BINARY):
            return False
        length, start = buffer[1] & 0x7F, 2
        if length >= 126:
            start = 4 if length == 126 else 10
            if len(buffer) < start:
                return False
            length = int.from_bytes(buffer[2:start], "big")
        return len(buffer) >= start + length

    def _frame(self) -> tuple[bool, int, bytes]:
        self._need(2)
        first, second = self._buffer[0], self._buffer[1]
        final, opcode = bool(first & 0x80), first & 0x0F
        if first & 0x70:  # RFC 6455 section 5.2: no extension was negotiated, so no RSV bit may be set
            raise FrameError(f"a frame with reserved bits set ({first >> 4 & 7:03b}) though no extension was agreed")
        if opcode not in DATA_OPCODES | CONTROL_OPCODES:
            raise FrameError(f"a frame with the reserved opcode {opcode:#x}")
        if second & 0x80:
            raise FrameError("the server masked a frame (only clients mask)")
        length, start = second & 0x7F, 2
        if length >= 126:
            start = 4 if length == 126 else 10
            self._need(start)
            length = int.from_bytes(self._buffer[2:start], "big")
        if opcode in CONTROL_OPCODES and (length > MAX_CONTROL or not final):  # RFC 6455 section 5.5
            what = f"{length} bytes long (at most {MAX_CONTROL})" if length > MAX_CONTROL else "fragmented"
            raise FrameError(f"a control frame (opcode {opcode:#x}) {what}")
        if length > MAX_MESSAGE:
            raise FrameError(f"a frame of {length} bytes (more than {MAX_MESSAGE})")
        self._need(start + length)
        with memoryview(self._buffer) as view:  # one copy (a slice of the bytearray would be a second)
            payload = bytes(view[start : start + length])
        del self._buffer[: start + length]
        self.heard = time.monotonic()
        return final, opcode, payload

    def _need(self, size: int) -> None:
        while len(self._buffer) < size:
            chunk = self.sock.recv(READ_SIZE)
            if not chunk:
                raise FrameError("the API server closed the connection without a WebSocket close")
            self.heard = time.monotonic()  # bytes arriving: a long frame on a slow link is not silence
            self._buffer += chunk
