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
from collections.abc import Callable
from typing import Any, NamedTuple

from pwdeploy.kube.answers import excerpt, printable, quoted_message
from pwdeploy.kube.api_failures import (
    KUBELET_SUBRESOURCES,
    RETRYABLE_STATUS,
    ApiError,
    Component,
    KubeletError,
    Located,
    Missing,
    NoAnswerInTime,
    WebhookError,
    no_answer_in_time,
)
from pwdeploy.kube.http_client import HttpFailure
from pwdeploy.kube.resources import Action

# The failures themselves are pwdeploy.kube.api_failures' (named here too: this module is where callers meet them).
__all__ = [
    "GET_CREDENTIALS",
    "KUBELET_SUBRESOURCES",
    "RETRYABLE_STATUS",
    "ApiError",
    "Component",
    "KubeletError",
    "Located",
    "Missing",
    "NoAnswerInTime",
    "WebhookError",
    "api_status",
    "budget_refusal",
    "cluster_error",
    "deterministic",
    "failure_site",
    "is_transport_or_api_error",
    "no_answer_in_time",
    "rbac_hint",
    "retry_after",
    "retryable",
    "unsendable",
]

GET_CREDENTIALS = "GKE: gcloud container clusters get-credentials CLUSTER --location LOCATION"


# What the API server's message says when the failure was not its own (see the module's docstring).
_WEBHOOK_DENIED = re.compile(r'admission webhook "([^"]{1,253})" denied the request')
_WEBHOOK_CALL = re.compile(r'failed calling webhook "([^"]{1,253})"')
_KUBELET_DIAL = re.compile(
    r'"https?://(\[[0-9a-fA-F:]+\]|[^/":\s]{1,253}):10250/(containerLogs|portForward|exec|attach|logs)/'
)
_NOT_IN_SCHEMA = "field not declared in schema"
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
    answer = Refused(
        action,
        int(exc.status),
        quoted_message(str(status.get("message") or "")) or _reason_and_excerpt(exc),
        status,
        where,
        tried,
    )
    elsewhere = _webhook_error(action, answer.code, answer.message) or _kubelet_error(
        action, answer.code, answer.message, where
    )
    if elsewhere is not None:
        return elsewhere
    worded = BY_STATUS.get(answer.code)
    return worded(answer) if worded is not None else _otherwise(exc, answer)


class Refused(NamedTuple):
    """An error answer of the API server itself, as the message builders read it."""

    action: Action
    code: int
    message: str  # the Status's message, printable (or the answer's reason and first bytes)
    status: dict[str, Any]  # the Status object ({} when the answer was not one)
    where: str  # " at https://...", or ""
    tried: str  # " after N attempts", or ""


def _unauthorized(answer: Refused) -> ApiError:
    return ApiError(
        f"the API server{answer.where} rejected the credentials (401 Unauthorized) to {answer.action.describe()}",
        status=401,
        hint=f"the kubeconfig's token or certificate is missing or expired; refresh it ({GET_CREDENTIALS})",
    )


def _forbidden(answer: Refused) -> ApiError:
    return ApiError(
        f"forbidden (403): {answer.message}",
        status=403,
        hint=f"the API server's authorization (RBAC) refused this identity: {rbac_hint(answer.action)}",
    )


def _conflict(answer: Refused) -> ApiError:
    return ApiError(
        f"conflict (409) to {answer.action.describe()}: {answer.message}",
        status=409,
        hint="the object changed or already exists; `pwdeploy submit --replace` recreates a job",
    )


def _otherwise(exc: Exception, answer: Refused) -> ApiError:
    """Any other status: a CRD older than the object, a PodDisruptionBudget's refusal, the server's own trouble."""
    code, message, what = answer.code, answer.message, answer.action.describe()
    if _NOT_IN_SCHEMA in message:
        hint = _schema_hint(answer.action)
        return ApiError(
            f"the API server{answer.where} cannot {what}: {code} {message}", status=code, lasting=True, hint=hint
        )
    if (budget := budget_refusal(exc)) is not None:
        return ApiError(
            f"a PodDisruptionBudget refused to {what} (429): {budget}",
            status=code,
            hint="an eviction honours PodDisruptionBudgets, as `kubectl drain` does: see the budget (kubectl get "
            "pdb -n NAMESPACE), wait until it allows a disruption, or change it",
        )
    if code in RETRYABLE_STATUS:
        return ApiError(
            f"the API server{answer.where} failed to {what}{answer.tried}: {code} {message}".rstrip(),
            status=code,
            hint="the control plane may be upgrading or overloaded; try again in a minute",
        )
    return ApiError(f"the API server refused to {what}: {code} {message}".rstrip(), status=code)


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


def _invalid(answer: Refused) -> ApiError:
    """422: one line per field path the API server named."""
    causes = (answer.status.get("details") or {}).get("causes") or []
    said = [printable(f"{c.get('field', '?')}: {c.get('message', c.get('reason', ''))}") for c in causes]
    detail = "\n".join(f"  - {line}" for line in said or [answer.message])
    return ApiError(
        f"the API server rejected the request to {answer.action.describe()} (422 Invalid):\n{detail}", status=422
    )


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


def _not_found(answer: Refused) -> ApiError:
    action, message = answer.action, answer.message
    details = answer.status.get("details") or {}
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


# The API server's own refusals, by status; any other goes to ``_otherwise``.
BY_STATUS: dict[int, Callable[[Refused], ApiError]] = {
    401: _unauthorized,
    403: _forbidden,
    404: _not_found,
    409: _conflict,
    422: _invalid,
}
