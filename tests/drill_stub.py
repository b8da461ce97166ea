"""DrillStub: StubKubeApiServer plus what `drill` and the timeline ask of an API server, as strictly as the real
one answers it (a stub, not an API server: no controllers; a test moves the world itself, on its FakeClock).

- ``POST /api/v1/namespaces/NS/pods/NAME/eviction`` (policy/v1 Eviction): the body must be an Eviction naming the
  pod of the URL (400 otherwise), 404 for a pod that is not there; the pod gets the condition DisruptionTarget
  (reason EvictionByEvictionAPI) and is deleted, as the real registry does (kubernetes/kubernetes
  pkg/registry/core/pod/storage/eviction.go); RBAC verb ``create`` on ``pods/eviction``.
- pod logs with timestamps: ``timed_logs[(ns, pod, container)]`` holds ``(RFC 3339 nano timestamp, text)`` lines;
  ``timestamps=true`` puts the timestamp and a space before each, ``sinceTime`` (whole seconds, as the API server
  takes it) keeps lines at or after it, ``tailLines`` and ``limitBytes`` cut as kubelet does (``ignores_limit_bytes``:
  a server that does not); ``timed_tails`` holds a last line not ended by a newline yet. ``follow=true`` sends
  what there is and ends the stream: every follow is a stream that drops, which a reader must resume.
- ``GET /api/v1/namespaces/NS/pods/NAME/exec?command=...`` upgraded to a WebSocket (``v4.channel.k8s.io``, RBAC
  verb ``create`` on ``pods/exec``): the command ``kill -s SIG 1`` is the only one served; the container's PID 1
  dies of the signal only when it is in ``pid1_handles`` (the kernel drops any other signal sent to a PID
  namespace's init from inside it, SIGKILL included: kill still succeeds), and the kubelet's part is played at
  once: the container's ``restartCount`` goes up and ``lastState.terminated.exitCode`` is 128 + the signal. The
  exec's Status (``Success``) comes on channel 3, then the stream closes. ``exec_answer``, when set, is what the
  stream sends instead (raw frames: silence, a close without a Status, a broken frame), nothing run.
- ``budgets[pod] = NAME``: a PodDisruptionBudget that allows no disruption covers the pod; its eviction is answered
  429 with the Status the API server gives (details.causes of type DisruptionBudget, "The disruption budget NAME
  needs N healthy pods and has N currently": pkg/registry/core/pod/storage/eviction.go, checkAndDecrement).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import math
import re
import signal
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.kube_answers import Recorded, Reply, status_body
from tests.kube_stub import StubKubeApiServer, peer_name

EVICTION_PATH = re.compile(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction")
EXEC_PATH = re.compile(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/exec")
LOG_PATH = re.compile(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/log")


def stamp(second: float) -> str:
    """An RFC 3339 timestamp with nanoseconds, ``second`` seconds after 2026-01-01T00:05:00Z (FakeClock's t=1000)."""
    whole = math.floor(second)
    nanos = round((second - whole) * 1e9)
    minute, sec = divmod(5 * 60 + whole, 60)
    hour, minute = divmod(minute, 60)
    return f"2026-01-01T{hour:02d}:{minute:02d}:{sec:02d}.{nanos:09d}Z"


class DrillStub(StubKubeApiServer):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.timed_logs: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
        # (ns, pod, container) -> (timestamp, text) written after the lines with no newline yet (a progress bar)
        self.timed_tails: dict[tuple[str, str, str], tuple[str, str]] = {}
        self.ignores_limit_bytes = False  # a server that sends more than the limitBytes asked for
        self.evicted: list[str] = []
        self.signalled: list[tuple[str, str, str]] = []  # (pod, container, signal name)
        self.pid1_handles = {"TERM", "ABRT", "INT", "USR1"}
        self.image_has_kill = True  # False: the runtime's answer for an image without a `kill` command
        self.exec_answer: Callable[[Any], None] | None = None  # raw frames sent instead of running the command
        self.budgets: dict[str, str] = {}  # pod -> the PodDisruptionBudget that blocks its eviction

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        base = super()._handler_class()
        fake = self

        class Handler(base):  # type: ignore[valid-type,misc]
            def do_GET(self) -> None:
                if (self.headers.get("Upgrade") or "").lower() == "websocket":
                    fake._exec(self)
                else:
                    super().do_GET()

        return Handler

    def _exec(self, h: BaseHTTPRequestHandler) -> None:
        from tests.portforward_fake import CLOSE, V4_CHANNEL, WS_GUID, FakeStream

        parts = urlsplit(h.path)
        r = Recorded("GET", parts.path, parse_qs(parts.query), dict(h.headers.items()), None, peer_name(h.connection))
        with self._lock:
            self.requests.append(r)
        m = EXEC_PATH.fullmatch(parts.path)
        user = self.user_of(r)
        refusal = (
            (404, "NotFound", "the server could not find the requested resource")
            if m is None
            else (401, "Unauthorized", "Unauthorized")
            if user is None
            else (403, "Forbidden", f'pods "{m[2]}" is forbidden: User "{user}" cannot create resource "pods/exec"')
            if ("create", "pods/exec") in self.forbidden
            else (404, "NotFound", f'pods "{m[2]}" not found')
            if ("pods", m[1], m[2]) not in self.objects
            else None
        )
        offered = [p.strip() for p in (h.headers.get("Sec-WebSocket-Protocol") or "").split(",")]
        if refusal is None and V4_CHANNEL not in offered:
            refusal = (400, "BadRequest", f"subprotocols {offered}: not served")
        if refusal is not None:
            body = json.dumps(status_body(*refusal)).encode()
            h.send_response(refusal[0])
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return
        assert m is not None
        accept = base64.b64encode(hashlib.sha1((h.headers["Sec-WebSocket-Key"] + WS_GUID).encode()).digest())
        h.send_response(101)
        headers = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Accept": accept.decode()}
        for key, value in {**headers, "Sec-WebSocket-Protocol": V4_CHANNEL}.items():
            h.send_header(key, value)
        h.end_headers()
        h.wfile.flush()
        h.close_connection = True
        stream = FakeStream(h.connection, h.rfile, 0)
        if self.exec_answer is not None:
            self.exec_answer(stream)
            with contextlib.suppress(OSError):
                while h.rfile.read(1):  # until the client goes: a silent stream stays open as long as it waits
                    pass
            return
        status = self._run_kill(m[1], m[2], r.q("container") or "", r.query.get("command") or [])
        stream.send_channel(3, json.dumps(status).encode())
        stream.send(CLOSE, b"\x03\xe8")

    def _run_kill(self, ns: str, pod: str, container: str, command: list[str]) -> dict[str, Any]:
        if not self.image_has_kill:
            message = (
                "OCI runtime exec failed: exec failed: unable to start container process: exec: "
                '"kill": executable file not found in $PATH: unknown'
            )
            return {"metadata": {}, "status": "Failure", "message": message, "reason": "InternalError"}
        if len(command) != 4 or command[:2] != ["kill", "-s"] or command[3] != "1":
            return {"status": "Failure", "message": f"stub: only `kill -s SIG 1` is served, not {command}"}
        with self._lock:
            obj = self.objects[("pods", ns, pod)]
            status = obj.get("status", {})
            statuses = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
            found = next((c for c in statuses if c.get("name") == container), None)
            if found is None:
                return {"status": "Failure", "message": f"container {container} is not valid for pod {pod}"}
            self.signalled.append((pod, container, command[2]))
            if command[2] in self.pid1_handles:
                found["restartCount"] = int(found.get("restartCount") or 0) + 1
                code = 128 + int(signal.Signals[f"SIG{command[2]}"])
                found["lastState"] = {"terminated": {"exitCode": code, "reason": "Error"}}
        return {"metadata": {}, "status": "Success"}

    def _dispatch(self, r: Any) -> None:
        path = r.path.rstrip("/")
        m = EVICTION_PATH.fullmatch(path)
        if m and r.method == "POST":
            self._evict(r, m[1], m[2])
        m = LOG_PATH.fullmatch(path)
        if m and r.method == "GET" and (m[1], m[2], r.q("container") or "") in self.timed_logs:
            self._timed_log(r, m[1], m[2])
        super()._dispatch(r)

    def _evict(self, r: Any, ns: str, pod: str) -> None:
        self._check_rbac(r, "create", "pods/eviction", "", ns, pod)
        body = r.body if isinstance(r.body, dict) else {}
        if body.get("kind") != "Eviction" or body.get("apiVersion") not in ("policy/v1", "policy/v1beta1"):
            raise Reply(400, status_body(400, "BadRequest", "stub: the body is not a policy/v1 Eviction"))
        if (body.get("metadata") or {}).get("name") != pod:
            raise Reply(400, status_body(400, "BadRequest", "name in URL does not match name in Eviction object"))
        current = self.objects.get(("pods", ns, pod))
        if current is None:
            raise Reply(404, status_body(404, "NotFound", f'pods "{pod}" not found', {"name": pod, "kind": "pods"}))
        if pod in self.budgets:
            cause = f"The disruption budget {self.budgets[pod]} needs 1 healthy pods and has 1 currently"
            message = "Cannot evict pod as it would violate the pod's disruption budget."
            details = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}  # StatusCause.Type is "reason"
            raise Reply(429, status_body(429, "TooManyRequests", message, details))
        conditions = current.setdefault("status", {}).setdefault("conditions", [])
        conditions.append({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"})
        del self.objects[("pods", ns, pod)]
        self.evicted.append(pod)
        raise Reply(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})

    def _timed_log(self, r: Any, ns: str, pod: str) -> None:
        self._check_rbac(r, "get", "pods/log", "", ns, pod)
        if ("pods", ns, pod) not in self.objects:
            raise Reply(404, status_body(404, "NotFound", f'pods "{pod}" not found', {"name": pod, "kind": "pods"}))
        lines = list(self.timed_logs[(ns, pod, r.q("container") or "")])
        since = r.q("sinceTime")
        if since is not None:
            if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", since):
                raise Reply(400, status_body(400, "BadRequest", f"stub: sinceTime {since!r} is not RFC 3339"))
            lines = [(s, t) for s, t in lines if s[:19] >= since[:19]]
        tail = r.q("tailLines")
        if tail is not None:
            lines = lines[-int(tail) :] if int(tail) else []
        with_stamps = r.q("timestamps") == "true"
        text = "".join(f"{s} {t}\n" if with_stamps else f"{t}\n" for s, t in lines).encode()
        if (ns, pod, r.q("container") or "") in self.timed_tails:
            tail_stamp, tail = self.timed_tails[(ns, pod, r.q("container") or "")]
            text += (f"{tail_stamp} {tail}" if with_stamps else tail).encode()
        limit = r.q("limitBytes")
        cut = limit is not None and not self.ignores_limit_bytes
        raise Reply(200, text[: int(limit)] if cut and limit is not None else text, "text/plain")
