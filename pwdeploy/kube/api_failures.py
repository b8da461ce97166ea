"""The failures a request to the Kubernetes API ends in, as pwdeploy raises them: ``ApiError`` (which component
failed, what a 404 lacked, whether trying again can help) and its kinds for a kubelet, an admission webhook and an
answer that did not come in time. pwdeploy.kube.api_errors decides which one a failed answer is, and words it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal, Protocol

from pwdeploy.errors import ClusterError
from pwdeploy.kube.resources import Action

KUBELET_SUBRESOURCES = frozenset({"log", "portforward", "exec", "attach"})  # served by the pod's node
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


class Located(Protocol):
    """What an error message needs of the client: where the API server is (`` at https://...``, or '')."""

    def where(self) -> str: ...


Missing = Literal["object", "namespace", "type"]  # what a 404 lacked; "type": the API type is not served
Component = Literal["api-server", "kubelet", "webhook"]  # which one failed (see the module's docstring)


class ApiError(ClusterError):
    """A failed request, or an answer that is not what the API promises; ``status`` is the HTTP status (None when no
    answer came back); ``lasting``: trying again cannot help, whatever the status says (a certificate the client
    does not trust, a WebSocket subprotocol the server does not speak)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        missing: Missing | None = None,
        hint: str | None = None,
        lasting: bool = False,
        component: Component = "api-server",
    ) -> None:
        super().__init__(message, hint=hint)
        self.status = status
        self.missing = missing
        self.lasting = lasting
        self.component: Component = component


class KubeletError(ApiError):
    """The API server answered, but the kubelet it passes the request to (logs, port-forward) failed: ``node`` is
    the address the API server dialled (``10.0.0.5``), '' when its message names none. Catch it to tell a node
    that cannot serve a log from a control plane in trouble; trying again within seconds does not help."""

    def __init__(self, message: str, *, status: int | None, node: str, hint: str) -> None:
        super().__init__(message, status=status, hint=hint, lasting=True, component="kubelet")
        self.node = node


class NoAnswerInTime(ApiError):
    """A request sent once with a short bound (``Kube.read_once``) that got no whole answer in time: ``within``
    seconds. For a request the API server passes to a kubelet (a pod's log), the kubelet is the likely one late
    (``component``): an API server that cannot reach it answers 500 by itself (a ``KubeletError``)."""

    def __init__(self, message: str, *, within: float, component: Component, hint: str) -> None:
        super().__init__(message, hint=hint, component=component)
        self.within = within


class WebhookError(ApiError):
    """An admission webhook (``webhook``: its name, ``mjobset.kb.io``) refused the object (``denied``) or could
    not be called by the API server (down, or it timed out). Never an RBAC matter; never retried."""

    def __init__(self, message: str, *, status: int | None, webhook: str, denied: bool, hint: str) -> None:
        super().__init__(message, status=status, hint=hint, lasting=True, component="webhook")
        self.webhook, self.denied = webhook, denied


def no_answer_in_time(action: Action, within: float, kube: Located, *, arrived: int) -> NoAnswerInTime:
    """No whole answer within ``within`` seconds (``arrived``: bytes of it that did); which component is late."""
    late = f" ({arrived} bytes arrived)" if arrived else ""
    res = action.resource
    if res is not None and res.subresource in KUBELET_SUBRESOURCES:
        return NoAnswerInTime(
            f"no answer within {within:g} s{late} to {action.describe()}: the API server{kube.where()} passes it "
            "to the kubelet of the pod's node, which is the likely one not answering",
            within=within,
            component="kubelet",
            hint="if `kubectl get --raw /readyz` answers at once, the API server is fine and the node's kubelet "
            "(port 10250) is slow or unreachable: check the node (kubectl get pods -o wide names it; kubectl get "
            "node NODE); otherwise the control plane is slow or overloaded",
        )
    return NoAnswerInTime(
        f"the API server{kube.where()} did not answer the request to {action.describe()} within {within:g} s{late}",
        within=within,
        component="api-server",
        hint="the control plane may be upgrading or overloaded; try again in a minute",
    )


class ExpiredList(ApiError):
    """A paged list whose continue token expired (410) after some of its pages were read."""


def stream_retryable(error: ApiError) -> bool:
    """Whether a stream that could not be opened may open on a later try: no answer, 429 or 5xx (a TLS failure is
    no answer that lasts: ``ApiError.lasting``)."""
    return not error.lasting and (error.status is None or error.status in RETRYABLE_STATUS)


# ---------------------------------------------------------------------------------------------- answers


def malformed(action: Action, kube: Located | None, what: str, status: int | None) -> ApiError:
    """An answer of the wrong shape, as an ``ApiError`` naming the request and what was wrong with it."""
    where = kube.where() if kube is not None else ""
    return ApiError(
        f"the API server{where} answered the request to {action.describe()} with {what}",
        status=status,
        hint="something between you and the API server (a proxy, a load balancer) may have answered instead; "
        "check the kubeconfig's server URL and run the command again",
    )


# What reading a field of the wrong JSON type raises ('str' object has no attribute 'get', ...; int("lots")).
SHAPE_ERRORS = (AttributeError, KeyError, TypeError, IndexError, ValueError)


@contextmanager
def reading_answers(kube: Located) -> Iterator[None]:
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
