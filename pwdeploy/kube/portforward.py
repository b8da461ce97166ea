"""Local TCP connections forwarded to a pod's port through the API server's pods/portforward subresource.

Each stream is one WebSocket to the port (pwdeploy.kube.port_stream).

Each accepted local connection gets its own stream, so a stream that breaks (an idle timeout on the way, an API
server restart, a reset) costs that connection only: its local socket is closed, which a gRPC client answers by
reconnecting, and the new connection opens a new stream. A stream that fails to open, or broke, makes the next
open wait with backoff, and each failure is one line on ``notify``. (The official client's own helper,
``kubernetes.stream.portforward``, runs one thread per WebSocket whose ``select`` loop dies on a reset and leaves
the local socket open, so the program on it hangs; tests/test_connect.py shows it.)
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pwdeploy.kube.handoff import Handoff
from pwdeploy.kube.port_stream import COALESCE, PortStream, StreamBroken
from pwdeploy.kube.seam import ApiError, RetryPolicy, stream_retryable

CHUNK = 64 * 1024  # bytes read from the local socket per message (larger ones mask slower: cache)
DELIVERY_LIMIT = 2 * COALESCE  # bytes read from a stream that may wait for the local program
DIRECT = 16 * 1024  # bytes the stream's reader writes to the local program itself when nothing else waits
OPEN_RETRY = RetryPolicy(attempts=5, base_delay=0.5, max_delay=8.0)
KEEPALIVE_S = 30.0


@dataclass
class Forwarder:
    """Accepts connections on ``listener`` and gives each a stream from ``open_stream``, in threads of its own."""

    listener: socket.socket
    open_stream: Callable[[], PortStream]
    notify: Callable[[str], None]
    target: str  # "pod/NAME:PORT", for messages
    sleep: Callable[[float], None]
    retry: RetryPolicy = OPEN_RETRY
    keepalive: float = KEEPALIVE_S  # seconds between pings on every stream (0: none)
    connections: int = 0  # accepted so far
    _failures: int = 0  # streams that failed to open or broke since the last one that ended cleanly
    _links: set[Link] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopped: threading.Event = field(default_factory=threading.Event)

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    def start(self) -> Forwarder:
        self.listener.settimeout(0.25)  # accept() wakes up this often to see whether close() was called
        threading.Thread(target=self._accept, name="pwdeploy-forward-accept", daemon=True).start()
        if self.keepalive > 0:
            threading.Thread(target=self._ping, name="pwdeploy-forward-ping", daemon=True).start()
        return self

    def _ping(self) -> None:
        """Pings keep idle streams alive through NATs and load balancers, and a stream whose server stopped
        answering them is ended, so the program on it reconnects instead of hanging."""
        while not self._stopped.wait(self.keepalive):
            with self._lock:
                links = list(self._links)
            for link in links:
                link.ping(silent_after=2 * self.keepalive)

    def close(self) -> None:
        self._stopped.set()
        with self._lock:
            links = list(self._links)
        for link in links:
            link.end(quiet=True)
        self.listener.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if self._stopped.is_set():
                    return  # the listener was closed
                self.notify(f"cannot accept a local connection ({exc}); trying again")  # e.g. out of descriptors
                self._stopped.wait(1.0)
                continue
            with self._lock:
                self.connections += 1
                number = self.connections
            threading.Thread(
                target=self._serve, args=(conn, number), name=f"pwdeploy-forward-{number}", daemon=True
            ).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        try:
            self._link(conn, number)
        except Exception as exc:  # never a traceback from a connection's thread, never a client left hanging
            self.notify(f"connection {number}: ended by an error in pwdeploy ({type(exc).__name__}: {exc})")
            with contextlib.suppress(OSError):
                conn.close()

    def _link(self, conn: socket.socket, number: int) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        stream = self._open(number)
        if stream is None or self._stopped.is_set():
            conn.close()
            if stream is not None:
                stream.close()
            return
        link = Link(conn, stream, on_break=lambda reason: self._broke(number, reason))
        with self._lock:
            self._links.add(link)
        try:
            if link.run():
                with self._lock:
                    self._failures = 0
        finally:
            with self._lock:
                self._links.discard(link)

    def _broke(self, number: int, reason: str) -> None:
        """Counted before the local connection closes, so the program's reconnection already backs off."""
        with self._lock:
            self._failures += 1
        if not self._stopped.is_set():
            self.notify(
                f"connection {number} to {self.target}: the stream broke off ({reason}); its local connection "
                "is closed, the next connection opens a new stream"
            )

    def _open(self, number: int) -> PortStream | None:
        """A stream for connection ``number``: after earlier failures it waits first; transient failures are
        retried with backoff, each said on ``notify``. None when it gave up."""
        with self._lock:
            failures = self._failures
        if failures:
            delay = self.retry.delay(failures)
            self.notify(f"connection {number}: the last stream failed; opening a new one in {delay:.1f} s")
            self.sleep(delay)
        for attempt in range(1, self.retry.attempts + 1):
            try:
                return self.open_stream()
            except ApiError as exc:
                with self._lock:
                    self._failures += 1
                if not stream_retryable(exc) or attempt == self.retry.attempts or self._stopped.is_set():
                    self.notify(f"connection {number}: no stream to {self.target}, closing it: {exc}")
                    return None
                delay = self.retry.delay(attempt)
                self.notify(
                    f"connection {number}: no stream to {self.target} yet ({exc.message}); "
                    f"retrying in {delay:.1f} s (attempt {attempt + 1} of {self.retry.attempts})"
                )
                self.sleep(delay)
        return None


