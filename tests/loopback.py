"""LoopbackServer: the one loopback server under the test suite's stubs, fakes and stand-ins.

It listens on 127.0.0.1 on a free port from the moment it is made (so its URL can go into a kubeconfig before it
serves), serves from a daemon thread once started, one daemon thread per connection, and stops cleanly: the serving
loop is shut down and joined and the listening socket closed (connections still open end with their clients).
Every accepted connection has TCP_NODELAY set, as Go's net package does. With ``tls`` (a server context, such as
``tests.tls.session_pki().server_context()``) each connection's TLS handshake runs in its own thread. Clients that
hang up (a test's timeout, a body read only in part) or refuse the certificate (a test of a wrong CA) are no error
of the server's.

``handler`` is a ``socketserver`` handler class: a ``BaseHTTPRequestHandler`` subclass for an HTTP server, or
``per_connection(serve)`` for a raw TCP one whose ``serve(conn)`` runs once per connection.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import ssl
import sys
import threading
from collections.abc import Callable
from typing import Any, Self

POLL_S = 0.02  # how often the serving loop looks for shutdown


class _QuietServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    request_queue_size = 128  # a burst of connections (concurrent requests, kubectl's streams) waits in the backlog
    tls: ssl.SSLContext | None = None

    def get_request(self) -> tuple[Any, Any]:
        sock, address = super().get_request()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is not None:
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address

    def finish_request(self, request: Any, client_address: Any) -> None:
        if isinstance(request, ssl.SSLSocket):
            request.settimeout(10)
            request.do_handshake()
            request.settimeout(None)
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (ConnectionError, ssl.SSLError, TimeoutError)):
            super().handle_error(request, client_address)


class LoopbackServer:
    def __init__(self, handler: type[socketserver.BaseRequestHandler], *, tls: ssl.SSLContext | None = None) -> None:
        self._server = _QuietServer(("127.0.0.1", 0), handler)
        self._server.tls = tls
        self._thread = threading.Thread(target=self._server.serve_forever, args=(POLL_S,), daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def port(self) -> int:
        return self.address[1]

    @property
    def netloc(self) -> str:
        """``127.0.0.1:PORT``."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{'https' if self._server.tls is not None else 'http'}://{self.netloc}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket; also for a server never started, and more than once."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def per_connection(serve: Callable[[socket.socket], None]) -> type[socketserver.BaseRequestHandler]:
    """A handler that runs ``serve(conn)`` on each accepted connection, which closes when it returns; an OSError
    in it is the client gone."""

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            with contextlib.suppress(OSError):
                serve(self.request)

    return Handler
