"""StubKubeApiServer: a loopback HTTP server (tests/loopback.py) that answers the Kubernetes API paths pwdeploy
uses.

It serves HTTPS by default, as a GKE control plane does: a certificate from the test session's throwaway CA
(tests/tls.py), which ``write_kubeconfig`` hands to the client as ``certificate-authority-data``; a client
certificate from that CA authenticates as its CN, as the API server's x509 authenticator does. ``tls=False`` is
plain http, for a test that asks for it.

It is a stub, not an API server: no controllers, no admission webhooks, label selectors of the form ``k=v,k2=v2``
only, and no watch: a watch is refused as it is for an identity whose Role lacks the ``watch`` verb (403; access
reviews still allow it), so the commands that wait list again at each look instead, as they do there (watches are
tested on the real control plane and, for what it cannot do on demand, against tests/watch_fake.py). What it does
do like a real server: the real paths (discovery, ``/version``, jobsets with server-side apply and ``dryRun=All``,
namespaces, nodes, pods and their logs, events, secrets (metadata-only reads), the pods of every namespace, Kueue
localqueues (and, read-only, clusterqueues, admissionchecks and provisioningrequestconfigs), the JobSet
CustomResourceDefinition, SelfSubjectAccessReviews answered from the same forbidden rules as every other request),
bearer-token authentication, and the real error shapes (``Status`` objects for 401/403/404/409/422/5xx). Every
request is recorded so tests can assert what the official client actually sent; ``latency`` delays every answer,
to measure what concurrent requests save. Faults can be injected: an error status (``fail``), any body in place of
the real answer (``answer``: an HTML page, JSON of the wrong shape, a body cut off mid-way) and no answer at all
until the stub stops (``hang``).

By role: this module is the server (TLS, recording, faults, authentication's 401, a kubeconfig for it);
tests/kube_routes.py the paths it serves; tests/kube_store.py its objects and what the API server does with them;
tests/kube_access.py who may do what; tests/kube_answers.py the request and answer shapes. Where the real control
plane can serve the same request, tests/test_control_plane_stub_shapes.py holds the stub's answers to its answers.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

import yaml

from tests.kube_answers import ACCESS_REVIEW_PATH, Recorded, Reply, status_body
from tests.kube_routes import KubeApi
from tests.loopback import LoopbackServer

UNROUTED = status_body(500, "InternalError", "stub: unrouted")
REASONS = {500: "InternalError", 503: "ServiceUnavailable", 429: "TooManyRequests"}


@dataclass
class Injected:
    method: str
    path: re.Pattern[str]
    status: int
    times: int
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None  # an answer that replaces the real one (bytes and str are sent as they are, else JSON)
    content_type: str = "application/json"
    cut_at: int | None = None  # send only this many bytes of the body, though Content-Length promises all of it
    hang: bool = False  # never answer (until the stub stops)


def peer_name(connection: Any) -> str | None:
    """The CN of the client certificate a TLS connection verified (None without one, or on plain http)."""
    cert: Any = connection.getpeercert() if isinstance(connection, ssl.SSLSocket) else None
    names = [value for rdn in (cert or {}).get("subject", ()) for key, value in rdn if key == "commonName"]
    return str(names[0]) if names else None


class StubKubeApiServer(KubeApi):
    def __init__(
        self,
        *,
        tokens: dict[str, str] | None = None,  # bearer token -> user name
        namespaces: tuple[str, ...] = ("default",),
        jobset_installed: bool = True,
        kueue_version: str | None = "v1beta1",
        provisioning_version: str | None = None,  # autoscaling.x-k8s.io (ProvisioningRequest) served when set
        tls: bool = True,  # HTTPS with the session CA's certificate for 127.0.0.1; False: plain http
        certificate: str = "ip",  # "named": valid for tls.SERVER_NAME only; "stranger": from a CA nobody trusts
    ) -> None:
        super().__init__(
            tokens=tokens,
            namespaces=namespaces,
            jobset_installed=jobset_installed,
            kueue_version=kueue_version,
            provisioning_version=provisioning_version,
        )
        self.requests: list[Recorded] = []
        self.injected: list[Injected] = []
        self.latency = 0.0  # seconds every answer waits (outside the lock: requests wait side by side)
        # METHOD -> seconds its answer waits after the request was carried out (a write that landed before its
        # answer came back, as when the client is interrupted in between)
        self.slow_answers: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()  # releases hung answers
        self.ca_pem: bytes | None = None  # the CA a client must trust (None: plain http)
        context = None
        if tls:
            from tests.tls import session_pki

            pki = session_pki()
            context = pki.server_context(named=certificate == "named", stranger=certificate == "stranger")
            self.ca_pem = pki.ca_pem
        self._server = LoopbackServer(self._handler_class(), tls=context)

    # ------------------------------------------------------------------------------------------ control

    @property
    def url(self) -> str:
        return self._server.url

    def _netloc(self) -> str:
        return self._server.netloc

    def start(self) -> Self:
        self._server.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def write_kubeconfig(
        self,
        path: Path,
        contexts: dict[str, tuple[str, str | None]],
        current: str | None,
        *,
        cluster: dict[str, Any] | None = None,
    ) -> Path:
        """Write a kubeconfig whose contexts (name -> (token, namespace)) all point at this server, trusting the
        session CA (``certificate-authority-data``) when it serves HTTPS; ``cluster``: fields that replace or add
        to the cluster entry (``tls-server-name``, ``proxy-url``; a None value removes the field)."""
        entry: dict[str, Any] = {"server": self.url}
        if self.ca_pem is not None:
            entry["certificate-authority-data"] = base64.b64encode(self.ca_pem).decode()
        entry = {k: v for k, v in {**entry, **(cluster or {})}.items() if v is not None}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "stub", "cluster": entry}],
            "users": [{"name": f"user-{n}", "user": {"token": tok}} for n, (tok, _) in contexts.items()],
            "contexts": [
                {"name": n, "context": {"cluster": "stub", "user": f"user-{n}", **({"namespace": ns} if ns else {})}}
                for n, (_, ns) in contexts.items()
            ],
        }
        if current is not None:
            config["current-context"] = current
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        return path

    def fail(
        self,
        method: str,
        path_regex: str,
        status: int,
        *,
        times: int = 1,
        delay: float = 0.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer the next ``times`` matching requests with ``status`` (0: no answer, only the delay)."""
        self.injected.append(Injected(method, re.compile(path_regex), status, times, delay, headers or {}))

    def answer(
        self,
        method: str,
        path_regex: str,
        body: Any,
        *,
        status: int = 200,
        content_type: str = "application/json",
        times: int = 1,
        cut_at: int | None = None,
    ) -> None:
        """Answer the next ``times`` matching requests with ``body`` instead of the real answer (an HTML page, JSON
        of the wrong shape); ``cut_at``: the connection closes after that many bytes of it."""
        self.injected.append(
            Injected(method, re.compile(path_regex), status, times, body=body, content_type=content_type, cut_at=cut_at)
        )

    def hang(self, method: str, path_regex: str, *, times: int = 1) -> None:
        """Accept the next ``times`` matching requests and never answer them (until the stub stops)."""
        self.injected.append(Injected(method, re.compile(path_regex), 0, times, hang=True))

    def sent(self, method: str | None = None, path_contains: str = "") -> list[Recorded]:
        return [r for r in self.requests if (method is None or r.method == method) and path_contains in r.path]

    def writes(self) -> list[Recorded]:
        """Requests that could change the cluster (an access review is a POST that changes nothing)."""
        return [
            r for r in self.requests if r.method in ("POST", "PUT", "PATCH", "DELETE") and r.path != ACCESS_REVIEW_PATH
        ]

    # ------------------------------------------------------------------------------------------ serving

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                stub._serve(self)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

        return Handler

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        record = _recorded(h)
        with self._lock:
            self.requests.append(record)
        if self.latency:
            time.sleep(self.latency)
        try:
            self._route(record)
            raise Reply(500, UNROUTED)
        except Reply as reply:
            if self.slow_answers.get(record.method):
                self._stopping.wait(self.slow_answers[record.method])
            _send(h, reply)

    def _route(self, r: Recorded) -> None:
        self._inject(r)
        self._authenticate(r)
        with self._lock:
            self._dispatch(r)

    def _inject(self, r: Recorded) -> None:
        """The first injected fault for ``r`` that has uses left, if any: its answer replaces the real one."""
        inj = next((i for i in self.injected if i.times > 0 and i.method == r.method and i.path.search(r.path)), None)
        if inj is None:
            return
        inj.times -= 1
        if inj.hang:
            self._stopping.wait(120)
            raise Reply(503, status_body(503, "ServiceUnavailable", "stub: stopped while hanging"))
        if inj.delay:
            time.sleep(inj.delay)
        if inj.body is not None:
            reply = Reply(inj.status, inj.body, inj.content_type)
            reply.cut_at = inj.cut_at
            raise reply
        if inj.status:
            reason = REASONS.get(inj.status, "Unknown")
            reply = Reply(inj.status, status_body(inj.status, reason, "etcdserver: request timed out"))
            reply.headers = inj.headers
            raise reply


def _recorded(h: BaseHTTPRequestHandler) -> Recorded:
    """The request as it came: its body parsed as JSON when it is JSON."""
    parts = urlsplit(h.path)
    length = int(h.headers.get("Content-Length") or 0)
    raw = h.rfile.read(length) if length else b""
    body: Any = None
    if raw:
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
    headers = dict(h.headers.items())
    return Recorded(
        h.command, parts.path, parse_qs(parts.query), headers, body, peer_name(h.connection), list(h.headers.items())
    )


def _send(h: BaseHTTPRequestHandler, reply: Reply) -> None:
    body = reply.body
    payload = (
        body if isinstance(body, bytes) else (body.encode() if isinstance(body, str) else json.dumps(body).encode())
    )
    try:
        h.send_response(reply.code)
        h.send_header("Content-Type", reply.content_type)
        h.send_header("Content-Length", str(len(payload)))
        for key, value in reply.headers.items():
            h.send_header(key, value)
        h.end_headers()
        h.wfile.write(payload if reply.cut_at is None else payload[: reply.cut_at])
        if reply.cut_at is not None:
            h.close_connection = True
    except (BrokenPipeError, ConnectionResetError):
        pass  # the client gave up (a timeout test)