class Link:
    """One local connection joined to one stream, one teardown: a thread sends what the local program writes, and
    two carry what the pod sends, one reading the stream and one writing the local connection, so that reading
    (system calls and decryption, which release the GIL) and writing overlap, with at most DELIVERY_LIMIT bytes
    waiting between them."""

    def __init__(self, conn: socket.socket, stream: PortStream, *, on_break: Callable[[str], None]) -> None:
        self.conn = conn
        self.stream = stream
        self.on_break = on_break
        self._ended = threading.Lock()
        self._quiet = False  # ended on purpose (local side closed, forwarder closing): not a break
        self._silent = False  # ended because the server stopped answering pings (already told)
        self._delivering = False  # writing what arrived to the local program
        self._arrived = Handoff(DELIVERY_LIMIT)

    def ping(self, *, silent_after: float) -> None:
        frames = self.stream.frames
        if self._delivering or self._arrived.waiting():  # the local program is slow to read: the stream is
            frames.heard = time.monotonic()  # not silent, it waits on it (its reader stopped reading)
        if frames.pongs and time.monotonic() - frames.heard > silent_after:
            self._silent = True
            self.on_break(f"no answer to WebSocket pings for {silent_after:g} s")
            self.end(quiet=True)
            return
        with contextlib.suppress(OSError):
            self.stream.ping()

    def run(self) -> bool:
        """Pump both ways until either side ends; whether it ended normally (``on_break`` was told otherwise,
        before the local connection closed)."""
        threads = [
            threading.Thread(target=self._upstream, name="pwdeploy-forward-up", daemon=True),
            threading.Thread(target=self._downstream, name="pwdeploy-forward-down", daemon=True),
        ]
        for thread in threads:
            thread.start()
        try:
            return self._deliver()
        finally:
            self._arrived.close()  # a reader waiting for room gives up
            self.end(quiet=True)
            for thread in threads:
                thread.join(timeout=5)

    def _deliver(self) -> bool:
        """What the stream brought, written to the local connection; whether the stream ended normally."""
        try:
            while data := self._next_arrived():
                try:
                    self._write(data)
                finally:
                    self._arrived.release()
            self._shut_local_writes()  # the pod side closed: pass the end of data on, then close
        except StreamBroken as exc:
            if not self._quiet:
                self.on_break(str(exc))
                return False
        except OSError:
            pass  # the local program went away while data was arriving
        return not self._silent

    def _next_arrived(self) -> bytes:
        """Bytes to write (then ``release``), b"" at the stream's end; what ended it otherwise, raised."""
        item = self._arrived.get()
        if isinstance(item, bytes) and item:
            return item
        self._arrived.release()
        if isinstance(item, BaseException):
            raise item
        return b""

    def _downstream(self) -> None:
        """Reads the stream until it ends: its bytes, then b"" (the server closed it) or the exception that
        ended it (StreamBroken, or an error in pwdeploy, raised again by the writing thread)."""
        try:
            while data := self.stream.recv():
                if len(data) <= DIRECT and self._arrived.claim():  # a small message, nothing queued: written
                    try:  # at once, without waking the other thread (a round trip's latency)
                        self._write(data)
                    finally:
                        self._arrived.release()
                elif not self._arrived.put(data):
                    return
        except Exception as exc:  # a local write failing (OSError) is handled as there
            self._arrived.put(exc)
            return
        self._arrived.put(b"")

    def _write(self, data: bytes) -> None:
        self._delivering = True
        self.conn.sendall(data)
        self._delivering = False

    def _upstream(self) -> None:
        try:
            while data := self.conn.recv(CHUNK):
                self.stream.send(data)
        except Exception:  # a failed send: the downstream side sees the same failure and reports it
            return
        self.end(quiet=True)  # the local program closed its connection

    def _shut_local_writes(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.shutdown(socket.SHUT_WR)

    def end(self, *, quiet: bool) -> None:
        """Close both sides once; ``quiet``: whatever error this causes on the other thread is not a break."""
        if not self._ended.acquire(blocking=False):
            return
        self._quiet = quiet
        self.stream.close()
        with contextlib.suppress(OSError):
            self.conn.shutdown(socket.SHUT_RDWR)
        self.conn.close()
