"""The discovery documents StubKubeApiServer serves to kubectl (``/api``, ``/apis``, ``/api/v1``, ``/apis/batch/v1``),
in the legacy (unaggregated) shapes that kubectl falls back to when the answer is plain ``application/json``: enough
for ``kubectl get`` and ``kubectl port-forward`` to map names to the resources the stub serves. The JobSet group's
own resource list is served by the stub itself."""

from __future__ import annotations

from typing import Any

VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


def _resource(name: str, kind: str, *, namespaced: bool = True, verbs: list[str] | None = None) -> dict[str, Any]:
    singular = name.split("/")[0].removesuffix("s")
    return {"name": name, "singularName": singular, "namespaced": namespaced, "kind": kind, "verbs": verbs or VERBS}


CORE_V1 = [
    _resource("pods", "Pod"),
    _resource("pods/log", "Pod", verbs=["get"]),
    _resource("pods/portforward", "PodPortForwardOptions", verbs=["create", "get"]),
    _resource("events", "Event"),
    _resource("secrets", "Secret"),
    _resource("namespaces", "Namespace", namespaced=False),
    _resource("nodes", "Node", namespaced=False),
]
BATCH_V1 = [_resource("jobs", "Job")]


def _group(name: str, version: str) -> dict[str, Any]:
    gv = {"groupVersion": f"{name}/{version}", "version": version}
    return {"name": name, "versions": [gv], "preferredVersion": gv}


def discovery(path: str, *, jobset_gv: str | None, server_address: str) -> dict[str, Any] | None:
    """The discovery document at ``path``, or None when ``path`` is not one of these."""
    if path == "/api":
        cidrs = [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": cidrs}
    if path == "/apis":
        groups = [_group("batch", "v1")]
        if jobset_gv is not None:
            groups.append(_group(*jobset_gv.split("/")))
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
    lists = {"/api/v1": ("v1", CORE_V1), "/apis/batch/v1": ("batch/v1", BATCH_V1)}
    if path in lists:
        gv, resources = lists[path]
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}
    return None
