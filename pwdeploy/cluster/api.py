"""The Kubernetes API seam: every request goes through ``Kube.request``, which counts what it sends.

Requests are sent with the official client's ``ApiClient`` and answered as plain dicts (or, for logs, a stream of
lines). A failed request becomes an ``ApiError`` in one function (``cluster_error``); server errors (5xx, 429) and
timeouts are retried with bounded backoff on the connection's clock (``Kube.clock``, passed in by the caller).
One ``Kube`` may be shared by threads: the client's connection pool is thread-safe.

Answers are untrusted input: a body that is not a JSON object (an HTML page from a proxy, a truncated body), a list
whose ``items`` is not a list of objects, or an answer bigger than ``MAX_ANSWER_BYTES`` is an ``ApiError`` with the
status and the first bytes of the answer, never an exception from deeper down. One request, retries included, ends
within ``Kube.deadline`` seconds (wall time); when it takes longer than ``Kube.slow_after``, ``Kube.on_wait`` is
told once which server and which request it is waiting for.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from pwdeploy.cluster.answers import (
    BadAnswer,
    excerpt,
    items_of,
    json_object,
    printable,
    read_answer,
    without_userinfo,
)
from pwdeploy.errors import ClusterError, PwdeployError

GET_CREDENTIALS = "GKE: gcloud container clusters get-credentials CLUSTER --location LOCATION"
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
DEFAULT_TIMEOUT = (10.0, 20.0)  # (connect, read) seconds of one attempt
DEFAULT_DEADLINE = 45.0  # seconds one request may take, retries included: a hung server ends the run in bounded time
SLOW_AFTER = 5.0  # seconds after which the user is told what the command is waiting for


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
    """A failed request, or an answer that is not what the API promises; ``status`` is the HTTP status (None when no
    answer came back)."""

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
    deadline: float = DEFAULT_DEADLINE  # wall seconds for one request, retries included
    slow_after: float = SLOW_AFTER  # wall seconds before ``on_wait`` hears that a request is slow
    on_wait: Callable[[str], None] | None = None  # the CLI prints these notices on stderr
    sent: int = 0  # HTTP requests sent, retries included
    _sent_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def host(self) -> str:
        """The API server's URL, without any user:password@ the kubeconfig put in it."""
        return without_userinfo(str(self.api_client.configuration.host))

    def where(self) -> str:
        """`` (context 'x', https://host)``: which server a message is about."""
        return f" (context {self.context!r}, {self.host})" if self.context else f" ({self.host})"

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
        """Send one request (retrying transient failures); the answer, a JSON object, or the raw response if
        ``stream``. Every failure, a malformed answer included, is a ``ClusterError`` that says what to do."""
        started = time.monotonic()
        notice = self._wait_notice(action)
        try:
            return self._attempts(action, method, path, query, body, content_type, accept, stream, started)
        finally:
            if notice is not None:
                notice.cancel()

    def list_items(self, action: Action, path: str, *, query: Sequence[tuple[str, str]] = ()) -> list[dict[str, Any]]:
        """The ``items`` of a list answer, each an object with ``metadata``; any other shape is an ``ApiError``."""
        try:
            return items_of(self.request(action, "GET", path, query=query))
        except BadAnswer as bad:
            raise _malformed(action, self, bad.what, bad.status) from None

    def _attempts(
        self,
        action: Action,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]],
        body: Any,
        content_type: str | None,
        accept: str,
        stream: bool,
        started: float,
    ) -> Any:
        attempt = 0
        while True:
            attempt += 1
            with self._sent_lock:
                self.sent += 1
            left = self.deadline - (time.monotonic() - started)
            try:
                answer = self._send_once(method, path, query, body, content_type, accept, stream, left)
            except BadAnswer as bad:
                raise _malformed(action, self, bad.what, bad.status) from None
            except PwdeployError:  # a ConfigError from a credential refresh, say
                raise
            except Exception as exc:  # classified below: transport and API errors become ApiError
                if not _is_transport_or_api_error(exc):
                    raise _unsendable(exc, action, self) from exc
                delay = self.retry.delay(attempt, _retry_after(exc))
                out_of_time = time.monotonic() - started + delay >= self.deadline
                if not _retryable(exc) or attempt >= self.retry.attempts or out_of_time:
                    raise cluster_error(exc, action, attempts=attempt, kube=self) from None
                self.clock.sleep(delay)
                continue
            return answer

    def _wait_notice(self, action: Action) -> threading.Timer | None:
        """A timer that tells ``on_wait`` once, after ``slow_after`` seconds, what this request waits for."""
        if self.on_wait is None:
            return None
        line = (
            f"still waiting for the Kubernetes API server{self.where()} to {action.describe()} "
            f"(giving up after {self.deadline:.0f} s)"
        )
        timer = threading.Timer(self.slow_after, self.on_wait, args=(line,))
        timer.daemon = True
        timer.start()
        return timer

    def _send_once(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]],
        body: Any,
        content_type: str | None,
        accept: str,
        stream: bool,
        left: float,
    ) -> Any:
        """The raw response if ``stream``, else the answer's JSON object; a ``BadAnswer`` if it is none."""
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
        read = round(max(0.1, min(self.timeout[1], left)), 1)
        timeout = (min(self.timeout[0], read), None if stream else read)
        response = self.api_client.call_api(method, url, headers, body, post, _request_timeout=timeout)
        if stream and 200 <= response.status < 300:
            return response.response
        answer = read_answer(response.response, time.monotonic() + left)
        if not 200 <= response.status < 300:
            raise ApiException(http_resp=response.response, body=answer.data.decode("utf-8", "replace"))
        return json_object(answer)

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


