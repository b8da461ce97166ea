"""The Kubernetes API seam: every request goes through ``Kube.request``, which counts what it sends.

Requests are sent with the official client's ``ApiClient`` and answered as plain dicts (or, for logs, a stream of
lines). A failed request becomes an ``ApiError`` in one function (``cluster_error``); server errors (5xx, 429) and
timeouts are retried with bounded backoff on the connection's clock (``Kube.clock``, passed in by the caller).
One ``Kube`` may be shared by threads: the client's connection pool is thread-safe.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from pwdeploy.errors import ClusterError

GET_CREDENTIALS = "GKE: gcloud container clusters get-credentials CLUSTER --location LOCATION"
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
DEFAULT_TIMEOUT = (10.0, 60.0)  # (connect, read) seconds


@dataclass(frozen=True)
class Resource:
    """A Kubernetes resource type: where it lives in the API and how to name it to users."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    subresource: str = ""  # "log", "portforward": a request to one object's subresource

    @property
    def rbac_resource(self) -> str:
        """``pods/log`` for a subresource, else the plural: the ``resources`` entry of an RBAC rule."""
        return f"{self.plural}/{self.subresource}" if self.subresource else self.plural

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def api_path(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    @property
    def display(self) -> str:
        """``jobsets.jobset.x-k8s.io`` or ``pods``, as ``kubectl auth can-i`` spells it."""
        return f"{self.rbac_resource}.{self.group}" if self.group else self.rbac_resource

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The URL path of the collection, of the object ``name``, or of that object's subresource."""
        parts = [self.api_path]
        if self.namespaced and namespace is not None:
            parts += ["namespaces", namespace]
        parts.append(self.plural)
        if name is not None:
            parts.append(name)
            if self.subresource:
                parts.append(self.subresource)
        return "/".join(parts)


JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")
PODS = Resource("", "v1", "pods", "Pod")
EVENTS = Resource("", "v1", "events", "Event")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
SECRETS = Resource("", "v1", "secrets", "Secret")
POD_LOGS = Resource("", "v1", "pods", "Pod", subresource="log")
POD_PORTFORWARD = Resource("", "v1", "pods", "Pod", subresource="portforward")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False)
ACCESS_REVIEWS = Resource(
    "authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", namespaced=False
)


def localqueues(version: str) -> Resource:
    return Resource("kueue.x-k8s.io", version, "localqueues", "LocalQueue")


Missing = Literal["object", "namespace", "type"]  # what a 404 lacked; "type": the API type is not served


