"""Where a failed request to the Kubernetes API becomes a message a user can act on (``cluster_error``): the
status, what was asked, the RBAC rule a 403 lacks, the fields a 422 names; the body of an answer is quoted only
as printable, bounded text.

Every error says which component failed, since the API server answers for three (``ApiError.component``):
- ``api-server``: the API server itself (unreachable, overloaded, RBAC, validation);
- ``kubelet``: a request the API server passes on to a node's kubelet (pod logs, port-forward) that the kubelet
  did not serve: the API server answers 500 quoting its own dial, ``Get "https://NODE:10250/containerLogs/...":
  ... connection refused`` (a ``KubeletError``, never retried: the node is down or unreachable, which waiting a few
  seconds does not mend);
- ``webhook``: an admission webhook the API server called for a write. It either refused the object
  (``admission webhook "NAME" denied the request: ...``, any 4xx the webhook chose: controller-runtime's denials
  are 403, which is not an RBAC refusal) or could not be called (``failed calling webhook "NAME": ...``, a 500:
  its Service has no ready pods, or it timed out). Both are a ``WebhookError``, never retried. The texts are the
  API server's: kubernetes/kubernetes staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/errors/
  statuserror.go (ToStatusErr) and staging/src/k8s.io/apiserver/pkg/util/webhook/error.go (ErrCallingWebhook).

A request sent once with a short bound (``Kube.read_once``) that gets no whole answer in time is a
``NoAnswerInTime``: for a request the API server passes to a kubelet, the kubelet is the likely one late (an API
server that cannot dial it answers 500 by itself), and the hint says how to tell the two apart.

A 500 whose message says a field is ``not declared in schema`` is server-side apply's answer when the CRD installed
is older than the object (structured-merge-diff's typed conversion): deterministic, so never retried, and its hint
names the CRD, not an upgrade of the control plane."""

from __future__ import annotations

import json
import re
from typing import Any, Literal, Protocol

from pwdeploy.errors import ClusterError
from pwdeploy.kube.answers import excerpt, printable
from pwdeploy.kube.http_client import HttpFailure
from pwdeploy.kube.resources import Action


class Located(Protocol):
    """What an error message needs of the client: where the API server is (`` at https://...``, or '')."""

    def where(self) -> str: ...


GET_CREDENTIALS = "GKE: gcloud container clusters get-credentials CLUSTER --location LOCATION"
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})

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


# What the API server's message says when the failure was not its own (see the module's docstring).
_WEBHOOK_DENIED = re.compile(r'admission webhook "([^"]{1,253})" denied the request')
_WEBHOOK_CALL = re.compile(r'failed calling webhook "([^"]{1,253})"')
_KUBELET_DIAL = re.compile(
    r'"https?://(\[[0-9a-fA-F:]+\]|[^/":\s]{1,253}):10250/(containerLogs|portForward|exec|attach|logs)/'
)
_NOT_IN_SCHEMA = "field not declared in schema"
KUBELET_SUBRESOURCES = frozenset({"log", "portforward", "exec", "attach"})  # served by the pod's node
# Kubelets that the API server reaches through a tunnel (GKE's Konnectivity) fail with the tunnel's words.
_KUBELET_TUNNEL = ("No agent available", "error dialing backend")


def failure_site(exc: Exception) -> Component:
    """Which component a failed request's answer blames: ``webhook``, ``kubelet`` or ``api-server``."""
    message = str(api_status(exc).get("message") or getattr(exc, "body", None) or "")
    if _WEBHOOK_DENIED.search(message) or _WEBHOOK_CALL.search(message):
        return "webhook"
    if _KUBELET_DIAL.search(message) or any(words in message for words in _KUBELET_TUNNEL):
        return "kubelet"
    return "api-server"


def deterministic(exc: Exception) -> bool:
    """An error answer that the same request would get again: not the API server's own transient trouble (a
    PodDisruptionBudget's 429 is a policy, not overload)."""
    message = str(api_status(exc).get("message") or "")
    return failure_site(exc) != "api-server" or _NOT_IN_SCHEMA in message or budget_refusal(exc) is not None


def budget_refusal(exc: Exception) -> str | None:
    """What the PodDisruptionBudget said when it refused an eviction (a 429 whose Status has a ``DisruptionBudget``
    cause: kubernetes pkg/registry/core/pod/storage/eviction.go, checkAndDecrement), or None."""
    causes = api_status(exc).get("details", {}).get("causes", []) if getattr(exc, "status", None) == 429 else []
    said = [str(c.get("message") or "") for c in causes if c.get("reason") == "DisruptionBudget"]  # Type, as JSON
    return printable("; ".join(filter(None, said)) or "the budget allows no disruption now", 500) if said else None


