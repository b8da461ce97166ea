"""The requests that inject a drill's fault (the Eviction API, a signal through the exec subresource) and the RBAC
they need; what each emulates and why: ``pwdeploy.drill.plan`` and docs/drill.md."""

from __future__ import annotations

import signal
from collections.abc import Callable
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

# What a drill asks of the API server, per fault, in RBAC terms (docs/drill.md lists the same).
RBAC_COMMON: tuple[tuple[str, Resource], ...] = (("get", JOBSETS), ("list", PODS), ("get", POD_LOGS_READ))
RBAC_FAULT: dict[FaultKind, tuple[str, Resource]] = {
    "lose_slice": ("create", POD_EVICTION),
    "evict_head": ("create", POD_EVICTION),
    "kill_worker": ("create", POD_EXEC),
}


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


def evict(kube: Kube, namespace: str, pod: str) -> None:
    """POST an Eviction for the pod (policy/v1); a pod already gone is no error."""
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
    action = Action("create", POD_EVICTION, namespace, pod)
    try:
        kube.request(action, "POST", POD_EVICTION.path(namespace, pod), body=body)
    except ApiError as exc:
        if exc.status != 404:
            raise


def signal_container(
    kube: Kube, namespace: str, pod: str, container: str, sig: signal.Signals, *, timeout: float = EXEC_TIMEOUT_S
) -> str:
    """``kill -s SIG 1`` in the container through the exec subresource; what happened, in words. A failed exec
    (no ``kill`` in the image, a container not running) is a ClusterError: nothing was injected."""
    command = ["kill", "-s", sig.name.removeprefix("SIG"), "1"]
    query = [("container", container), *(("command", word) for word in command), ("stdout", "true"), ("stderr", "true")]
    ws = kube.open_websocket(
        Action("create", POD_EXEC, namespace, pod), POD_EXEC.path(namespace, pod), query, subprotocols=EXEC_PROTOCOLS
    )
    ws.settimeout(timeout)
    said: list[bytes] = []
    try:
        status = _exec_status(ws, said)
    finally:
        ws.close()
    if status is None:  # the stream closed without a status: the container died with it, as it may
        return "the exec stream closed with the container"
    if status.get("status") == "Success":
        return "kill succeeded"
    output = printable(b"".join(said)[:300].decode("utf-8", "replace"), one_line=True)
    raise ClusterError(
        f"could not signal {pod}/{container}: {printable(str(status.get('message') or status), 300)}"
        + (f" (output: {output})" if output else "")
        + "; no fault was injected",
        hint="the container needs a `kill` command (a shell or coreutils in its image); docs/drill.md",
    )


def _exec_status(ws: Any, said: list[bytes]) -> dict[str, Any] | None:
    """The exec's Status from channel 3 (None when the stream ends without one); stdout and stderr into ``said``
    (at most 64 KiB kept)."""
    import json

    while True:
        try:
            data = ws.recv()
        except Exception:  # closed, reset or timed out: the container may have died with the stream
            return None
        if not data:
            return None
        payload = data if isinstance(data, bytes) else str(data).encode()
        if payload[:1] == b"\x03":
            try:
                status = json.loads(payload[1:] or b"{}")
            except ValueError:
                status = None
            return (
                status
                if isinstance(status, dict)
                else {"message": f"an exec status that is not JSON: {payload[1:80]!r}"}
            )
        if sum(len(s) for s in said) < 65536:
            said.append(payload[1:])


def inject(kube: Kube, namespace: str, fault: Fault, target: Target, say: Callable[[str], None]) -> None:
    """Inject the fault; a 403 names every RBAC rule the drill needs."""
    try:
        if fault.kind == "kill_worker":
            assert fault.signal is not None and target.container is not None
            said = signal_container(kube, namespace, target.pods[0], target.container, fault.signal)
            say(f"sent {fault.signal.name} to PID 1 of {target.pods[0]}/{target.container}: {said}")
            return
        for pod in target.pods:
            evict(kube, namespace, pod)
            say(f"evicted pod {pod}")
    except ApiError as exc:
        if exc.status == 403:
            raise refused(exc, fault) from None
        raise
