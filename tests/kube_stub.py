"""StubKubeApiServer: a loopback HTTP server (tests/loopback.py) that answers the Kubernetes API paths pwdeploy
uses.

It serves HTTPS by default, as a GKE control plane does: a certificate from the test session's throwaway CA
(tests/tls.py), which ``write_kubeconfig`` hands to the client as ``certificate-authority-data``; a client
certificate from that CA authenticates as its CN, as the API server's x509 authenticator does. ``tls=False`` is
plain http, for a test that asks for it.

It is a stub, not an API server: no controllers, no admission webhooks, no watch, label selectors of the form
``k=v,k2=v2`` only. What it does do like a real server: the real paths (discovery, ``/version``, jobsets with
server-side apply and ``dryRun=All``, namespaces, nodes, pods and their logs, events, secrets (metadata-only reads),
the pods of every namespace, Kueue localqueues (and, read-only, clusterqueues, admissionchecks and
provisioningrequestconfigs), the JobSet
CustomResourceDefinition, SelfSubjectAccessReviews answered from the same forbidden rules as every other request),
bearer-token authentication, and the real error shapes (``Status`` objects for 401/403/404/409/422/5xx). Every
request is recorded so tests can assert what the official client actually sent; ``latency`` delays every answer,
to measure what concurrent requests save. Faults can be injected: an error status
(``fail``), any body in place of the real answer (``answer``: an HTML page, JSON of the wrong shape, a body cut off
mid-way) and no answer at all until the stub stops (``hang``).
"""

from __future__ import annotations

import base64
import copy
import json
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, NoReturn, Self
from urllib.parse import parse_qs, urlsplit

import yaml

from pwdeploy import manifests
from pwdeploy.config import JobConfig, load_job
from tests.crd import crd_object
from tests.kube_discovery import discovery
from tests.loopback import LoopbackServer

JOBSET_GV = "jobset.x-k8s.io/v1alpha2"
APPLY_PATCH = "application/apply-patch+yaml"
JOBSET_CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobsets.jobset.x-k8s.io"
ACCESS_REVIEW_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    peer: str | None = None  # the CN of the client certificate the TLS handshake verified
    lines: list[tuple[str, str]] = field(default_factory=list)  # every header line, repeated names included

    def q(self, key: str) -> str | None:
        values = self.query.get(key)
        return values[0] if values else None


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


def jobset_webhook_defaults(body: dict[str, Any]) -> dict[str, Any]:
    """What JobSet's mutating webhook mjobset.kb.io sets on a new JobSet (kubernetes-sigs/jobset v0.11.1
    pkg/webhooks/jobset_webhook.go ``Default``): success and startup policies, Indexed completion, OnFailure
    restarts and the network defaults."""
    obj = copy.deepcopy(body)
    spec = obj.setdefault("spec", {})
    spec.setdefault("successPolicy", {"operator": "All"})
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    for rj in spec.get("replicatedJobs") or []:
        job = rj.setdefault("template", {}).setdefault("spec", {})
        job.setdefault("completionMode", "Indexed")
        job.setdefault("template", {}).setdefault("spec", {}).setdefault("restartPolicy", "OnFailure")
    network = spec.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    return obj


def status_body(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details or {},
        "code": code,
    }


def small_job(
    overrides: dict[str, Any] | None = None, *, name: str = "dp-example", namespace: str | None = "default"
) -> JobConfig:
    """A small job config (``overrides``: dotted config paths such as ``tpu.type``) with the Pathways 0.10.2
    images, whatever jax is installed."""
    values = {
        "name": name,
        "namespace": namespace,
        "tpu.type": "v5p-8",
        "tpu.slices": 2,
        "main.image": "python:3.11.9-slim",
        "main.command": "python3 train.py",
        "storage.scratch": "gs://stub-bucket/scratch",
        **(overrides or {}),
    }
    return load_job(None, {k: v for k, v in values.items() if v is not None}, installed_jax=lambda: "0.10.2")