class ApiError(ClusterError):
    """A failed request; ``status`` is the HTTP status (None when no answer came back)."""

    def __init__(
        self, message: str, *, status: int | None = None, missing: Missing | None = None, hint: str | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.status = status
        self.missing = missing


@dataclass(frozen=True)
class Action:
    """What a request was for, in RBAC terms, so errors can say which permission is missing."""

    verb: str  # get, list, create, patch, delete, ...
    resource: Resource | None  # None for discovery
    namespace: str | None = None
    name: str | None = None

    def describe(self) -> str:
        if self.resource is None:
            return f"{self.verb} the API discovery document {self.name or ''}".rstrip()
        target = f"{self.resource.display} {self.name!r}" if self.name else self.resource.display
        where = f" in namespace {self.namespace!r}" if self.namespace and self.resource.namespaced else ""
        return f"{self.verb} {target}{where}"


class Clock(Protocol):
    """Time as cluster code sees it: ``now``/``sleep`` for timeouts and polling, ``utc_now`` for ages."""

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    def utc_now(self) -> datetime: ...


class SystemClock:
    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def utc_now(self) -> datetime:
        return datetime.now(UTC)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff: ``attempts`` tries in all, waits of base, 2 x base, ... capped."""

    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 8.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        backoff = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        return min(self.max_delay, retry_after) if retry_after is not None else backoff


@dataclass
class Kube:
    """A connection to one cluster (one kubeconfig context or the in-cluster identity)."""

    api_client: Any
    context: str | None
    namespace: str  # the context's default namespace
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    clock: Clock = field(default_factory=SystemClock)
    timeout: tuple[float, float] = DEFAULT_TIMEOUT
    sent: int = 0  # HTTP requests sent, retries included
    _sent_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def host(self) -> str:
        return str(self.api_client.configuration.host)

    def request(
        self,
        action: Action,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str | None = None,
        accept: str = "application/json",
        stream: bool = False,
    ) -> Any:
        """Send one request (retrying transient failures); the parsed JSON answer, or the raw response if
        ``stream``. Every failure is a ``ClusterError`` that says what to do."""
        attempt = 0
        while True:
            attempt += 1
            with self._sent_lock:
                self.sent += 1
            try:
                return self._send_once(method, path, query, body, content_type, accept, stream)
            except Exception as exc:  # classified below: transport and API errors become ApiError
                if not _is_transport_or_api_error(exc):
                    raise
                if not _retryable(exc) or attempt >= self.retry.attempts:
                    raise cluster_error(exc, action, attempts=attempt, kube=self) from None
                self.clock.sleep(self.retry.delay(attempt, _retry_after(exc)))

    def _send_once(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]],
        body: Any,
        content_type: str | None,
        accept: str,
        stream: bool,
    ) -> Any:
        from kubernetes.client.exceptions import ApiException

        headers = {"Accept": accept}
        if content_type is not None:
            headers["Content-Type"] = content_type
        elif body is not None:
            headers["Content-Type"] = "application/json"
        method, url, headers, body, post = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        timeout = (self.timeout[0], None) if stream else self.timeout
        response = self.api_client.call_api(method, url, headers, body, post, _request_timeout=timeout)
        if not 200 <= response.status < 300:
            raise ApiException(http_resp=response.response)
        if stream:
            return response.response
        data = response.read()
        return json.loads(data) if data else {}

    def stream_lines(self, action: Action, path: str, query: Sequence[tuple[str, str]]) -> Iterator[str]:
        """Lines of a streamed text response (pod logs), as they arrive."""
        import urllib3

        raw = self.request(action, "GET", path, query=query, stream=True)
        pending = b""
        try:
            for chunk in raw.stream(4096, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line.decode("utf-8", "replace")
            if pending:
                yield pending.decode("utf-8", "replace")
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ApiError(
                f"the stream to {action.describe()} broke off: {exc}", hint="run the command again"
            ) from None
        finally:
            raw.release_conn()

    def open_websocket(
        self, action: Action, path: str, query: Sequence[tuple[str, str]], *, subprotocols: Sequence[str]
    ) -> Any:
        """A connected WebSocket (websocket-client's ``WebSocket``) to a streaming subresource such as
        pods/portforward, authenticated as every request is. Sent once: the caller owns retries. A refused
        handshake is an ``ApiError`` from ``cluster_error``, like a refused request (``status`` None: no answer;
        ``stream_retryable`` says whether trying again may help)."""
        import websocket
        from kubernetes.client.exceptions import ApiException

        from pwdeploy.cluster.websockets import connect_websocket

        with self._sent_lock:
            self.sent += 1
        _, url, headers, _, _ = self.api_client.param_serialize(
            method="GET", resource_path=path, query_params=list(query), header_params={}, auth_settings=["BearerToken"]
        )
        try:
            return connect_websocket(
                self.api_client.configuration, url, headers, subprotocols, connect_timeout=self.timeout[0]
            )
        except websocket.WebSocketBadStatusException as exc:
            refused = ApiException(status=exc.status_code, reason=exc.status_message or "")
            refused.body = exc.resp_body.decode("utf-8", "replace") if exc.resp_body else None
            refused.headers = exc.resp_headers
            raise cluster_error(refused, action, kube=self) from None
        except (websocket.WebSocketException, OSError) as exc:
            raise cluster_error(exc, action, kube=self) from None


def stream_retryable(error: ApiError) -> bool:
    """Whether a stream that could not be opened may open on a later try: no answer, 429 or 5xx."""
    return error.status is None or error.status in RETRYABLE_STATUS


# ---------------------------------------------------------------------------------------------- errors


def _is_transport_or_api_error(exc: Exception) -> bool:
    import urllib3
    from kubernetes.client.exceptions import ApiException

    return isinstance(exc, (ApiException, urllib3.exceptions.HTTPError, OSError))


def _retryable(exc: Exception) -> bool:
    import urllib3
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        return exc.status in RETRYABLE_STATUS
    if isinstance(exc, urllib3.exceptions.MaxRetryError):
        exc = exc.reason or exc
    if isinstance(exc, urllib3.exceptions.SSLError):
        return False  # certificate problems do not heal by waiting
    # NewConnectionError (refused, DNS) is a TimeoutError subclass in urllib3 2: retried as well.
    return isinstance(exc, (urllib3.exceptions.TimeoutError, urllib3.exceptions.ProtocolError, OSError))


def _retry_after(exc: Exception) -> float | None:
    headers = getattr(exc, "headers", None)
    value = headers.get("Retry-After") if headers else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def api_status(exc: Exception) -> dict[str, Any]:
    """The Kubernetes ``Status`` object in an error response ({} when the body is not one)."""
    body = getattr(exc, "body", None)
    try:
        parsed = json.loads(body) if body else {}
    except (TypeError, ValueError):
        return {}
    return parsed if isinstance(parsed, dict) and parsed.get("kind") == "Status" else {}


def cluster_error(exc: Exception, action: Action, *, attempts: int = 1, kube: Kube | None = None) -> ApiError:
    """The one place where a failed request becomes a message a user can act on."""
    from kubernetes.client.exceptions import ApiException

    where = ""
    if kube is not None:
        where = f" (context {kube.context!r}, {kube.host})" if kube.context else f" ({kube.host})"
    tried = f" after {attempts} attempts" if attempts > 1 else ""
    if not isinstance(exc, ApiException) or not exc.status:
        reason = getattr(exc, "reason", None) or exc
        return ApiError(
            f"cannot reach the Kubernetes API server{where} to {action.describe()}{tried}: {reason}",
            hint=f"check the network path to the cluster and the credentials ({GET_CREDENTIALS})",
        )
    status = api_status(exc)
    message = status.get("message") or exc.reason or ""
    code = int(exc.status)
    if code == 401:
        return ApiError(
            f"the API server{where} rejected the credentials (401 Unauthorized) to {action.describe()}",
            status=code,
            hint=f"the kubeconfig's token or certificate is missing or expired; refresh it ({GET_CREDENTIALS})",
        )
    if code == 403:
        return ApiError(f"forbidden (403): {message}", status=code, hint=rbac_hint(action))
    if code == 404:
        return _not_found(action, status, message)
    if code == 409:
        return ApiError(
            f"conflict (409) to {action.describe()}: {message}",
            status=code,
            hint="the object changed or already exists; `pwdeploy submit --replace` recreates a job",
        )
    if code == 422:
        return _invalid(action, status, message)
    if code in RETRYABLE_STATUS:
        return ApiError(
            f"the API server{where} failed to {action.describe()}{tried}: {code} {message}".rstrip(),
            status=code,
            hint="the control plane may be upgrading or overloaded; try again in a minute",
        )
    return ApiError(f"the API server refused to {action.describe()}: {code} {message}".rstrip(), status=code)


def _invalid(action: Action, status: dict[str, Any], message: str) -> ApiError:
    """422: one line per field path the API server named."""
    causes = (status.get("details") or {}).get("causes") or []
    lines = [f"{c.get('field', '?')}: {c.get('message', c.get('reason', ''))}" for c in causes] or [message]
    detail = "\n".join(f"  - {line}" for line in lines)
    return ApiError(f"the API server rejected the request to {action.describe()} (422 Invalid):\n{detail}", status=422)


def rbac_hint(action: Action) -> str:
    """The RBAC rule that grants ``action``, and the ``kubectl auth can-i`` line that checks it."""
    if action.resource is None:
        return "the identity needs read access to API discovery (the system:discovery ClusterRole)"
    res = action.resource
    scope = f"a Role in namespace {action.namespace}" if res.namespaced and action.namespace else "a ClusterRole"
    ns = f" -n {action.namespace}" if res.namespaced and action.namespace else ""
    subresource = f" --subresource={res.subresource}" if res.subresource else ""
    return (
        f"bind this identity to {scope} with the rule apiGroups: [{json.dumps(res.group)}], "
        f"resources: [{res.rbac_resource}], verbs: [{action.verb}]; check with: kubectl auth can-i {action.verb} "
        f"{res.plural}{'.' + res.group if res.group else ''}{subresource}{ns}"
    )


def _not_found(action: Action, status: dict[str, Any], message: str) -> ApiError:
    details = status.get("details") or {}
    res = action.resource
    if res is None or not details.get("name"):
        # A Status without details.name is the server's answer for an unknown path: the type is not served.
        what = res.group_version if res is not None else (action.name or "the API")
        return ApiError(
            f"the API server does not serve {what} (404): {message}",
            status=404,
            missing="type",
            hint="its CustomResourceDefinition is not installed in this cluster",
        )
    if details.get("kind") == "namespaces" and details.get("name") in (action.namespace, action.name):
        namespace = details["name"]
        return ApiError(
            f"namespace {namespace!r} does not exist",
            status=404,
            missing="namespace",
            hint=f"create it (kubectl create namespace {namespace}) or set `namespace` in the job",
        )
    return ApiError(
        f"{res.kind} {action.name!r} not found in namespace {action.namespace!r}", status=404, missing="object"
    )
