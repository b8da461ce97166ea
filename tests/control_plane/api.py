"""A small client for the control plane's own set-up (the admin's client certificate): JSON requests and
server-side apply. Tests talk to the cluster through pwdeploy and kubectl, as a user does."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

# kind -> (API path prefix, plural, namespaced)
KINDS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "Node": ("/api/v1", "nodes", False),
    "Pod": ("/api/v1", "pods", True),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "ResourceQuota": ("/api/v1", "resourcequotas", True),
    "CustomResourceDefinition": ("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    "MutatingWebhookConfiguration": ("/apis/admissionregistration.k8s.io/v1", "mutatingwebhookconfigurations", False),
    "ValidatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingwebhookconfigurations",
        False,
    ),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "ResourceFlavor": ("/apis/kueue.x-k8s.io/v1beta2", "resourceflavors", False),
    "ClusterQueue": ("/apis/kueue.x-k8s.io/v1beta2", "clusterqueues", False),
    "LocalQueue": ("/apis/kueue.x-k8s.io/v1beta2", "localqueues", True),
    "Logs": ("/apis/kwok.x-k8s.io/v1alpha1", "logs", True),
    "ClusterLogs": ("/apis/kwok.x-k8s.io/v1alpha1", "clusterlogs", False),
    "PortForward": ("/apis/kwok.x-k8s.io/v1alpha1", "portforwards", True),
    "CSIDriver": ("/apis/storage.k8s.io/v1", "csidrivers", False),
    "DaemonSet": ("/apis/apps/v1", "daemonsets", True),
    "CheckpointConfiguration": ("/apis/checkpointing.gke.io/v1", "checkpointconfigurations", True),
}


class ApiError(RuntimeError):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"{status}: {text[:600]}")
        self.status = status
        try:
            self.message = str(json.loads(text).get("message", text))  # a Status's message
        except (ValueError, AttributeError):
            self.message = text


class Api:
    def __init__(self, server: str, context: ssl.SSLContext) -> None:
        self.server = server
        self.context = context

    def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        timeout: float = 30,
    ) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.context, timeout=timeout) as answer:
                text = answer.read()
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, e.read().decode(errors="replace")) from None
        parsed = json.loads(text) if text else {}
        return parsed if isinstance(parsed, dict) else {}

    def get(self, path: str) -> dict[str, Any]:
        return self.request("GET", path)

    def apply(self, obj: Mapping[str, Any], manager: str = "control-plane") -> dict[str, Any]:
        """Server-side apply of ``obj`` (force: this manager owns what it sets)."""
        path = object_path(obj)
        query = urllib.parse.urlencode({"fieldManager": manager, "force": "true"})
        return self.request("PATCH", f"{path}?{query}", obj, "application/apply-patch+yaml")

    def delete(self, obj: Mapping[str, Any]) -> None:
        try:
            self.request("DELETE", object_path(obj), {"propagationPolicy": "Background"})
        except ApiError as e:
            if e.status != 404:
                raise

    def wait(self, path: str, holds: Any, timeout: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            try:
                last = self.get(path)
                if holds(last):
                    return last
            except ApiError as e:
                if e.status != 404:
                    raise
            time.sleep(0.2)
        raise TimeoutError(f"{what}: not after {timeout:.0f} s; last {json.dumps(last)[:400]}")


def object_path(obj: Mapping[str, Any]) -> str:
    kind = str(obj["kind"])
    prefix, plural, namespaced = KINDS[kind]
    meta = obj["metadata"]
    if namespaced:
        return f"{prefix}/namespaces/{meta['namespace']}/{plural}/{meta['name']}"
    return f"{prefix}/{plural}/{meta['name']}"
