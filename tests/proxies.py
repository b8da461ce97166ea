"""Loopback proxies for tests: HttpConnectProxy (HTTP CONNECT, RFC 9110 section 9.3.6) and Socks5Proxy (RFC 1928,
with RFC 1929 user/password when ``credentials`` is set). Stubs: they tunnel to whatever is asked (loopback only in
these tests), count the tunnels and record the targets and Proxy-Authorization headers they saw."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Self

from tests.loopback import LoopbackServer, per_connection


class _Proxy:
    def __init__(self) -> None:
        self.targets: list[str] = []  # "host:port" of every tunnel opened
        self.authorizations: list[str | None] = []
        self._server = LoopbackServer(per_connection(self._run))
        self.port = self._server.port

    def __enter__(self) -> Self:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()

    def _run(self, conn: socket.socket) -> None:
        upstream = self.open(conn)
        if upstream is not None:
            with upstream:
                _pipe(conn, upstream)

    def open(self, conn: socket.socket) -> socket.socket | None:
        raise NotImplementedError


def _pipe(a: socket.socket, b: socket.socket) -> None:
    def copy(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(1 << 16):
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)

    other = threading.Thread(target=copy, args=(b, a), daemon=True)
    other.start()
    copy(a, b)
    other.join()


def _exactly(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n and (more := conn.recv(n - len(data))):
        data += more
    return data


class HttpConnectProxy(_Proxy):
    """``refuse``: answer every CONNECT with this status line instead of tunnelling."""

    def __init__(self, refuse: str | None = None) -> None:
        super().__init__()
        self.refuse = refuse

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def open(self, conn: socket.socket) -> socket.socket | None:
        head = b""
        while b"\r\n\r\n" not in head and (data := conn.recv(4096)):
            head += data
        request, *lines = head.decode("latin-1").split("\r\n")
        method, target, _ = request.split(" ", 2)
        auth = [line.split(":", 1)[1].strip() for line in lines if line.lower().startswith("proxy-authorization:")]
        self.authorizations.append(auth[0] if auth else None)
        if method != "CONNECT" or self.refuse is not None:
            conn.sendall(f"HTTP/1.1 {self.refuse or '405 Method Not Allowed'}\r\nContent-Length: 0\r\n\r\n".encode())
            return None
        self.targets.append(target)
        host, _, port = target.rpartition(":")
        upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=5)
        upstream.settimeout(None)
        conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        return upstream


class Socks5Proxy(_Proxy):
    def __init__(self, credentials: tuple[str, str] | None = None) -> None:
        super().__init__()
        self.credentials = credentials

    def url(self, scheme: str = "socks5") -> str:
        user = f"{self.credentials[0]}:{self.credentials[1]}@" if self.credentials else ""
        return f"{scheme}://{user}127.0.0.1:{self.port}"

    def open(self, conn: socket.socket) -> socket.socket | None:
        _, count = _exactly(conn, 2)
        methods = _exactly(conn, count)
        wanted = 2 if self.credentials else 0
        if wanted not in methods:
            conn.sendall(b"\x05\xff")
            return None
        conn.sendall(bytes((5, wanted)))
        if self.credentials:
            _, size = _exactly(conn, 2)
            user = _exactly(conn, size).decode()
            password = _exactly(conn, _exactly(conn, 1)[0]).decode()
            self.authorizations.append(f"{user}:{password}")
            ok = (user, password) == self.credentials
            conn.sendall(b"\x01\x00" if ok else b"\x01\x01")
            if not ok:
                return None
        _, _, _, kind = _exactly(conn, 4)
        if kind == 3:
            host = _exactly(conn, _exactly(conn, 1)[0]).decode()
        else:
            host = socket.inet_ntop(
                socket.AF_INET if kind == 1 else socket.AF_INET6, _exactly(conn, 4 if kind == 1 else 16)
            )
        port = int.from_bytes(_exactly(conn, 2), "big")
        self.targets.append(f"{host}:{port}")
        upstream = socket.create_connection((host, port), timeout=5)
        upstream.settimeout(None)
        conn.sendall(b"\x05\x00\x00\x01" + bytes(4) + bytes(2))
        return upstream