# ---------------------------------------------------------------------------------------------- answers


def _malformed(action: Action, kube: Kube | None, what: str, status: int | None) -> ApiError:
    where = kube.where() if kube is not None else ""
    return ApiError(
        f"the API server{where} answered the request to {action.describe()} with {what}",
        status=status,
        hint="something between you and the API server (a proxy, a load balancer) may have answered instead; "
        "check the kubeconfig's server URL and run the command again",
    )


# What reading a field of the wrong JSON type raises ('str' object has no attribute 'get', ...).
SHAPE_ERRORS = (AttributeError, KeyError, TypeError, IndexError)


@contextmanager
def reading_answers(kube: Kube) -> Iterator[None]:
    """Code that reads fields deep inside answers runs in here: a field of the wrong JSON type (a hostile or broken
    server's ``status.conditions: "x"``) becomes an ``ApiError`` instead of an internal error. The request path
    already checks the shapes every object shares (``object_shape``, ``list_items``)."""
    try:
        yield
    except SHAPE_ERRORS as exc:
        raise ApiError(
            f"an answer of the API server{kube.where()} has a shape pwdeploy does not understand "
            f"({type(exc).__name__}: {str(exc)[:200]})",
            hint="is the server URL a Kubernetes API server? --debug shows where the answer was read; "
            "if it is one, please report this",
        ) from exc


# ---------------------------------------------------------------------------------------------- errors


def _unsendable(exc: Exception, action: Action, kube: Kube) -> ApiError:
    """The client library refused to send the request; its message is not shown, since it may quote a header (the
    bearer token: ``Invalid header value b'Bearer ...'``)."""
    return ApiError(
        f"the request to {action.describe()} could not be sent to the API server{kube.where()} "
        f"({type(exc).__name__} in the Kubernetes client)",
        hint="check the kubeconfig's credentials for this context; --debug shows the traceback",
    )


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
    """The Kubernetes ``Status`` object in an error response ({} when the body is not one), its ``details`` a
    mapping and their ``causes`` a list of mappings, whatever the server sent."""
    body = getattr(exc, "body", None)
    try:
        parsed = json.loads(body) if body else {}
    except (TypeError, ValueError):
        return {}
    if not isinstance(parsed, dict) or parsed.get("kind") != "Status":
        return {}
    details = parsed.get("details")
    details = details if isinstance(details, dict) else {}
    causes = details.get("causes")
    causes = causes if isinstance(causes, list) else []
    return {**parsed, "details": {**details, "causes": [c for c in causes if isinstance(c, dict)]}}


def cluster_error(exc: Exception, action: Action, *, attempts: int = 1, kube: Kube | None = None) -> ApiError:
    """The one place where a failed request becomes a message a user can act on."""
    from kubernetes.client.exceptions import ApiException

    where = kube.where() if kube is not None else ""
    tried = f" after {attempts} attempts" if attempts > 1 else ""
    if not isinstance(exc, ApiException) or not exc.status:
        reason = getattr(exc, "reason", None) or exc
        return ApiError(
            f"cannot reach the Kubernetes API server{where} to {action.describe()}{tried}: {reason}",
            hint=f"check the network path to the cluster and the credentials ({GET_CREDENTIALS})",
        )
    status = api_status(exc)
    message = printable(str(status.get("message") or "")) or _reason_and_excerpt(exc)
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


def _reason_and_excerpt(exc: Any) -> str:
    """An error answer that is not a ``Status`` (a proxy's page): its reason and its first bytes."""
    body = getattr(exc, "body", None) or ""
    quoted = f" (answer: {excerpt(body.encode() if isinstance(body, str) else body)})" if body else ""
    return f"{exc.reason or ''}{quoted}".strip()


def _invalid(action: Action, status: dict[str, Any], message: str) -> ApiError:
    """422: one line per field path the API server named."""
    causes = (status.get("details") or {}).get("causes") or []
    lines = [printable(f"{c.get('field', '?')}: {c.get('message', c.get('reason', ''))}") for c in causes] or [message]
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