def unsendable(exc: Exception, action: Action, kube: Located) -> ApiError:
    """The client library refused to send the request; its message is not shown, since it may quote a header (the
    bearer token: ``Invalid header value b'Bearer ...'``)."""
    return ApiError(
        f"the request to {action.describe()} could not be sent to the API server{kube.where()} "
        f"({type(exc).__name__} in the Kubernetes client)",
        hint="check the kubeconfig's credentials for this context; --debug shows the traceback",
    )


def is_transport_or_api_error(exc: Exception) -> bool:
    import urllib3

    return isinstance(exc, (HttpFailure, urllib3.exceptions.HTTPError, OSError))


def retryable(exc: Exception) -> bool:
    import urllib3

    if isinstance(exc, HttpFailure):
        return exc.status in RETRYABLE_STATUS and not deterministic(exc)
    if isinstance(exc, urllib3.exceptions.MaxRetryError):
        exc = exc.reason or exc
    if isinstance(exc, urllib3.exceptions.SSLError):
        return False  # certificate problems do not heal by waiting
    # NewConnectionError (refused, DNS) is a TimeoutError subclass in urllib3 2: retried as well.
    return isinstance(exc, (urllib3.exceptions.TimeoutError, urllib3.exceptions.ProtocolError, OSError))


def retry_after(exc: Exception) -> float | None:
    headers = getattr(exc, "headers", None)
    value = headers.get("Retry-After") if headers else None
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds < float("inf") else None  # never negative, NaN, inf


def api_status(exc: Exception) -> dict[str, Any]:
    """The Kubernetes ``Status`` object in an error response ({} when the body is not one), its ``details`` a
    mapping and their ``causes`` a list of mappings, whatever the server sent."""
    body = getattr(exc, "body", None)
    try:
        parsed = json.loads(body) if body else {}
    except (TypeError, ValueError, RecursionError):
        return {}
    if not isinstance(parsed, dict) or parsed.get("kind") != "Status":
        return {}
    details = parsed.get("details")
    details = details if isinstance(details, dict) else {}
    causes = details.get("causes")
    causes = causes if isinstance(causes, list) else []
    return {**parsed, "details": {**details, "causes": [c for c in causes if isinstance(c, dict)]}}


def cluster_error(exc: Exception, action: Action, *, attempts: int = 1, kube: Located | None = None) -> ApiError:
    """The one place where a failed request becomes a message a user can act on."""
    where = kube.where() if kube is not None else ""
    tried = f" after {attempts} attempts" if attempts > 1 else ""
    if not isinstance(exc, HttpFailure) or not exc.status:
        reason = getattr(exc, "reason", None) or exc
        return ApiError(
            f"cannot reach the Kubernetes API server{where} to {action.describe()}{tried}: {reason}",
            hint=f"check the network path to the cluster and the credentials ({GET_CREDENTIALS})",
        )
    status = api_status(exc)
    message = _fitted(str(status.get("message") or "")) or _reason_and_excerpt(exc)
    code = int(exc.status)
    elsewhere = _webhook_error(action, code, message) or _kubelet_error(action, code, message, where)
    if elsewhere is not None:
        return elsewhere
    if code == 401:
        return ApiError(
            f"the API server{where} rejected the credentials (401 Unauthorized) to {action.describe()}",
            status=code,
            hint=f"the kubeconfig's token or certificate is missing or expired; refresh it ({GET_CREDENTIALS})",
        )
    if code == 403:
        return ApiError(
            f"forbidden (403): {message}",
            status=code,
            hint=f"the API server's authorization (RBAC) refused this identity: {rbac_hint(action)}",
        )
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
    if _NOT_IN_SCHEMA in message:
        return ApiError(
            f"the API server{where} cannot {action.describe()}: {code} {message}",
            status=code,
            lasting=True,
            hint=_schema_hint(action),
        )
    if (budget := budget_refusal(exc)) is not None:
        return ApiError(
            f"a PodDisruptionBudget refused to {action.describe()} (429): {budget}",
            status=code,
            hint="an eviction honours PodDisruptionBudgets, as `kubectl drain` does: see the budget (kubectl get "
            "pdb -n NAMESPACE), wait until it allows a disruption, or change it",
        )
    if code in RETRYABLE_STATUS:
        return ApiError(
            f"the API server{where} failed to {action.describe()}{tried}: {code} {message}".rstrip(),
            status=code,
            hint="the control plane may be upgrading or overloaded; try again in a minute",
        )
    return ApiError(f"the API server refused to {action.describe()}: {code} {message}".rstrip(), status=code)


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


