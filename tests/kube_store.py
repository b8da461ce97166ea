"""The API stub's objects and what the API server does with them: create (409 when the name is taken), server-side
apply (a field manager required, a JobSet's spec immutable, JobSet's webhook defaults on a new one), ``dryRun=All``,
delete (a deleted object can linger for a few reads, as during foreground deletion), lists (label selectors
``k=v,k2=v2``, field selectors ``k=v``, ``k==v``, ``k!=v``, pages with an opaque continue token that can expire),
metadata-only Secret reads and container logs (``tailLines``, ``previous``). Tests add objects with ``put`` and
``add_node``; every read and write is answered as the API server answers it (tests/kube_answers.py)."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from typing import Any, NoReturn

import yaml

from tests.kube_access import Access
from tests.kube_answers import APPLY_PATCH, Recorded, Reply, already_exists, deleted, not_found, status_body

Key = tuple[str, str, str]  # (plural, namespace, name); cluster-scoped objects have namespace ""
LIST_KINDS = {"pods": "PodList", "events": "EventList", "jobsets": "JobSetList", "nodes": "NodeList"}
# Groups of the API server's own types: their list items carry no kind and apiVersion (a custom resource's do).
BUILT_IN = ("", "apps", "batch")
VERBS = {"GET": "get", "PATCH": "patch", "DELETE": "delete", "POST": "create"}


def jobset_webhook_defaults(body: dict[str, Any]) -> dict[str, Any]:
    """What JobSet's mutating webhook mjobset.kb.io sets on a new JobSet (kubernetes-sigs/jobset v0.11.1
    pkg/webhooks/jobset_webhook.go ``Default``): success and startup policies, Indexed completion, OnFailure
    restarts and the network defaults."""
    obj = copy.deepcopy(body)
    spec = obj.setdefault("spec", {})
    spec.setdefault("successPolicy", {"operator": "All"})
    spec.setdefault("startupPolicy", {"startupPolicyOrder": "AnyOrder"})
    for rj in spec.get("replicatedJobs") or []:
        job = rj.setdefault("template", {}).setdefault("spec", {})
        job.setdefault("completionMode", "Indexed")
        job.setdefault("template", {}).setdefault("spec", {}).setdefault("restartPolicy", "OnFailure")
    network = spec.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    return obj


class ObjectStore(Access):
    def __init__(self, *, tokens: dict[str, str] | None, namespaces: tuple[str, ...]) -> None:
        super().__init__(tokens)
        self.namespaces = set(namespaces)
        self.objects: dict[Key, dict[str, Any]] = {}
        self.logs: dict[tuple[str, str, str], str | bytes] = {}  # (namespace, pod, container) -> text or bytes
        self.previous_logs: dict[tuple[str, str, str], str | bytes] = {}  # the same, for previous=true
        self.pages = 0  # list answers served (one per page)
        self.expire_continue = 0  # how many next list requests with a continue token get 410 Expired
        self.jobset_webhook = True  # JobSet's mutating webhook defaults a new JobSet (False: only its CRD)
        self.linger_after_delete = 0  # reads that still see a deleted object (foreground deletion in progress)
        self._lingering: dict[Key, int] = {}
        self._uid = 0

    def add_node(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.objects[("nodes", "", obj["metadata"]["name"])] = obj
        return obj

    def put(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        self._stamp(meta)
        self.objects[(plural, meta["namespace"], meta["name"])] = obj
        return obj

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((plural, namespace, name))

    # ------------------------------------------------------------------------------------------ one object

    def _resource(self, r: Recorded, plural: str, group: str, version: str, ns: str | None, name: str | None) -> None:
        self._check_rbac(r, VERBS[r.method] if name or r.method != "GET" else "list", plural, group, ns, name)
        if name is None and r.method == "GET":
            self._list(r, plural, group, version, ns)
        if ns is not None and ns not in self.namespaces and r.method in ("PATCH", "POST"):
            raise not_found("namespaces", "", ns)
        if name is None and r.method == "POST":
            self._create(r, plural, group, ns or "")
        assert ns is not None and name is not None
        key = (plural, ns, name)
        if r.method == "GET":
            self._read(key, group)
        if r.method == "DELETE":
            self._delete(r, key, group)
        if r.method == "PATCH":
            self._apply(r, key, self.objects.get(key))

    def _create(self, r: Recorded, plural: str, group: str, ns: str) -> NoReturn:
        name = (r.body or {}).get("metadata", {}).get("name")
        if (plural, ns, name) in self.objects:
            raise already_exists(plural, group, name)
        self._store(r, plural, ns, name or "", r.body, 201)

    def _read(self, key: Key, group: str) -> NoReturn:
        current = self.objects.get(key)
        if current is None or self._gone_after_lingering(key):
            raise not_found(key[0], group, key[2])
        raise Reply(200, current)

    def _delete(self, r: Recorded, key: Key, group: str) -> NoReturn:
        """An object deleted at once is answered with a ``Status`` of Success; one that lingers (foreground
        deletion: its finalizer holds it) with itself, marked with its deletion time."""
        current = self.objects.get(key)
        if current is None:
            raise not_found(key[0], group, key[2])
        if key in self._lingering:
            raise Reply(200, current)
        if self.linger_after_delete and r.q("dryRun") != "All":
            current["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
            self._lingering[key] = self.linger_after_delete
            raise Reply(200, current)
        if r.q("dryRun") != "All":
            del self.objects[key]
        raise Reply(200, deleted(key[0], group, key[2], str(current["metadata"].get("uid", ""))))

    def _gone_after_lingering(self, key: Key) -> bool:
        """Whether a deleted object that lingered for ``linger_after_delete`` reads is gone now (this read counts)."""
        if key not in self._lingering:
            return False
        self._lingering[key] -= 1
        if self._lingering[key] >= 0:
            return False
        del self._lingering[key], self.objects[key]
        return True

    def _apply(self, r: Recorded, key: Key, current: dict[str, Any] | None) -> NoReturn:
        _require_apply(r)
        body = r.body if isinstance(r.body, dict) else yaml.safe_load(r.body)
        if body.get("metadata", {}).get("name") != key[2]:
            raise Reply(400, status_body(400, "BadRequest", "the name of the object does not match the URL"))
        if current is None:
            if key[0] == "jobsets" and self.jobset_webhook:
                body = jobset_webhook_defaults(body)
            self._store(r, *key, body, 201)
        if current.get("spec") != body.get("spec"):
            raise _immutable(body)
        merged = copy.deepcopy(current)
        for part in ("labels", "annotations"):
            merged["metadata"].setdefault(part, {}).update(body.get("metadata", {}).get(part) or {})
        if r.q("dryRun") != "All":
            self.objects[key] = merged
        raise Reply(200, merged)

    def _store(self, r: Recorded, plural: str, ns: str, name: str, body: Any, code: int) -> NoReturn:
        """A new object; a dry run's is answered as it would be, without the resourceVersion it never got."""
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        meta["namespace"] = ns
        self._stamp(meta)
        meta["managedFields"] = [
            {"manager": r.q("fieldManager") or "unknown", "operation": "Apply" if r.method == "PATCH" else "Update"}
        ]
        if r.q("dryRun") == "All":
            del meta["resourceVersion"]
        else:
            self.objects[(plural, ns, name)] = obj
        raise Reply(code, obj)

    def _stamp(self, meta: dict[str, Any]) -> None:
        self._uid += 1
        meta.setdefault("uid", f"00000000-0000-0000-0000-{self._uid:012d}")
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        meta.setdefault("resourceVersion", str(self._uid))

    # ------------------------------------------------------------------------------------------ lists

    def _list(self, r: Recorded, plural: str, group: str, version: str, ns: str | None) -> NoReturn:
        if r.q("watch") in ("true", "1"):  # the stub serves no watch: refused as a Role without the verb refuses it
            self._forbidden(r, "watch", plural, group, ns, None)
        self._check_rbac(r, "list", plural, group, ns, None)
        items = [o for (p, n, _), o in sorted(self.objects.items()) if p == plural and (ns is None or n == ns)]
        items = [o for o in items if _labels_match(o, r.q("labelSelector")) and _fields_match(o, r.q("fieldSelector"))]
        items = [o for o in items if not self._gone_after_lingering(_key_of(plural, o))]  # as a get sees it
        meta: dict[str, Any] = {"resourceVersion": "1"}
        if r.q("continue") and self.expire_continue > 0:  # the API server keeps a token's snapshot ~5 minutes
            self.expire_continue -= 1
            message = "The provided continue parameter is too old to display a consistent list result."
            raise Reply(410, status_body(410, "Expired", message))
        start = int(base64.b64decode(r.q("continue") or "MA==")) if r.q("continue") else 0
        limit = int(r.q("limit") or 0)
        if limit > 0 and start + limit < len(items):  # paged as the API server pages: an opaque token
            meta |= {"continue": base64.b64encode(str(start + limit).encode()).decode()}
            if not r.q("labelSelector") and not r.q("fieldSelector"):  # the count left is known only unselected
                meta["remainingItemCount"] = len(items) - start - limit
        items = items[start : start + limit] if limit > 0 else items[start:]
        if group in BUILT_IN:
            items = [{k: v for k, v in item.items() if k not in ("kind", "apiVersion")} for item in items]
        self.pages += 1  # under the lock the dispatch holds
        gv = f"{group}/{version}" if group else version
        raise Reply(200, {"kind": LIST_KINDS.get(plural, "List"), "apiVersion": gv, "metadata": meta, "items": items})

    # ------------------------------------------------------------------------------------------ reads of their own

    def _secret_metadata(self, r: Recorded, ns: str, name: str) -> NoReturn:
        self._check_rbac(r, "get", "secrets", "", ns, name)
        secret = self.objects.get(("secrets", ns, name))
        if secret is None:
            raise not_found("secrets", "", name)
        if "as=PartialObjectMetadata" in (r.headers.get("Accept") or ""):
            partial = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": secret["metadata"]}
            raise Reply(200, partial)
        raise Reply(200, secret)

    def _pod_log(self, r: Recorded, ns: str, pod: str) -> NoReturn:
        self._check_rbac(r, "get", "pods/log", "", ns, pod)
        if ("pods", ns, pod) not in self.objects:
            raise not_found("pods", "", pod)
        container = r.q("container") or ""
        logs = self.previous_logs if r.q("previous") == "true" else self.logs
        text = logs.get((ns, pod, container))
        if text is None:
            raise Reply(400, status_body(400, "BadRequest", f"container {container} is not valid for pod {pod}"))
        tail = r.q("tailLines")
        if tail is not None:
            kept = text.splitlines(keepends=True)[-int(tail) :]
            text = b"".join(kept) if isinstance(text, bytes) else "".join(kept)  # type: ignore[arg-type]
        raise Reply(200, text, "text/plain")


