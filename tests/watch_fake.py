"""WatchFake: a loopback HTTPS server that answers a list of pods and its watches, each watch as a test scripts it,
for what the real control plane (tests/control_plane, tests/test_control_plane_watch.py) cannot do on demand:
answer the watch request itself with 410 Gone (kube-apiserver 1.35 answers a resourceVersion it no longer keeps
with an ``ERROR`` event, which the real tests show), fall silent, send an event larger than the bound, of the wrong
shape, or one trickling in, and end a stream inside an event.

What it sends is what the real one sends for a watch (k8s.io/apiserver pkg/endpoints/handlers/watch.go): 200 with
``Content-Type: application/json`` and ``Transfer-Encoding: chunked``, one JSON object ``{"type", "object"}`` a line,
objects with ``kind``, ``apiVersion`` and ``metadata.resourceVersion``, bookmarks with only the version. Like the
real one it refuses a watch that does not name a resourceVersion it can serve from (``resourceVersion`` missing
or not a number: 400), and ``timeoutSeconds`` that is not a number. Every request is recorded (path and query).
"""

from __future__ import annotations

import json
import queue
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, Literal, Self
from urllib.parse import parse_qs, urlsplit

from tests.loopback import LoopbackServer

Ending = Literal["close", "drop", "hang"]  # the server's end of the stream (timeoutSeconds), a cut, silence


@dataclass
class Script:
    """One watch's answer: ``status`` (not 200: a Status of that code instead of a stream), the ``lines`` sent
    (bytes as they are, or an event as a dict), each after ``pause`` seconds, then the ``ending``."""

    lines: list[bytes | dict[str, Any]] = field(default_factory=list)
    ending: Ending = "close"
    status: int = 200
    pause: float = 0.0


def pod(name: str, version: int, phase: str = "Pending") -> dict[str, Any]:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": str(version)},
        "spec": {"containers": [{"name": "main"}]},
        "status": {"phase": phase},
    }


def event(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": obj}


def bookmark(version: int) -> dict[str, Any]:
    return event("BOOKMARK", {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": str(version)}})


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}  # fmt: skip


class WatchFake:
    def __init__(self) -> None:
        from tests.tls import session_pki

        pki = session_pki()
        self.ca_pem = pki.ca_pem
        self.pods: list[dict[str, Any]] = []  # what a list answers
        self.version = 100  # the list's resourceVersion
        self.scripts: queue.Queue[Script] = queue.Queue()  # one per watch request, in order
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        self._stopping = threading.Event()
        self._server = LoopbackServer(self._handler(), tls=pki.server_context())

    @property
    def url(self) -> str:
        return self._server.url

    def watches(self) -> list[dict[str, list[str]]]:
        return [q for _, q in self.requests if q.get("watch") == ["true"]]

    def lists(self) -> list[dict[str, list[str]]]:
        return [q for _, q in self.requests if q.get("watch") != ["true"]]

    def write_kubeconfig(self, path: Any) -> Any:
        import base64

        import yaml

        cluster = {"server": self.url, "certificate-authority-data": base64.b64encode(self.ca_pem).decode()}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": cluster}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u", "namespace": "default"}}],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def __enter__(self) -> Self:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._server.stop()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = parse_qs(parts.query)
                fake.requests.append((parts.path, query))
                if query.get("watch") == ["true"]:
                    fake._watch(self, query)
                else:
                    meta = {"resourceVersion": str(fake.version)}
                    fake._send(self, 200, {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": fake.pods})

        return Handler

    def _send(self, h: BaseHTTPRequestHandler, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _watch(self, h: BaseHTTPRequestHandler, query: dict[str, list[str]]) -> None:
        version = (query.get("resourceVersion") or [""])[0]
        timeout = (query.get("timeoutSeconds") or ["0"])[0]
        if not version.isdigit() or not timeout.isdigit():
            self._send(h, 400, status(400, "BadRequest", f"invalid resource version or timeout: {version!r}"))
            return
        script = self.scripts.get(timeout=5)
        if script.status != 200:
            self._send(h, script.status, status(script.status, "Expired", "too old resource version"))
            return
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        for line in script.lines:
            if script.pause and self._stopping.wait(script.pause):
                return
            data = line if isinstance(line, bytes) else json.dumps(line).encode() + b"\n"
            h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            h.wfile.flush()
        if script.ending == "close":
            h.wfile.write(b"0\r\n\r\n")
        elif script.ending == "hang":
            self._stopping.wait()
        h.close_connection = True
