"""TLS over a plain socket through ``ssl.MemoryBIO``, for a stream that one thread reads while others write.

An ``ssl.SSLSocket`` is one OpenSSL object that a reading and a writing thread would use at once (OpenSSL does not
allow that: its ``SSL`` objects are not thread-safe), reads at most one TLS record (16 KiB) per system call, and
takes no ``MSG_DONTWAIT``. Here the TLS state is touched only under a lock, for memory-only work (encrypting,
decrypting); the socket's reads and writes happen outside it, a read taking whatever the kernel holds (up to
``READ_SIZE``) in one call, and ciphertext goes out in the order it was made. It has the socket methods the
WebSocket code and websocket-client's handshake use: ``recv``, ``send``, ``sendall``, ``fileno``, ``settimeout``,
``gettimeout``, ``shutdown``, ``close``."""

from __future__ import annotations

import socket
import ssl
import threading

READ_SIZE = 1 << 20


class TlsStream:
    """A client TLS connection over ``sock`` (connected), handshaken on construction; ssl.SSLError or OSError
    when the handshake fails."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, server_hostname: str) -> None:
        self.raw = sock
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_hostname=server_hostname)
        self._tls_lock = threading.Lock()  # one call into the TLS state at a time
        self._send_lock = threading.Lock()  # ciphertext is taken out and sent in one piece, in order
        self._handshake()

    def _handshake(self) -> None:
        while True:
            try:
                with self._tls_lock:
                    self._tls.do_handshake()
                self._flush()
                return
            except ssl.SSLWantReadError:
                self._flush()
                if not self._fill():
                    raise ssl.SSLEOFError("the server closed the connection during the TLS handshake") from None

    def _flush(self) -> None:
        with self._send_lock:
            with self._tls_lock:
                data = self._outgoing.read()
            if data:
                self.raw.sendall(data)

    def _fill(self) -> bool:
        """Ciphertext from the socket into the TLS state (blocking); False at the end of the connection."""
        data = self.raw.recv(READ_SIZE)
        if not data:
            return False
        with self._tls_lock:
            self._incoming.write(data)
        return True

    def recv(self, size: int) -> bytes:
        """Up to ``size`` bytes: all that is decrypted already, else what the next read brings; b"" at the end
        (an end without TLS close_notify included, as SSLSocket's ``suppress_ragged_eofs``)."""
        while True:
            data, ended = self._decrypted(size)
            if data or ended:
                return data
            if self._outgoing.pending:  # TLS 1.3 messages the read answered (a key update)
                self._flush()
            if not self._fill():
                return b""

    def _decrypted(self, size: int) -> tuple[bytes, bool]:
        chunks: list[bytes] = []
        total = 0
        with self._tls_lock:
            while total < size:
                try:
                    chunk = self._tls.read(size - total)
                except ssl.SSLWantReadError:
                    break
                except ssl.SSLZeroReturnError:  # the server's close_notify
                    return b"".join(chunks), True
                chunks.append(chunk)
                total += len(chunk)
        return b"".join(chunks), False

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        with self._send_lock:
            with self._tls_lock:
                self._tls.write(data)
                ciphertext = self._outgoing.read()
            self.raw.sendall(ciphertext)

    def send(self, data: bytes | bytearray | memoryview) -> int:
        self.sendall(data)
        return len(data)

    def fileno(self) -> int:
        return self.raw.fileno()

    def settimeout(self, timeout: float | None) -> None:
        self.raw.settimeout(timeout)

    def gettimeout(self) -> float | None:
        return self.raw.gettimeout()

    def shutdown(self, how: int) -> None:
        self.raw.shutdown(how)

    @property
    def _closed(self) -> bool:
        """Read by websocket-client's ``shutdown()``, which closes only a socket not closed yet (and, without this,
        skips the close on the AttributeError: the socket would be left open)."""
        return bool(getattr(self.raw, "_closed", False))

    def close(self) -> None:
        self.raw.close()