def _require_apply(r: Recorded) -> None:
    """Only server-side apply is served, and it needs a field manager (the API server's 422 when it has none)."""
    if r.headers.get("Content-Type") != APPLY_PATCH:
        raise Reply(415, status_body(415, "UnsupportedMediaType", "stub: only server-side apply is served"))
    if not r.q("fieldManager"):
        required = "Required value: is required for apply patch"
        message = f'PatchOptions.meta.k8s.io "" is invalid: fieldManager: {required}'
        cause = {"reason": "FieldValueRequired", "message": required, "field": "fieldManager"}
        details = {"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [cause]}
        raise Reply(422, status_body(422, "Invalid", message, details))


def _immutable(body: dict[str, Any]) -> Reply:
    """JobSet's validating webhook refuses a changed spec of an existing JobSet; the API server passes its refusal
    on as a 403 (kubernetes-sigs/jobset pkg/webhooks/jobset_webhook.go ``ValidateUpdate``, through
    controller-runtime's validating webhook), quoting the new value (the server in Go's field order)."""
    value = json.dumps(body.get("spec", {}).get("replicatedJobs"), separators=(",", ":"))
    message = (
        'admission webhook "vjobset.kb.io" denied the request: spec.replicatedJobs: '
        f"Invalid value: {value}: field is immutable"
    )
    return Reply(403, status_body(403, "Forbidden", message))


def _labels_match(obj: dict[str, Any], selector: str | None) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in _pairs(selector))


def _fields_match(obj: dict[str, Any], selector: str | None) -> bool:
    """k=v, k==v and k!=v, as the API server's field selectors."""
    for item in (selector or "").split(","):
        if not item.strip():
            continue
        if "!=" in item:
            key, value = (part.strip() for part in item.split("!=", 1))
            if _lookup(obj, key) == value:
                return False
        else:
            key, _, value = item.partition("=")
            if _lookup(obj, key.strip()) != value.strip().removeprefix("="):
                return False
    return True


def _lookup(obj: dict[str, Any], path: str) -> Any:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _pairs(selector: str | None) -> Iterator[tuple[str, str]]:
    for item in (selector or "").split(","):
        if item.strip():
            key, _, value = item.partition("=")
            yield key.strip(), value.strip()


def _key_of(plural: str, obj: dict[str, Any]) -> Key:
    return plural, obj["metadata"].get("namespace", ""), obj["metadata"]["name"]