# A field error quoting the object's new value before its reason (apimachinery's field.Error: ``<path>: Invalid
# value: <the value as JSON>: <detail>``): JobSet's webhook quotes a changed spec whole, 6.8 KB for a 2-slice job
# (kubernetes-sigs/jobset pkg/webhooks/jobset_webhook.go ValidateUpdate, ``field is immutable``).
_QUOTED_VALUE = re.compile(
    r"(?P<path>[\w.\[\]-]+): Invalid value: (?P<value>[\[{].{200,}[\]}]): (?P<detail>[^:\[\]{}]+)$", re.S
)


MESSAGE_CHARS = 2000  # of a server's message quoted in an error
MESSAGE_END_CHARS = 400  # the end of a longer one, kept: a field error's reason comes last


def _fitted(message: str) -> str:
    """A server's message made printable, a long quoted value left out (``short_field_error``), and, when still
    longer than MESSAGE_CHARS, its start and its end (where a reason is) with what lies between left out."""
    shown = printable(short_field_error(message), 10 * MESSAGE_CHARS)
    if len(shown) <= MESSAGE_CHARS:
        return shown
    head = printable(shown, MESSAGE_CHARS - MESSAGE_END_CHARS).removesuffix("...")
    left = len(shown) - len(head) - MESSAGE_END_CHARS
    return f"{head} ... ({left} characters left out) ... {shown[-MESSAGE_END_CHARS:]}"


def short_field_error(message: str) -> str:
    """The message with a long quoted value left out, so its reason shows: ``spec.replicatedJobs: Invalid value
    (6700 characters, left out): field is immutable``."""
    m = _QUOTED_VALUE.search(message)
    if m is None:
        return message
    said = f"{m['path']}: Invalid value ({len(m['value'])} characters, left out): {m['detail']}"
    return message[: m.start()] + said


def _webhook_error(action: Action, code: int, message: str) -> WebhookError | None:
    denied = _WEBHOOK_DENIED.search(message)
    called = denied or _WEBHOOK_CALL.search(message)
    if called is None:
        return None
    name = printable(called.group(1), 253)
    owner = _webhook_owner(name)
    if denied is not None:
        return WebhookError(
            f"the admission webhook {name!r}{owner} refused the request to {action.describe()} ({code}): {message}",
            status=code,
            webhook=name,
            denied=True,
            hint="the webhook judged the object, not your permissions: change what its message names (pwdeploy "
            "validate checks the JobSet webhook's rules before submitting)",
        )
    return WebhookError(
        f"the API server could not call the admission webhook {name!r}{owner} to {action.describe()} ({code}): "
        f"{message}",
        status=code,
        webhook=name,
        denied=False,
        hint=f"the webhook's service is down or does not answer in time; the API server itself is fine. Check the "
        f"pods behind it{_webhook_pods(name)} and its Service's endpoints, then run the command again",
    )


def _webhook_owner(name: str) -> str:
    """`` (JobSet)``: whose a webhook of the controllers pwdeploy works with is, from its name."""
    if name.endswith("jobset.kb.io"):
        return " (JobSet)"
    if name.endswith("kueue.x-k8s.io"):
        return " (Kueue)"
    return ""


def _webhook_pods(name: str) -> str:
    if name.endswith("jobset.kb.io"):
        return " (kubectl get pods -n jobset-system)"
    if name.endswith("kueue.x-k8s.io"):
        return " (kubectl get pods -n kueue-system)"
    return " (kubectl get validatingwebhookconfigurations,mutatingwebhookconfigurations names its service)"


def _kubelet_error(action: Action, code: int, message: str, where: str) -> KubeletError | None:
    dialled = _KUBELET_DIAL.search(message)
    if dialled is None and not any(words in message for words in _KUBELET_TUNNEL):
        return None
    node = dialled.group(1) if dialled is not None else ""
    at = f" on node {node}" if node else ""
    return KubeletError(
        f"the kubelet{at} did not serve the request to {action.describe()} that the API server{where} passed on "
        f"({code}): {message}",
        status=code,
        node=node,
        hint=f"the API server is fine; the node's kubelet (port 10250) is down or unreachable from the control "
        f"plane. Check the node (kubectl get nodes -o wide{', find ' + node if node else ''}): a NotReady node's "
        "pods are replaced once it is gone; on GKE a firewall rule must let the control plane reach port 10250",
    )


def _schema_hint(action: Action) -> str:
    res = action.resource
    crd = f"{res.plural}.{res.group}" if res is not None and res.group else "the resource's"
    return (
        f"the CustomResourceDefinition {crd} in this cluster is older than the fields sent (the same request fails "
        "the same way again): install a newer release of its controller (pwdeploy renders for JobSet v0.10.1 and "
        "later), or see what the installed one declares with "
        f"kubectl get crd {crd} -o yaml"
    )


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
