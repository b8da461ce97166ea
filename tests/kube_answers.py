"""What the API stub (tests/kube_stub.py) is asked and what it answers, in the API server's own shapes: a recorded
request, an answer (``Reply``, raised by whichever layer decides it), the ``Status`` object of every error, and the
messages the API server writes for the errors the stub gives (apimachinery's ``errors.NewNotFound``,
``NewAlreadyExists``, ``NewForbidden``). tests/test_control_plane_stub_shapes.py holds them to a real API server."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

JOBSET_GV = "jobset.x-k8s.io/v1alpha2"
APPLY_PATCH = "application/apply-patch+yaml"
JOBSET_CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobsets.jobset.x-k8s.io"
ACCESS_REVIEW_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
NO_RESOURCE = "the server could not find the requested resource"


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


class Reply(Exception):
    """The answer to a request, raised where it is decided: ``body`` bytes and str go as they are, else as JSON;
    ``cut_at``: only that many bytes of it, though Content-Length promises all."""

    def __init__(self, code: int, body: Any, content_type: str = "application/json") -> None:
        self.code, self.body, self.content_type = code, body, content_type
        self.headers: dict[str, str] = {}
        self.cut_at: int | None = None


def status_body(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A failure's ``Status``; ``details`` is left out when there are none, as the API server leaves it out."""
    found = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message}
    return found | {"reason": reason, **({"details": details} if details else {}), "code": code}


def deleted(plural: str, group: str, name: str, uid: str) -> dict[str, Any]:
    """What the API server answers a DELETE that removed the object at once (no finalizer held it)."""
    details = {"name": name, **({"group": group} if group else {}), "kind": plural, "uid": uid}
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}


def qualified(plural: str, group: str) -> str:
    """``jobsets.jobset.x-k8s.io``, or ``pods`` for the core group: how the API server names a resource."""
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> Reply:
    details = {"name": name, **({"group": group} if group else {}), "kind": plural}
    return Reply(404, status_body(404, "NotFound", f'{qualified(plural, group)} "{name}" not found', details))


def no_resource() -> Reply:
    """A path the server serves nothing at (an API group not installed)."""
    return Reply(404, status_body(404, "NotFound", NO_RESOURCE))


def already_exists(plural: str, group: str, name: str) -> Reply:
    details = {"name": name, **({"group": group} if group else {}), "kind": plural}
    message = f'{qualified(plural, group)} "{name}" already exists'
    return Reply(409, status_body(409, "AlreadyExists", message, details))


def forbidden(user: str, verb: str, plural: str, group: str, ns: str | None, name: str | None) -> Reply:
    target = f'{qualified(plural, group)} "{name}"' if name else qualified(plural, group)
    where = f' in the namespace "{ns}"' if ns else " at the cluster scope"
    message = f'{target} is forbidden: User "{user}" cannot {verb} resource "{plural}" in API group "{group}"{where}'
    details = {**({"name": name} if name else {}), **({"group": group} if group else {}), "kind": plural}
    return Reply(403, status_body(403, "Forbidden", message, details))
