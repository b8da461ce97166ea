"""The requests that inject a drill's fault (the Eviction API, a plain delete, a signal through the exec
subresource), the RBAC they need, and what the API server confirmed of it (``Injected``); what each emulates and why:
``pwdeploy.drill.plan`` and docs/drill.md."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pwdeploy.drill.plan import Fault, FaultKind, Target
from pwdeploy.errors import ClusterError
from pwdeploy.kube.seam import JOBSETS, PODS, Action, ApiError, Kube, Resource
from pwdeploy.text import printable

POD_EVICTION = Resource("", "v1", "pods", "Pod", subresource="eviction")
POD_EXEC = Resource("", "v1", "pods", "Pod", subresource="exec")
POD_LOGS_READ = Resource("", "v1", "pods", "Pod", subresource="log")
EXEC_PROTOCOLS = ("v4.channel.k8s.io",)  # the exec stream's channel protocol; channel 3 carries the Status
EXEC_TIMEOUT_S = 20.0
EXEC_OUTPUT_KEPT = 64 << 10  # bytes of the command's stdout and stderr kept for a message
EXEC_READ_MAX = 1 << 20  # bytes of messages read before the Status must have come

# What a drill asks of the API server, per fault, in RBAC terms (docs/drill.md lists the same).
RBAC_COMMON: tuple[tuple[str, Resource], ...] = (("get", JOBSETS), ("list", PODS), ("get", POD_LOGS_READ))
RBAC_FAULT: dict[FaultKind, tuple[str, Resource]] = {
    "lose_slice": ("create", POD_EVICTION),
    "evict_head": ("create", POD_EVICTION),
    "delete_head": ("delete", PODS),
    "kill_worker": ("create", POD_EXEC),
}


@dataclass(frozen=True)
class Injected:
    """What the fault did, as far as the API server confirmed it: a report says no more than this."""

    hit: tuple[str, ...]  # the pods it reached: an eviction the API server took, a signal whose exec said Success
    missed: tuple[tuple[str, str], ...] = ()  # (pod, why) the pods of the target it did not reach
    unconfirmed: str | None = None  # kill_worker: why the signal's delivery is not known (no Status came back)
    stopped: str | None = None  # why injecting stopped before the last pod: an API error, or "interrupted"

    @property
    def state(self) -> str:
        """``confirmed``, ``unconfirmed``, ``partial`` or ``interrupted`` (the report's ``fault.injection``)."""
        if self.stopped == "interrupted":
            return "interrupted"
        if self.unconfirmed is not None:
            return "unconfirmed"
        return "partial" if self.missed else "confirmed"

    def detail(self) -> str:
        """What to say beside the state; empty for a whole, confirmed injection."""
        if self.unconfirmed is not None:
            return self.unconfirmed
        if not self.missed:
            return ""
        missed = "; ".join(f"{pod}: {why}" for pod, why in self.missed)
        return f"{len(self.hit)} of {len(self.hit) + len(self.missed)} pods hit; not hit: {missed}"


def rbac_rules(fault: Fault) -> list[str]:
    """The RBAC rules a drill of ``fault`` needs, one per line, as a Role would list them."""
    needed = [*RBAC_COMMON, RBAC_FAULT[fault.kind]]
    return [f'apiGroups: ["{r.group}"], resources: [{r.rbac_resource}], verbs: [{verb}]' for verb, r in needed]


def refused(exc: ApiError, fault: Fault) -> ClusterError:
    """A 403 becomes an error that names every rule the drill needs."""
    return ClusterError(
        f"the API server refused the drill: {exc}",
        hint="a drill needs these RBAC rules in the job's namespace (docs/drill.md): " + "; ".join(rbac_rules(fault)),
    )


def evict(kube: Kube, namespace: str, pod: str) -> bool:
    """POST an Eviction for the pod (policy/v1); False when the pod was gone already. A PodDisruptionBudget that
    allows no disruption answers 429, which is its own ``ApiError`` (kube.api_errors), never retried here."""
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
    action = Action("create", POD_EVICTION, namespace, pod)
    try:
        kube.request(action, "POST", POD_EVICTION.path(namespace, pod), body=body)
    except ApiError as exc:
        if exc.status != 404:
            raise
        return False
    return True


def delete(kube: Kube, namespace: str, pod: str) -> bool:
    """DELETE the pod with its own grace period and no condition, as ``kubectl delete pod`` does; False when it was
    gone already."""
    try:
        kube.request(Action("delete", PODS, namespace, pod), "DELETE", PODS.path(namespace, pod))
    except ApiError as exc:
        if exc.status != 404:
            raise
        return False
    return True


def signal_container(
    kube: Kube, namespace: str, pod: str, container: str, sig: signal.Signals, *, timeout: float | None = None
) -> str | None:
    """``kill -s SIG 1`` in the container through the exec subresource: None when the exec's Status said Success,
    else why the signal's delivery is not known (the stream stayed silent, closed without a Status, or broke the
    WebSocket protocol: the container may have died with it, or nothing happened). A Status of failure (no
    ``kill`` in the image, a container not running) is a ClusterError: nothing was injected."""
    from pwdeploy.kube.websockets import Frames

    command = ["kill", "-s", sig.name.removeprefix("SIG"), "1"]
    query = [("container", container), *(("command", word) for word in command), ("stdout", "true"), ("stderr", "true")]
    ws = kube.open_websocket(
        Action("create", POD_EXEC, namespace, pod), POD_EXEC.path(namespace, pod), query, subprotocols=EXEC_PROTOCOLS
    )
    try:
        status, output, why = _exec_status(Frames(ws), EXEC_TIMEOUT_S if timeout is None else timeout)
    finally:
        ws.shutdown()  # no closing handshake: a server that stopped answering is not waited for
    if status is None:
        return why
    if status.get("status") == "Success":
        return None
    said = printable(output[:300].decode("utf-8", "replace"), one_line=True)
    raise ClusterError(
        f"could not signal {pod}/{container}: {printable(str(status.get('message') or status), 300)}"
        + (f" (output: {said})" if said else "")
        + "; no fault was injected",
        hint="the container needs a `kill` command (a shell or coreutils in its image); docs/drill.md",
    )


def _exec_status(frames: Any, timeout: float) -> tuple[dict[str, Any] | None, bytes, str]:
    """(the exec's Status from channel 3, or None; the command's stdout and stderr, at most ``EXEC_OUTPUT_KEPT``
    bytes; why there is no Status), read with pwdeploy's own frame reader (``kube.websockets.Frames``: a
    control frame over 125 bytes, a reserved bit, a message over its bound are protocol errors) within ``timeout``
    seconds and ``EXEC_READ_MAX`` bytes. A Status anywhere but channel 3 is output, not the exec's answer."""
    from pwdeploy.kube.websockets import OP_CLOSE, FrameError

    deadline, output, read = time.monotonic() + timeout, bytearray(), 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None, bytes(output), f"the exec stream sent no status within {timeout:g} s"
        try:
            frames.sock.settimeout(left)
            opcode, payload = frames.next()
        except FrameError as exc:
            return None, bytes(output), f"the exec stream broke the WebSocket protocol ({exc})"
        except OSError as exc:  # a timeout included (TimeoutError is an OSError)
            what = "stayed silent" if isinstance(exc, TimeoutError) else "dropped"
            return None, bytes(output), f"the exec stream {what} without a status"
        if opcode == OP_CLOSE:
            return None, bytes(output), "the exec stream closed without a status (the container may have died)"
        read += len(payload)
        if payload[:1] == b"\x03":
            return _status(payload[1:]), bytes(output), "the exec's status is not a Kubernetes Status"
        if read > EXEC_READ_MAX:
            return None, bytes(output), f"the exec stream sent more than {EXEC_READ_MAX >> 20} MiB without a status"
        if payload[:1] in (b"\x01", b"\x02") and len(output) < EXEC_OUTPUT_KEPT:
            output += payload[1 : 1 + EXEC_OUTPUT_KEPT - len(output)]


def _status(data: bytes) -> dict[str, Any] | None:
    """A Status object, or None for anything else (not JSON, nested deeper than Python's parser goes, another
    shape)."""
    import json

    try:
        status = json.loads(data or b"{}")
    except (ValueError, RecursionError):
        return None
    return status if isinstance(status, dict) and isinstance(status.get("status", ""), str) else None


def inject(kube: Kube, namespace: str, fault: Fault, target: Target, say: Callable[[str], None]) -> Injected:
    """Inject the fault and say what the API server confirmed. Before any pod is hit, a failure is raised (a 403
    names every RBAC rule the drill needs; Ctrl-C raises KeyboardInterrupt): nothing was injected. After one
    was, a failure or Ctrl-C stops injecting, and what was hit and what was not is the answer."""
    try:
        if fault.kind == "kill_worker":
            return _kill(kube, namespace, fault, target, say)
        return _evict_all(kube, namespace, fault, target, say)
    except ApiError as exc:
        if exc.status == 403:
            raise refused(exc, fault) from None
        raise


def _kill(kube: Kube, namespace: str, fault: Fault, target: Target, say: Callable[[str], None]) -> Injected:
    assert fault.signal is not None and target.container is not None
    pod = target.pods[0]
    try:
        unknown = signal_container(kube, namespace, pod, target.container, fault.signal)
    except KeyboardInterrupt:  # the exec may have run: whether the signal was sent is not known
        return Injected((pod,), unconfirmed="interrupted (Ctrl-C) before the exec's status", stopped="interrupted")
    told = "kill succeeded" if unknown is None else f"not confirmed: {unknown}"
    say(f"sent {fault.signal.name} to PID 1 of {pod}/{target.container}: {told}")
    return Injected((pod,), unconfirmed=unknown)


def _evict_all(kube: Kube, namespace: str, fault: Fault, target: Target, say: Callable[[str], None]) -> Injected:
    hit: list[str] = []
    missed: list[tuple[str, str]] = []
    remove, done = (delete, "deleted") if fault.kind == "delete_head" else (evict, "evicted")
    for index, pod in enumerate(target.pods):
        try:
            if remove(kube, namespace, pod):
                hit.append(pod)
                say(f"{done} pod {pod}")
            else:
                missed.append((pod, "gone before its eviction"))
        except (ApiError, KeyboardInterrupt) as exc:
            if not hit:
                raise
            interrupted = not isinstance(exc, ApiError)
            why = printable(exc.message, 300) if isinstance(exc, ApiError) else "interrupted (Ctrl-C)"
            missed += [(p, f"not evicted: {why}") for p in target.pods[index:]]
            say(f"stopped injecting: {why}; the pods already evicted stay evicted")
            return Injected(tuple(hit), tuple(missed), stopped="interrupted" if interrupted else why)
    if not hit:
        raise ClusterError(f"every pod of {fault.flags()} was gone before its eviction: no fault was injected")
    return Injected(tuple(hit), tuple(missed))
