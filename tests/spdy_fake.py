"""The ``portforward.k8s.io`` protocol over SPDY/3.1, the server's side, as kubectl port-forward speaks it: for the
port-forward fake (tests/portforward_fake.py), so that the same fake serves pwdeploy and kubectl.

It is a stub of what the API server and the kubelet do together (kubelet: staging/src/k8s.io/kubelet/pkg/cri/
streaming/portforward/httpstream.go): kubectl opens two SPDY streams per local connection, with the headers
``streamtype`` (``error`` or ``data``), ``port`` and ``requestid``; once both streams of a request id are there
the pod's port is dialled and the data stream carries its bytes both ways, each end closing its half with FIN; a
failure to dial is text on the error stream. SPDY/3.1 framing (http://www.chromium.org/spdy/spdy-protocol/
spdy-protocol-draft3-1): 8-byte frame headers, name/value header blocks compressed with zlib and the protocol's
preset dictionary (section 2.6.10.1), PING answered, SETTINGS and WINDOW_UPDATE read and ignored (kubectl's
spdystream does not enforce flow-control windows either).

kubectl 1.31 and later carry these SPDY bytes in WebSocket binary messages first (subprotocol
``SPDY/3.1+portforward.k8s.io``, KEP-4006) and fall back to an ``Upgrade: SPDY/3.1`` request: both are served.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import zlib
from collections.abc import Callable
from typing import Protocol

SPDY_WEBSOCKET = "SPDY/3.1+portforward.k8s.io"  # the WebSocket subprotocol that tunnels SPDY (KEP-4006)
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN = 0x01
POD_READ = 32 * 1024  # bytes per data frame, as Go's io.Copy buffer makes them
POD_BATCH = 8 * POD_READ  # bytes read from the pod side at once, then sent as frames of POD_READ in one write

# The SPDY/3 header-compression dictionary (SPDY draft 3, section 2.6.10.1): these names, each with a 4-byte
# big-endian length before it, then the status codes, dates and values below as they are.
_DICTIONARY_WORDS = (
    "options head post put delete trace accept accept-charset accept-encoding accept-language accept-ranges age "
    "allow authorization cache-control connection content-base content-encoding content-language content-length "
    "content-location content-md5 content-range content-type date etag expect expires from host if-match "
    "if-modified-since if-none-match if-range if-unmodified-since last-modified location max-forwards pragma "
    "proxy-authenticate proxy-authorization range referer retry-after server te trailer transfer-encoding upgrade "
    "user-agent vary via warning www-authenticate method get status 200_OK version HTTP/1.1 url public set-cookie "
    "keep-alive origin"
)
_DICTIONARY_NAMES = [word.replace("_", " ") for word in _DICTIONARY_WORDS.split()]  # "200 OK" is one entry
_DICTIONARY_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized"
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable"
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)
DICTIONARY = b"".join(len(word).to_bytes(4, "big") + word.encode() for word in _DICTIONARY_NAMES) + (
    _DICTIONARY_TAIL.encode()
)


class ByteConn(Protocol):
    """A byte stream both ways: the upgraded socket, or WebSocket messages that carry SPDY."""

    def read(self, n: int) -> bytes: ...  # exactly n bytes, or fewer at the end

    def sendall(self, data: bytes) -> None: ...


class SpdyPortForward:
    """One SPDY connection from kubectl: serves its stream pairs until it ends. ``dial(port)`` connects to the pod
    side (or raises OSError with the text the error stream carries); ``on_pair`` is called for each pair."""

    def __init__(self, conn: ByteConn, dial: Callable[[int], socket.socket], on_pair: Callable[[], None]) -> None:
        self.conn, self.dial, self.on_pair = conn, dial, on_pair
        self._inflate = zlib.decompressobj(zdict=DICTIONARY)
        self._deflate = zlib.compressobj(zlib.Z_BEST_COMPRESSION, zlib.DEFLATED, 15, zdict=DICTIONARY)
        self._send_lock = threading.Lock()
        self._pending: dict[str, dict[str, int]] = {}  # requestid -> streamtype -> stream id
        self._ports: dict[str, int] = {}
        self._pods: dict[int, socket.socket] = {}  # data stream id -> pod side

    def serve(self) -> None:
        try:
            while (head := self.conn.read(8)) and len(head) == 8:
                length = int.from_bytes(head[5:8], "big")
                body = self.conn.read(length) if length else b""
                if len(body) < length:
                    return
                if head[0] & 0x80:
                    self._control(int.from_bytes(head[2:4], "big"), body)
                else:
                    self._data(int.from_bytes(head[0:4], "big") & 0x7FFFFFFF, head[4], body)
        except (OSError, zlib.error):
            pass  # kubectl went away
        finally:
            for pod in list(self._pods.values()):
                with contextlib.suppress(OSError):
                    pod.close()

    # -------------------------------------------------------------------------------------------- frames out

    def _send_control(self, kind: int, flags: int, body: bytes) -> None:
        self.conn.sendall(struct.pack("!HHI", 0x8003, kind, flags << 24 | len(body)) + body)

    def _send_data(self, stream: int, data: bytes, *, fin: bool = False) -> None:
        """``data`` in frames of at most POD_READ bytes, the last one with ``fin``, all in one write."""
        parts: list[bytes | memoryview] = []
        with memoryview(data) as view:
            for offset in range(0, max(len(data), 1), POD_READ):
                piece = view[offset : offset + POD_READ]
                last = fin and offset + POD_READ >= len(data)
                parts += (struct.pack("!II", stream, (FLAG_FIN if last else 0) << 24 | len(piece)), piece)
            joined = b"".join(parts)
        with self._send_lock:
            self.conn.sendall(joined)

    def _reply(self, stream: int) -> None:
        block = self._deflate.compress(b"\x00\x00\x00\x00") + self._deflate.flush(zlib.Z_SYNC_FLUSH)  # no headers
        with self._send_lock:  # the compressor's state is shared by every block this side sends, in order
            self._send_control(SYN_REPLY, 0, stream.to_bytes(4, "big") + block)

    # -------------------------------------------------------------------------------------------- frames in

    def _control(self, kind: int, body: bytes) -> None:
        if kind == SYN_STREAM:
            self._syn_stream(int.from_bytes(body[0:4], "big") & 0x7FFFFFFF, self._headers(body[10:]))
        elif kind == PING:
            with self._send_lock:
                self._send_control(PING, 0, body[:4])
        elif kind == RST_STREAM:
            pod = self._pods.pop(int.from_bytes(body[0:4], "big") & 0x7FFFFFFF, None)
            if pod is not None:
                with contextlib.suppress(OSError):
                    pod.shutdown(socket.SHUT_RDWR)
        elif kind == HEADERS:
            self._headers(body[4:])  # read (the decompressor's state moves on), not needed
        elif kind == GOAWAY:
            raise ConnectionAbortedError("kubectl said goodbye")
        # SETTINGS, WINDOW_UPDATE: nothing to do

    def _headers(self, block: bytes) -> dict[str, str]:
        data = self._inflate.decompress(block)
        count, offset, headers = int.from_bytes(data[0:4], "big"), 4, {}
        for _ in range(count):
            size = int.from_bytes(data[offset : offset + 4], "big")
            name = data[offset + 4 : offset + 4 + size].decode()
            offset += 4 + size
            size = int.from_bytes(data[offset : offset + 4], "big")
            headers[name.lower()] = data[offset + 4 : offset + 4 + size].decode()
            offset += 4 + size
        return headers

    def _syn_stream(self, stream: int, headers: dict[str, str]) -> None:
        self._reply(stream)
        request = headers.get("requestid", "")
        pair = self._pending.setdefault(request, {})
        pair[headers.get("streamtype", "")] = stream
        self._ports[request] = int(headers.get("port") or 0)
        if "error" in pair and "data" in pair:
            del self._pending[request]
            self.on_pair()
            self._start(pair["data"], pair["error"], self._ports.pop(request))

    def _start(self, data_stream: int, error_stream: int, port: int) -> None:
        try:
            pod = self.dial(port)
        except OSError as exc:
            self._send_data(error_stream, str(exc).encode(), fin=True)
            self._send_data(data_stream, b"", fin=True)
            return
        self._pods[data_stream] = pod
        threading.Thread(target=self._pod_to_kubectl, args=(pod, data_stream, error_stream), daemon=True).start()

    def _data(self, stream: int, flags: int, data: bytes) -> None:
        pod = self._pods.get(stream)
        if pod is None:
            return  # the error stream (kubectl writes nothing there) or a stream already gone
        with contextlib.suppress(OSError):
            if data:
                pod.sendall(data)
            if flags & FLAG_FIN:
                pod.shutdown(socket.SHUT_WR)

    def _pod_to_kubectl(self, pod: socket.socket, data_stream: int, error_stream: int) -> None:
        with contextlib.suppress(OSError):
            while data := pod.recv(POD_BATCH):
                self._send_data(data_stream, data)
            self._send_data(data_stream, b"", fin=True)
            self._send_data(error_stream, b"", fin=True)
        self._pods.pop(data_stream, None)
        with contextlib.suppress(OSError):
            pod.close()
