"""Opening a WebSocket to the API server with the TLS, client-certificate and proxy settings of the client's
``Configuration`` (what the official client's own stream helper reads, so a kubeconfig that works for requests
works for streams). Only ``Kube.open_websocket`` calls this: errors are converted there."""

from __future__ import annotations

import os
import socket
import ssl
import struct
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit


def ssl_options(conf: Any) -> dict[str, Any]:
    """websocket-client's ``sslopt`` from a kubernetes ``Configuration``."""
    options: dict[str, Any] = {"cert_reqs": ssl.CERT_REQUIRED if conf.verify_ssl else ssl.CERT_NONE}
    for key, value in (
        ("ca_certs", conf.ssl_ca_cert),
        ("certfile", conf.cert_file),
        ("keyfile", conf.key_file),
        ("server_hostname", getattr(conf, "tls_server_name", None)),
    ):
        if value:
            options[key] = value
    if conf.verify_ssl and conf.assert_hostname is not None:
        options["check_hostname"] = bool(conf.assert_hostname)
    return options


def connect_websocket(
    conf: Any, url: str, headers: Mapping[str, str], subprotocols: Sequence[str], *, connect_timeout: float
) -> Any:
    """A connected ``websocket.WebSocket`` to ``url`` (http(s):// becomes ws(s)://); only the Authorization
    header is sent along. Raises websocket-client's exceptions or OSError."""
    import websocket

    ws = websocket.WebSocket(sslopt=ssl_options(conf), enable_multithread=True)
    options: dict[str, Any] = {
        "header": [f"{k}: {v}" for k, v in headers.items() if k.lower() == "authorization"],
        "subprotocols": list(subprotocols),
        "timeout": connect_timeout,
    }
    if conf.proxy:
        proxy = urlsplit(conf.proxy)
        options |= {"http_proxy_host": proxy.hostname, "http_proxy_port": proxy.port, "proxy_type": "http"}
    ws.connect("ws" + url.removeprefix("http"), **options)  # type: ignore[no-untyped-call]
    ws.settimeout(None)  # a stream may stay idle for hours; its readers block until data or a close
    return ws


# ---------------------------------------------------------------------------------------------- reading

OP_CONTINUATION, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x2, 0x8, 0x9, 0xA
MAX_MESSAGE = 16 << 20  # an answer is untrusted: a message claiming more is an error, not an allocation
READ_SIZE = 1 << 20


MASK_PIECE = 16 << 10  # XOR as big integers of this size: 2-3x faster than one integer per 256 KiB message


def masked(payload: bytes, key: bytes) -> list[bytes]:
    """``payload`` XOR the repeated 4-byte ``key``, in pieces (their offsets are multiples of 4, so each piece
    starts at the key's first byte)."""
    whole = key * (MASK_PIECE // 4)
    whole_key = int.from_bytes(whole, "little")
    view = memoryview(payload)
    pieces = []
    for offset in range(0, len(payload), MASK_PIECE):
        piece = view[offset : offset + MASK_PIECE]
        n = len(piece)
        mask = whole_key if n == MASK_PIECE else int.from_bytes(whole[:n], "little")
        pieces.append((int.from_bytes(piece, "little") ^ mask).to_bytes(n, "little"))
    return pieces


class FrameError(Exception):
    """The server broke the WebSocket framing (RFC 6455 section 5), or closed the connection."""


class Frames:
    """Messages over a connected WebSocket's socket, read and written here rather than by websocket-client,
    which reads each frame header apart and at most 16 KiB per call, and copies what is left of a frame after
    every partial send. Client frames are masked with a fresh random key (RFC 6455 section 5.3)."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.sock = ws.sock  # kept: websocket-client forgets its socket once shut down
        self._buffer = bytearray()
        self._send_lock = threading.Lock()
        self.heard = time.monotonic()  # when the last frame arrived
        self.pongs = 0  # answers to pings: once there was one, a missing answer means the connection is gone

    def send(self, opcode: int, payload: bytes) -> None:
        n = len(payload)
        if n < 126:
            header = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
        elif n < 1 << 16:
            header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
        key = os.urandom(4)
        with self._send_lock:
            self.sock.sendall(b"".join((header, key, *masked(payload, key))))

    def send_control(self, opcode: int, payload: bytes = b"") -> bool:
        """A small control frame (ping, close) sent without waiting: not while another thread is sending (a
        server that stopped reading holds that thread), and not if the socket cannot take it at once. Whether it
        went out whole."""
        if not self._send_lock.acquire(blocking=False):
            return False
        try:
            key = os.urandom(4)
            frame = b"".join((struct.pack("!BB", 0x80 | opcode, 0x80 | len(payload)), key, *masked(payload, key)))
            return bool(self.sock.send(frame, socket.MSG_DONTWAIT) == len(frame))
        except OSError:  # would block, or the socket is gone
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

    def _frame(self) -> tuple[bool, int, bytes]:
        self._need(2)
        first, second = self._buffer[0], self._buffer[1]
        if second & 0x80:
            raise FrameError("the server masked a frame (only clients mask)")
        length, start = second & 0x7F, 2
        if length >= 126:
            start = 4 if length == 126 else 10
            self._need(start)
            length = int.from_bytes(self._buffer[2:start], "big")
        if length > MAX_MESSAGE:
            raise FrameError(f"a frame of {length} bytes (more than {MAX_MESSAGE})")
        self._need(start + length)
        payload = bytes(self._buffer[start : start + length])
        del self._buffer[: start + length]
        self.heard = time.monotonic()
        return bool(first & 0x80), first & 0x0F, payload

    def _need(self, size: int) -> None:
        while len(self._buffer) < size:
            chunk = self.sock.recv(READ_SIZE)
            if not chunk:
                raise FrameError("the API server closed the connection without a WebSocket close")
            self.heard = time.monotonic()  # bytes arriving: a long frame on a slow link is not silence
            self._buffer += chunk
