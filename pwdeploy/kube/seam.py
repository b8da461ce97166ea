"""The Kubernetes API seam: every request goes through ``Kube.request``, which counts what it sends.

Requests are sent with pwdeploy.kube.http_client's ``ApiClient`` (urllib3) and answered as plain dicts (or, for logs,
a stream of lines). A failed request becomes an ``ApiError`` in one function (``cluster_error``); server errors
(5xx, 429) and timeouts are retried with bounded backoff on the connection's clock (``Kube.clock``, passed in by
the caller). One ``Kube`` may be shared by threads: the client's connection pool is thread-safe.

Answers are untrusted input: a body that is not a JSON object (an HTML page from a proxy, a truncated body), a list
whose ``items`` is not a list of objects, or an answer bigger than ``MAX_ANSWER_BYTES`` is an ``ApiError`` with the
status and the first bytes of the answer, never an exception from deeper down. One request, retries included, ends
within ``Kube.deadline`` seconds (wall time); when it takes longer than ``Kube.slow_after``, ``Kube.on_wait`` is
told once which server and which request it is waiting for. ``Kube.read_once`` is for what is worth a glance, not
a wait (the end of a log while a job starts): one GET, never retried, whole within a few seconds.

The resources and actions (``pwdeploy.kube.resources``), the bounds and the clock (``pwdeploy.kube.bounds``), the
failures (``pwdeploy.kube.api_failures``) and the error conversion (``pwdeploy.kube.api_errors``) live in modules of
their own and are imported from here as one vocabulary.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pwdeploy.errors import PwdeployError
from pwdeploy.kube.answers import (
    BadAnswer,
    OutOfTime,
    items_of,
    json_object,
    read_answer,
    read_within,
    without_userinfo,
)
from pwdeploy.kube.api_errors import (
    GET_CREDENTIALS,
    RETRYABLE_STATUS,
    ApiError,
    Missing,
    api_status,
    cluster_error,
    is_transport_or_api_error,
    no_answer_in_time,
    rbac_hint,
    retry_after,
    retryable,
    unsendable,
)
from pwdeploy.kube.api_failures import ExpiredList, malformed, reading_answers, stream_retryable
from pwdeploy.kube.bounds import (
    DEFAULT_DEADLINE,
    DEFAULT_TIMEOUT,
    LIST_PAGE,
    SLOW_AFTER,
    STREAM_CHUNK,
    Clock,
    RequestLimits,
    RetryPolicy,
    SystemClock,
    WatchBounds,
)
from pwdeploy.kube.http_client import HttpFailure
from pwdeploy.kube.paging import pages
from pwdeploy.kube.resources import (
    ACCESS_REVIEWS,
    CRDS,
    EVENTS,
    JOBS,
    JOBSETS,
    NAMESPACES,
    NODES,
    POD_LOGS,
    POD_PORTFORWARD,
    PODS,
    SECRETS,
    Action,
    Resource,
    localqueues,
)
from pwdeploy.kube.throttle import TOLD_AFTER_S, Throttle

# The seam's vocabulary, importable from here: resources, actions, bounds, errors.
__all__ = [
    "ACCESS_REVIEWS",
    "CRDS",
    "EVENTS",
    "GET_CREDENTIALS",
    "JOBS",
    "JOBSETS",
    "LIST_PAGE",
    "NAMESPACES",
    "NODES",
    "PODS",
    "POD_LOGS",
    "POD_PORTFORWARD",
    "RETRYABLE_STATUS",
    "SECRETS",
    "STREAM_CHUNK",
    "Action",
    "ApiError",
    "Clock",
    "Kube",
    "Missing",
    "RequestLimits",
    "Resource",
    "RetryPolicy",
    "SystemClock",
    "WatchBounds",
    "api_status",
    "cluster_error",
    "localqueues",
    "malformed",
    "rbac_hint",
    "reading_answers",
    "stream_retryable",
]


class Request(NamedTuple):
    """One request as ``Kube.request`` was asked for it; each attempt sends it again."""

    method: str
    path: str
    query: tuple[tuple[str, str], ...]
    body: Any
    content_type: str | None
    accept: str
    stream: bool


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
    impersonate: tuple[tuple[str, str], ...] = ()  # Impersonate-* headers (pwdeploy.kube.impersonation), in order
    throttle: Throttle | None = None  # the client-side rate limit (pwdeploy.kube.throttle); None: none
    watch_bounds: WatchBounds = field(default_factory=WatchBounds)
    sent: int = 0  # HTTP requests sent, retries included
    _sent_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _told_throttled: bool = field(default=False, repr=False, compare=False)

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
            return self._attempts(
                action, Request(method, path, tuple(query), body, content_type, accept, stream), started
            )
        finally:
            if notice is not None:
                notice.cancel()

    def list_items(self, action: Action, path: str, *, query: Sequence[tuple[str, str]] = ()) -> list[dict[str, Any]]:
        """The ``items`` of a list, read in pages (``iter_items``), each an object with ``metadata``; any other
        shape is an ``ApiError``. When a continue token expires mid-way (410: the list changed past what the
        server keeps), the list is read again once, whole, as client-go's pager does (FullListIfExpired)."""
        try:
            return list(self.iter_items(action, path, query=query))
        except ExpiredList:
            try:
                return items_of(self.request(action, "GET", path, query=query))
            except BadAnswer as bad:
                raise malformed(action, self, bad.what, bad.status) from None

    def iter_items(
        self,
        action: Action,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        page: int = LIST_PAGE,
        versions: list[str] | None = None,
        first_page: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        """The items of a list as its pages arrive (pwdeploy.kube.paging: ``limit`` items an answer, then the
        answer's ``metadata.continue`` token). A token that expired (410) is an ``ExpiredList`` (the items yielded
        so far are a part of an older list); a token of the wrong shape, or more than ``MAX_PAGES`` pages, is an
        ``ApiError``. ``versions`` gets each page's
        ``metadata.resourceVersion`` (every page of one list has the first page's: where a watch starts);
        ``first_page``: fewer items in the first answer, which then comes sooner (a caller that acts on the first
        items at once)."""
        for answer in pages(self, action, path, query=query, size=page, first_page=first_page):
            try:
                yield from items_of(answer)
            except BadAnswer as bad:
                raise malformed(action, self, bad.what, bad.status) from None
            meta = answer.get("metadata") or {}  # checked to be an object
            if versions is not None and isinstance(meta.get("resourceVersion"), str):
                versions.append(meta["resourceVersion"])

    def _attempts(self, action: Action, request: Request, started: float) -> Any:
        attempt = 0
        while True:
            attempt += 1
            self._count_sent(action)
            left = self.deadline - (time.monotonic() - started)
            try:
                answer = self._send_once(request, left)
            except BadAnswer as bad:
                raise malformed(action, self, bad.what, bad.status) from None
            except PwdeployError:  # a ConfigError from a credential refresh, say
                raise
            except Exception as exc:  # classified below: transport and API errors become ApiError
                if not is_transport_or_api_error(exc):
                    raise unsendable(exc, action, self) from exc
                delay = self.retry.delay(attempt, retry_after(exc))
                out_of_time = time.monotonic() - started + delay >= self.deadline
                if not retryable(exc) or attempt >= self.retry.attempts or out_of_time:
                    raise cluster_error(exc, action, attempts=attempt, kube=self) from None
                self.clock.sleep(delay)
                continue
            return answer

    def _count_sent(self, action: Action) -> None:
        """Take a token of the client-side rate limit, then count the request as sent. A wait of over a second is
        said once (client-go logs each: "Waited for ... due to client-side throttling, not priority and
        fairness"), so a slow command is not blamed on the server."""
        waited = self.throttle.take() if self.throttle is not None else 0.0
        with self._sent_lock:
            self.sent += 1
            tell = waited > TOLD_AFTER_S and not self._told_throttled and self.on_wait is not None
            self._told_throttled = self._told_throttled or tell
        if tell and self.on_wait is not None and self.throttle is not None:
            self.on_wait(
                f"waited {waited:.1f} s to {action.describe()}: pwdeploy's own rate limit "
                f"({self.throttle.limit.describe()}; --kube-api-qps, --kube-api-burst), not the API server"
            )

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

    def read_once(
        self, action: Action, path: str, query: Sequence[tuple[str, str]], *, within: float, max_bytes: int
    ) -> bytes:
        """The body of one GET, sent once and never retried: connecting, the answer's head and its whole body
        within ``within`` seconds, at most ``max_bytes`` of it. For what is worth a glance, not a wait (the end of
        a log while a job starts). Every failure is an ``ApiError`` saying which component failed
        (``cluster_error``'s); no whole answer in time is a ``NoAnswerInTime``."""
        import urllib3

        self._count_sent(action)
        deadline_at = time.monotonic() + within
        try:
            raw = self._send_once(
                Request("GET", path, tuple(query), None, None, "application/json", True), within, once=True
            )
            return read_within(raw, deadline_at, max_bytes)
        except OutOfTime as late:
            raise no_answer_in_time(action, within, self, arrived=late.arrived) from None
        except BadAnswer as bad:
            raise malformed(action, self, bad.what, bad.status) from None
        except PwdeployError:
            raise
        except Exception as exc:
            if not is_transport_or_api_error(exc):
                raise unsendable(exc, action, self) from exc
            if isinstance(exc, urllib3.exceptions.ReadTimeoutError):  # sent, and no answer's head in time
                raise no_answer_in_time(action, within, self, arrived=0) from None
            raise cluster_error(exc, action, kube=self) from None

    def _send_once(self, request: Request, left: float, *, once: bool = False) -> Any:
        """The raw response if ``request.stream``, else the answer's JSON object; a ``BadAnswer`` if it is none.
        ``once``: connecting and the answer's head, together, within ``left`` seconds (``read_once``)."""
        headers = {"Accept": request.accept}
        if request.content_type is not None:
            headers["Content-Type"] = request.content_type
        elif request.body is not None:
            headers["Content-Type"] = "application/json"
        client = self.api_client
        sent: Any = client.headers(headers)
        if self.impersonate:  # one header line per group and extra value, as the API server reads them
            import urllib3

            sent = urllib3.HTTPHeaderDict(sent)
            for name, value in self.impersonate:
                sent.add(name, value)
        stream = request.stream
        read = round(max(0.1, min(self.timeout[1], left)), 1)
        following = stream and ("follow", "true") in request.query  # `logs -f` may rightly wait long for a line
        watching = stream and ("watch", "true") in request.query  # a watch is silent until a change or a bookmark
        streamed = None if following else self.watch_bounds.silence if watching else self.timeout[1]
        timeout = (min(self.timeout[0], read), streamed if stream else read)
        url = client.url(request.path, request.query)
        if once:
            response = client.request(request.method, url, sent, request.body, (left, left), total=left)
        else:
            response = client.request(request.method, url, sent, request.body, timeout)
        if stream and 200 <= response.status < 300:
            return response
        answer = read_answer(response, time.monotonic() + left)
        if not 200 <= response.status < 300:
            body = answer.data.decode("utf-8", "replace")
            raise HttpFailure(response.status, str(response.reason or ""), body, response.headers)
        return json_object(answer)

    def stream_lines(self, action: Action, path: str, query: Sequence[tuple[str, str]]) -> Iterator[str]:
        """Lines of a streamed text response (pod logs), as they arrive. Each chunk is scanned once, so a long
        line without a newline costs time in proportion to its size."""
        pending: list[bytes] = []
        for chunk in self.stream_bytes(action, path, query):
            start = 0
            while (end := chunk.find(b"\n", start)) != -1:
                pending.append(chunk[start:end])
                yield b"".join(pending).decode("utf-8", "replace")
                pending, start = [], end + 1
            if start < len(chunk):
                pending.append(chunk[start:])
        if pending:
            yield b"".join(pending).decode("utf-8", "replace")

    def stream_bytes(self, action: Action, path: str, query: Sequence[tuple[str, str]]) -> Iterator[bytes]:
        """The bytes of a streamed response (pod logs) as they arrive, unchanged: what ``kubectl logs`` prints."""
        import urllib3

        raw = self.request(action, "GET", path, query=query, stream=True)
        try:
            yield from raw.stream(STREAM_CHUNK, decode_content=True)
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
        ``stream_retryable`` says whether trying again may help): pwdeploy.kube.websockets.open_websocket."""
        from pwdeploy.kube.websockets import open_websocket

        self._count_sent(action)
        return open_websocket(self, action, path, query, subprotocols)
