"""DrillStub: StubKubeApiServer plus what `drill` and the timeline ask of an API server, as strictly as the real
one answers it (a stub, not an API server: no controllers; a test moves the world itself, on its FakeClock).

- ``POST /api/v1/namespaces/NS/pods/NAME/eviction`` (policy/v1 Eviction): the body must be an Eviction naming the
  pod of the URL (400 otherwise), 404 for a pod that is not there; the pod gets the condition DisruptionTarget
  (reason EvictionByEvictionAPI) and is deleted, as the real registry does (kubernetes/kubernetes
  pkg/registry/core/pod/storage/eviction.go); RBAC verb ``create`` on ``pods/eviction``.
- pod logs with timestamps: ``timed_logs[(ns, pod, container)]`` holds ``(RFC 3339 nano timestamp, text)`` lines;
  ``timestamps=true`` puts the timestamp and a space before each, ``sinceTime`` (whole seconds, as the API server
  takes it) keeps lines at or after it, ``tailLines`` and ``limitBytes`` cut as kubelet does. ``follow=true`` sends
  what there is and ends the stream: every follow is a stream that drops, which a reader must resume.
"""

from __future__ import annotations

import math
import re
from typing import Any

from tests.kube_stub import StubKubeApiServer, _Reply, status_body

EVICTION_PATH = re.compile(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction")
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
        self.evicted: list[str] = []

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
            raise _Reply(400, status_body(400, "BadRequest", "stub: the body is not a policy/v1 Eviction"))
        if (body.get("metadata") or {}).get("name") != pod:
            raise _Reply(400, status_body(400, "BadRequest", "name in URL does not match name in Eviction object"))
        current = self.objects.get(("pods", ns, pod))
        if current is None:
            raise _Reply(404, status_body(404, "NotFound", f'pods "{pod}" not found', {"name": pod, "kind": "pods"}))
        conditions = current.setdefault("status", {}).setdefault("conditions", [])
        conditions.append({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"})
        del self.objects[("pods", ns, pod)]
        self.evicted.append(pod)
        raise _Reply(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})

    def _timed_log(self, r: Any, ns: str, pod: str) -> None:
        self._check_rbac(r, "get", "pods/log", "", ns, pod)
        if ("pods", ns, pod) not in self.objects:
            raise _Reply(404, status_body(404, "NotFound", f'pods "{pod}" not found', {"name": pod, "kind": "pods"}))
        lines = list(self.timed_logs[(ns, pod, r.q("container") or "")])
        since = r.q("sinceTime")
        if since is not None:
            if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", since):
                raise _Reply(400, status_body(400, "BadRequest", f"stub: sinceTime {since!r} is not RFC 3339"))
            lines = [(s, t) for s, t in lines if s[:19] >= since[:19]]
        tail = r.q("tailLines")
        if tail is not None:
            lines = lines[-int(tail) :] if int(tail) else []
        with_stamps = r.q("timestamps") == "true"
        text = "".join(f"{s} {t}\n" if with_stamps else f"{t}\n" for s, t in lines).encode()
        limit = r.q("limitBytes")
        raise _Reply(200, text[: int(limit)] if limit is not None else text, "text/plain")