def rendered_jobset(
    name: str = "dp-example",
    namespace: str = "default",
    *,
    tpu_type: str = "v5p-8",
    slices: int = 2,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JobSet ``pwdeploy.manifests.build`` renders for ``small_job``, with ``status`` when given."""
    (obj,) = manifests.build(small_job({"tpu.type": tpu_type, "tpu.slices": slices}, name=name, namespace=namespace))
    if status:
        obj["status"] = status
    return obj


def node(
    name: str,
    labels: dict[str, str],
    allocatable: dict[str, str],
    *,
    ready: bool = True,
    cordoned: bool = False,
    kubelet: str | None = None,
) -> dict[str, Any]:
    """A Node as the API returns it: labels, allocatable resources, the Ready condition and, when given, the
    kubelet's version (status.nodeInfo.kubeletVersion)."""
    status: dict[str, Any] = {
        "allocatable": dict(allocatable),
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if kubelet is not None:
        status["nodeInfo"] = {"kubeletVersion": kubelet}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": status,
    }


def peer_name(connection: Any) -> str | None:
    """The CN of the client certificate a TLS connection verified (None without one, or on plain http)."""
    cert: Any = connection.getpeercert() if isinstance(connection, ssl.SSLSocket) else None
    names = [value for rdn in (cert or {}).get("subject", ()) for key, value in rdn if key == "commonName"]
    return str(names[0]) if names else None


class _Reply(Exception):
    def __init__(self, code: int, body: Any, content_type: str = "application/json") -> None:
        self.code, self.body, self.content_type = code, body, content_type
        self.headers: dict[str, str] = {}
        self.cut_at: int | None = None


class StubKubeApiServer:
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
        self.tokens = tokens or {"stub-token": "alice"}
        self.namespaces = set(namespaces)
        self.jobset_installed = jobset_installed
        self.kueue_version = kueue_version
        self.provisioning_version = provisioning_version
        self.previous_logs: dict[
            tuple[str, str, str], str | bytes
        ] = {}  # (namespace, pod, container) -> previous=true text
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (plural, namespace, name) -> object
        self.logs: dict[tuple[str, str, str], str | bytes] = {}  # (namespace, pod, container) -> text or bytes
        self.requests: list[Recorded] = []
        self.pages = 0  # list answers served (one per page)
        self.expire_continue = 0  # how many next list requests with a continue token get 410 Expired
        self.injected: list[Injected] = []
        self.forbidden: set[tuple[str, str]] = set()  # (verb, plural)
        self.jobset_webhook = True  # JobSet's mutating webhook defaults a new JobSet (False: only its CRD)
        self.linger_after_delete = 0  # GETs that still see a deleted object (foreground deletion in progress)
        self.version = {"major": "1", "minor": "31+", "gitVersion": "v1.31.4-gke.1256000"}
        self.crd_version = "0.10.1"  # the vendored JobSet CRD served (tests/fixtures/crds)
        self.jobset_crd: dict[str, Any] | None = None  # a CRD object that replaces the real one
        self.anonymous: str | None = None  # the user of requests without credentials (None: they get 401)
        self.latency = 0.0  # seconds every answer waits (outside the lock: requests wait side by side)
        # METHOD -> seconds its answer waits after the request was carried out (a write that landed before its
        # answer came back, as when the client is interrupted in between)
        self.slow_answers: dict[str, float] = {}
        self._lingering: dict[tuple[str, str, str], int] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()  # releases hung answers
        self._uid = 0
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

    def forbid(self, verb: str, plural: str) -> None:
        self.forbidden.add((verb, plural))

    def add_node(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.objects[("nodes", "", obj["metadata"]["name"])] = obj
        return obj

    def put(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        self._stamp(meta)
        self.objects[(plural, meta["namespace"], meta["name"])] = obj
        return obj

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((plural, namespace, name))

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
        parts = urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        record = Recorded(
            h.command,
            parts.path,
            parse_qs(parts.query),
            dict(h.headers.items()),
            body,
            peer_name(h.connection),
            list(h.headers.items()),
        )
        with self._lock:
            self.requests.append(record)
        if self.latency:
            time.sleep(self.latency)
        try:
            self._route(record)
            raise _Reply(500, status_body(500, "InternalError", "stub: unrouted"))
        except _Reply as reply:
            if self.slow_answers.get(record.method):
                self._stopping.wait(self.slow_answers[record.method])
            payload = (
                reply.body
                if isinstance(reply.body, bytes)
                else (reply.body.encode() if isinstance(reply.body, str) else json.dumps(reply.body).encode())
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

    def _route(self, r: Recorded) -> None:
        self._inject(r)
        self._authenticate(r)
        with self._lock:
            self._dispatch(r)

    def _inject(self, r: Recorded) -> None:
        for inj in self.injected:
            if inj.times > 0 and inj.method == r.method and inj.path.search(r.path):
                inj.times -= 1
                if inj.hang:
                    self._stopping.wait(120)
                    raise _Reply(503, status_body(503, "ServiceUnavailable", "stub: stopped while hanging"))
                if inj.delay:
                    time.sleep(inj.delay)
                if inj.body is not None:
                    reply = _Reply(inj.status, inj.body, inj.content_type)
                    reply.cut_at = inj.cut_at
                    raise reply
                if inj.status:
                    reason = {500: "InternalError", 503: "ServiceUnavailable", 429: "TooManyRequests"}
                    reply = _Reply(
                        inj.status,
                        status_body(inj.status, reason.get(inj.status, "Unknown"), "etcdserver: request timed out"),
                    )
                    reply.headers = inj.headers
                    raise reply
                return

    def _authenticate(self, r: Recorded) -> None:
        if self.user_of(r) is None:
            raise _Reply(401, status_body(401, "Unauthorized", "Unauthorized"))

    def user_of(self, r: Recorded) -> str | None:
        """Who sent ``r``: the user of its bearer token, else the CN of its client certificate."""
        auth = r.headers.get("Authorization") or r.headers.get("authorization") or ""
        return self.tokens.get(auth.removeprefix("Bearer ").strip()) or r.peer or self.anonymous

    def _user(self, r: Recorded) -> str:
        return self.user_of(r) or "system:anonymous"

    def _dispatch(self, r: Recorded) -> None:
        path = r.path.rstrip("/")
        if r.method == "GET" and path.count("/") <= 3:
            jobset_gv = JOBSET_GV if self.jobset_installed else None
            document = discovery(path, jobset_gv=jobset_gv, server_address=self._server.netloc)
            if document is not None:
                raise _Reply(200, document)
        if path == "/version" and r.method == "GET":
            raise _Reply(200, self.version)
        if path == JOBSET_CRD_PATH and r.method == "GET":
            self._jobset_crd(r)
        if path == ACCESS_REVIEW_PATH and r.method == "POST":
            self._access_review(r)
        if path == "/api/v1/nodes" and r.method == "GET":
            self._list(r, "nodes", "", "v1", None)
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/secrets/([^/]+)", path)
        if m and r.method == "GET":
            self._secret_metadata(r, m[1], m[2])
        if path == f"/apis/{JOBSET_GV}":
            if not self.jobset_installed:
                raise _Reply(404, status_body(404, "NotFound", "the server could not find the requested resource"))
            raise _Reply(
                200,
                {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": JOBSET_GV,
                    "resources": [
                        {
                            "name": "jobsets",
                            "singularName": "jobset",
                            "namespaced": True,
                            "kind": "JobSet",
                            "verbs": ["delete", "get", "list", "patch", "create", "update", "watch"],
                        }
                    ],
                },
            )
        if path == "/apis/kueue.x-k8s.io":
            if self.kueue_version is None:
                raise _Reply(404, status_body(404, "NotFound", "the server could not find the requested resource"))
            gv = {"groupVersion": f"kueue.x-k8s.io/{self.kueue_version}", "version": self.kueue_version}
            raise _Reply(
                200,
                {
                    "kind": "APIGroup",
                    "apiVersion": "v1",
                    "name": "kueue.x-k8s.io",
                    "versions": [gv],
                    "preferredVersion": gv,
                },
            )
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)", path)
        if m and r.method == "GET":
            self._check_rbac(r, "get", "namespaces", "", None, m[1])
            if m[1] not in self.namespaces:
                raise _Reply(
                    404,
                    status_body(
                        404, "NotFound", f'namespaces "{m[1]}" not found', {"name": m[1], "kind": "namespaces"}
                    ),
                )
            raise _Reply(200, {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": m[1]}})
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/log", path)
        if m:
            self._pod_log(r, m[1], m[2])
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)", path)
        if m and r.method == "GET":  # kubectl port-forward reads the pod first
            self._resource(r, "pods", "", "v1", m[1], m[2])
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/(pods|events)", path)
        if m and r.method == "GET":
            self._list(r, m[2], "", "v1", m[1])
        m = re.fullmatch(r"/apis/jobset\.x-k8s\.io/v1alpha2(?:/namespaces/([^/]+))?/jobsets(?:/([^/]+))?", path)
        if m:
            if not self.jobset_installed:
                raise _Reply(404, status_body(404, "NotFound", "the server could not find the requested resource"))
            self._resource(r, "jobsets", "jobset.x-k8s.io", "v1alpha2", m[1], m[2])
        m = re.fullmatch(r"/apis/kueue\.x-k8s\.io/([^/]+)/namespaces/([^/]+)/localqueues(?:/([^/]+))?", path)
        if m and self.kueue_version == m[1]:
            self._resource(r, "localqueues", "kueue.x-k8s.io", m[1], m[2], m[3])
        m = re.fullmatch(
            r"/apis/kueue\.x-k8s\.io/([^/]+)/(clusterqueues|admissionchecks|provisioningrequestconfigs)/([^/]+)", path
        )
        if m and self.kueue_version == m[1] and r.method == "GET":  # cluster-scoped: put() them with namespace ""
            self._resource(r, m[2], "kueue.x-k8s.io", m[1], "", m[3])
        m = re.fullmatch(r"/apis/apps/v1/namespaces/([^/]+)/deployments/([^/]+)", path)
        if m and r.method == "GET":  # the controllers' Deployments (their image tags): put("deployments", obj)
            self._resource(r, "deployments", "apps", "v1", m[1], m[2])
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/configmaps/([^/]+)", path)
        if m and r.method == "GET":  # Kueue's Configuration: put("configmaps", obj)
            self._resource(r, "configmaps", "", "v1", m[1], m[2])
        m = re.fullmatch(r"/apis/kueue\.x-k8s\.io/([^/]+)/(topologies|admissionchecks)", path)
        if m and self.kueue_version == m[1] and r.method == "GET":  # cluster-scoped lists
            self._list(r, m[2], "kueue.x-k8s.io", m[1], "")
        self._dispatch_lists(r, path)
        raise _Reply(404, status_body(404, "NotFound", "the server could not find the requested resource"))

    def _dispatch_lists(self, r: Recorded, path: str) -> None:
        """Lists of Jobs, Kueue Workloads and ProvisioningRequests (and the autoscaling.x-k8s.io group) that
        diagnose reads; objects are added with ``put("jobs" | "workloads" | "provisioningrequests", obj)``."""
        if r.method != "GET":
            return
        m = re.fullmatch(r"/apis/batch/v1/namespaces/([^/]+)/jobs", path)
        if m:
            self._list(r, "jobs", "batch", "v1", m[1])
        if path == "/api/v1/pods":  # every namespace's pods (preflight counts what they hold on the nodes)
            self._list(r, "pods", "", "v1", None)
        m = re.fullmatch(r"/apis/kueue\.x-k8s\.io/([^/]+)/namespaces/([^/]+)/workloads", path)
        if m and self.kueue_version == m[1]:
            self._list(r, "workloads", "kueue.x-k8s.io", m[1], m[2])
        group = "autoscaling.x-k8s.io"
        if path == f"/apis/{group}":
            if self.provisioning_version is None:
                raise _Reply(404, status_body(404, "NotFound", "the server could not find the requested resource"))
            gv = {"groupVersion": f"{group}/{self.provisioning_version}", "version": self.provisioning_version}
            raise _Reply(
                200, {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": [gv], "preferredVersion": gv}
            )
        m = re.fullmatch(r"/apis/autoscaling\.x-k8s\.io/([^/]+)/namespaces/([^/]+)/provisioningrequests", path)
        if m and self.provisioning_version == m[1]:
            self._list(r, "provisioningrequests", group, m[1], m[2])

    # ------------------------------------------------------------------------------------------ resources

    def _jobset_crd(self, r: Recorded) -> None:
        name = "jobsets.jobset.x-k8s.io"
        self._check_rbac(r, "get", "customresourcedefinitions", "apiextensions.k8s.io", None, name)
        if not self.jobset_installed:
            raise _Reply(
                404,
                status_body(
                    404,
                    "NotFound",
                    f'customresourcedefinitions.apiextensions.k8s.io "{name}" not found',
                    {"name": name, "group": "apiextensions.k8s.io", "kind": "customresourcedefinitions"},
                ),
            )
        raise _Reply(200, self.jobset_crd if self.jobset_crd is not None else crd_object(self.crd_version))

    def _access_review(self, r: Recorded) -> None:
        """Allowed unless ``forbid(verb, plural)`` (``pods/log`` for a subresource) says otherwise."""
        attributes = (r.body or {}).get("spec", {}).get("resourceAttributes") or {}
        plural = "/".join(p for p in (attributes.get("resource"), attributes.get("subresource")) if p)
        allowed = (attributes.get("verb"), plural) not in self.forbidden
        review = {**r.body, "status": {"allowed": allowed, **({} if allowed else {"reason": "stub: forbidden"})}}
        raise _Reply(201, review)

    def _secret_metadata(self, r: Recorded, ns: str, name: str) -> None:
        self._check_rbac(r, "get", "secrets", "", ns, name)
        secret = self.objects.get(("secrets", ns, name))
        if secret is None:
            raise _Reply(
                404, status_body(404, "NotFound", f'secrets "{name}" not found', {"name": name, "kind": "secrets"})
            )
        if "as=PartialObjectMetadata" in (r.headers.get("Accept") or ""):
            raise _Reply(
                200, {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": secret["metadata"]}
            )
        raise _Reply(200, secret)

    def _check_rbac(self, r: Recorded, verb: str, plural: str, group: str, ns: str | None, name: str | None) -> None:
        if (verb, plural) not in self.forbidden:
            return
        target = f'{plural}.{group} "{name}"' if name and group else (f'{plural} "{name}"' if name else plural)
        where = f' in the namespace "{ns}"' if ns else " at the cluster scope"
        message = (
            f'{target} is forbidden: User "{self._user(r)}" cannot {verb} resource "{plural}" '
            f'in API group "{group}"{where}'
        )
        raise _Reply(403, status_body(403, "Forbidden", message, {"name": name or "", "group": group, "kind": plural}))

    def _resource(self, r: Recorded, plural: str, group: str, version: str, ns: str | None, name: str | None) -> None:
        verb = {"GET": "get" if name else "list", "PATCH": "patch", "DELETE": "delete", "POST": "create"}[r.method]
        self._check_rbac(r, verb, plural, group, ns, name)
        if name is None and r.method == "GET":
            self._list(r, plural, group, version, ns)
        if ns is not None and ns not in self.namespaces and r.method in ("PATCH", "POST"):
            raise _Reply(
                404, status_body(404, "NotFound", f'namespaces "{ns}" not found', {"name": ns, "kind": "namespaces"})
            )
        if name is None and r.method == "POST":
            name = (r.body or {}).get("metadata", {}).get("name")
            if (plural, ns, name) in self.objects:
                raise _Reply(
                    409,
                    status_body(
                        409,
                        "AlreadyExists",
                        f'{plural}.{group} "{name}" already exists',
                        {"name": name, "group": group, "kind": plural},
                    ),
                )
            self._store(r, plural, ns or "", name or "", r.body, 201)
        assert ns is not None and name is not None
        key = (plural, ns, name)
        current = self.objects.get(key)
        missing = _Reply(
            404,
            status_body(
                404, "NotFound", f'{plural}.{group} "{name}" not found', {"name": name, "group": group, "kind": plural}
            ),
        )
        if r.method == "GET":
            if current is None:
                raise missing
            if key in self._lingering:
                self._lingering[key] -= 1
                if self._lingering[key] < 0:
                    del self._lingering[key], self.objects[key]
                    raise missing
            raise _Reply(200, current)
        if r.method == "DELETE":
            if current is None or key in self._lingering:
                raise missing if current is None else _Reply(200, current)
            if r.q("dryRun") == "All":
                raise _Reply(200, current)
            if self.linger_after_delete:
                current["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
                self._lingering[key] = self.linger_after_delete
            else:
                del self.objects[key]
            raise _Reply(200, current)
        if r.method == "PATCH":
            self._apply(r, key, current)

    def _apply(self, r: Recorded, key: tuple[str, str, str], current: dict[str, Any] | None) -> None:
        if r.headers.get("Content-Type") != APPLY_PATCH:
            raise _Reply(415, status_body(415, "UnsupportedMediaType", "stub: only server-side apply is served"))
        if not r.q("fieldManager"):
            raise _Reply(
                422,
                status_body(
                    422,
                    "Invalid",
                    'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch',
                    {
                        "causes": [
                            {"reason": "FieldValueRequired", "field": "fieldManager", "message": "Required value"}
                        ]
                    },
                ),
            )
        body = r.body if isinstance(r.body, dict) else yaml.safe_load(r.body)
        if body.get("metadata", {}).get("name") != key[2]:
            raise _Reply(400, status_body(400, "BadRequest", "the name of the object does not match the URL"))
        if current is None:
            if key[0] == "jobsets" and self.jobset_webhook:
                body = jobset_webhook_defaults(body)
            self._store(r, *key, body, 201)
        if current.get("spec") != body.get("spec"):
            cause = {
                "reason": "FieldValueInvalid",
                "field": "spec.replicatedJobs",
                "message": 'Invalid value: "array": field is immutable',
            }
            raise _Reply(
                422,
                status_body(
                    422,
                    "Invalid",
                    f'JobSet.jobset.x-k8s.io "{key[2]}" is invalid: spec.replicatedJobs: field is immutable',
                    {"name": key[2], "kind": "JobSet", "causes": [cause]},
                ),
            )
        merged = copy.deepcopy(current)
        for part in ("labels", "annotations"):
            merged["metadata"].setdefault(part, {}).update(body.get("metadata", {}).get(part) or {})
        if r.q("dryRun") != "All":
            self.objects[key] = merged
        raise _Reply(200, merged)

    def _store(self, r: Recorded, plural: str, ns: str, name: str, body: Any, code: int) -> NoReturn:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        meta["namespace"] = ns
        self._stamp(meta)
        meta["managedFields"] = [
            {"manager": r.q("fieldManager") or "unknown", "operation": "Apply" if r.method == "PATCH" else "Update"}
        ]
        if r.q("dryRun") != "All":
            self.objects[(plural, ns, name)] = obj
        raise _Reply(code, obj)

    def _stamp(self, meta: dict[str, Any]) -> None:
        self._uid += 1
        meta.setdefault("uid", f"00000000-0000-0000-0000-{self._uid:012d}")
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        meta.setdefault("resourceVersion", str(self._uid))

    def _list(self, r: Recorded, plural: str, group: str, version: str, ns: str | None) -> None:
        self._check_rbac(r, "list", plural, group, ns, None)
        items = [o for (p, n, _), o in sorted(self.objects.items()) if p == plural and (ns is None or n == ns)]
        items = [o for o in items if _labels_match(o, r.q("labelSelector")) and _fields_match(o, r.q("fieldSelector"))]
        kind = {"pods": "PodList", "events": "EventList", "jobsets": "JobSetList", "nodes": "NodeList"}.get(
            plural, "List"
        )
        gv = f"{group}/{version}" if group else version
        meta: dict[str, Any] = {"resourceVersion": "1"}
        if r.q("continue") and self.expire_continue > 0:  # the API server keeps a token's snapshot ~5 minutes
            self.expire_continue -= 1
            message = "The provided continue parameter is too old to display a consistent list result."
            raise _Reply(410, status_body(410, "Expired", message))
        start = int(base64.b64decode(r.q("continue") or "MA==")) if r.q("continue") else 0
        limit = int(r.q("limit") or 0)
        if limit > 0 and start + limit < len(items):  # paged as the API server pages: an opaque token, the count left
            meta |= {"continue": base64.b64encode(str(start + limit).encode()).decode()}
            meta["remainingItemCount"] = len(items) - start - limit
        items = items[start : start + limit] if limit > 0 else items[start:]
        self.pages += 1  # under the lock the dispatch holds
        raise _Reply(200, {"kind": kind, "apiVersion": gv, "metadata": meta, "items": items})

    def _pod_log(self, r: Recorded, ns: str, pod: str) -> None:
        self._check_rbac(r, "get", "pods/log", "", ns, pod)
        if ("pods", ns, pod) not in self.objects:
            raise _Reply(404, status_body(404, "NotFound", f'pods "{pod}" not found', {"name": pod, "kind": "pods"}))
        container = r.q("container") or ""
        logs = self.previous_logs if r.q("previous") == "true" else self.logs
        text = logs.get((ns, pod, container))
        if text is None:
            raise _Reply(400, status_body(400, "BadRequest", f"container {container} is not valid for pod {pod}"))
        tail = r.q("tailLines")
        if tail is not None:
            kept = text.splitlines(keepends=True)[-int(tail) :]
            text = b"".join(kept) if isinstance(text, bytes) else "".join(kept)  # type: ignore[arg-type]
        raise _Reply(200, text, "text/plain")


class FakeClock:
    """A clock whose sleep only advances time (and can act on the world, e.g. a stub's state, via on_sleep).

    It ends: sleeping past ``limit`` simulated seconds fails the test instead of looping for ever.
    """

    START = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)  # utc_now() at t = 1000

    def __init__(self, on_sleep: Callable[[int], None] | None = None, *, limit: float = 3600.0) -> None:
        self.t = 1000.0
        self.sleeps: list[float] = []
        self.on_sleep = on_sleep
        self.limit = limit

    def now(self) -> float:
        return self.t

    def utc_now(self) -> datetime:
        return self.START + timedelta(seconds=self.t - 1000.0)

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds
        if self.t - 1000.0 > self.limit:
            raise AssertionError(f"FakeClock: slept past its limit of {self.limit} s; a loop did not stop")
        if self.on_sleep is not None:
            self.on_sleep(len(self.sleeps))


def _labels_match(obj: dict[str, Any], selector: str | None) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in _pairs(selector))


def _fields_match(obj: dict[str, Any], selector: str | None) -> bool:
    def lookup(path: str) -> Any:
        value: Any = obj
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value

    for item in (selector or "").split(","):  # k=v, k==v and k!=v, as the API server's field selectors
        if not item.strip():
            continue
        if "!=" in item:
            key, value = (part.strip() for part in item.split("!=", 1))
            if lookup(key) == value:
                return False
        else:
            key, _, value = item.partition("=")
            if lookup(key.strip()) != value.strip().removeprefix("="):
                return False
    return True


def _pairs(selector: str | None) -> Iterator[tuple[str, str]]:
    for item in (selector or "").split(","):
        if item.strip():
            key, _, value = item.partition("=")
            yield key.strip(), value.strip()
