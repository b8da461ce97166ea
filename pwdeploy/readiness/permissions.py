"""``permissions``: SelfSubjectAccessReviews, in the job's namespace, for every verb that submit, status, list,
logs, diagnose, delete, connect, profile and drill use (the only POSTs of a readiness run: they change nothing);
Kueue's Workloads for a job with a queue, ProvisioningRequests for queued capacity. docs/cluster.md's Role is
generated from the same table."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from pwdeploy.config.capacity_modes import capacity_mode
from pwdeploy.kube.seam import (
    ACCESS_REVIEWS,
    EVENTS,
    JOBSETS,
    POD_LOGS,
    POD_PORTFORWARD,
    PODS,
    Action,
    Kube,
    Resource,
    rbac_hint,
)
from pwdeploy.readiness.target import Check, Row, Target
from pwdeploy.report import PreflightRow, Status

# What this check's verdict rests on (its rows' ``source``).
SOURCE = "https://kubernetes.io/docs/reference/access-authn-authz/authorization/#checking-api-access"

JOBS = Resource("batch", "v1", "jobs", "Job")
POD_EVICTION = Resource("", "v1", "pods", "Pod", subresource="eviction")
POD_EXEC = Resource("", "v1", "pods", "Pod", subresource="exec")
WORKLOADS = Resource("kueue.x-k8s.io", "v1beta2", "workloads", "Workload")  # RBAC names no version
PROVISIONING_REQUESTS = Resource("autoscaling.x-k8s.io", "v1", "provisioningrequests", "ProvisioningRequest")


class Need(NamedTuple):
    """One permission in the job's namespace, and the commands that use it."""

    verb: str
    resource: Resource
    used_by: str
    when: str = ""  # empty: every job; "queue": a job with scheduling.queue; "queued": queued capacity


PERMISSIONS: tuple[Need, ...] = (
    Need("create", JOBSETS, "submit (server-side apply creates it)"),
    Need("patch", JOBSETS, "submit (server-side apply)"),
    Need("get", JOBSETS, "submit, status, logs, diagnose, delete, connect, profile, drill"),
    Need("list", JOBSETS, "list, and where a wait or follow starts"),
    Need("watch", JOBSETS, "submit --wait, delete --wait, logs --all -f, drill (a watch instead of polls)"),
    Need("delete", JOBSETS, "delete, submit --replace"),
    Need("list", JOBS, "status, diagnose, logs --all (the job's objects, whose events are the job's)"),
    Need("watch", JOBS, "logs --all -f (a watch instead of polls)"),
    Need("list", PODS, "status, logs, diagnose, delete --wait, connect, profile, drill"),
    Need("watch", PODS, "submit --wait, delete --wait, logs --all -f, drill (a watch instead of polls)"),
    Need("delete", PODS, "drill"),
    Need("create", POD_EVICTION, "drill"),
    Need("get", POD_EXEC, "drill (a signal to a container: the exec WebSocket upgrade)"),
    Need("create", POD_EXEC, "drill (a signal to a container)"),
    Need("get", POD_LOGS, "status, logs, diagnose, connect"),
    # pwdeploy's port-forward is a WebSocket upgrade, a GET, authorized as `get pods/portforward`; from Kubernetes
    # 1.35 also as `create` (feature gate AuthorizePodWebsocketUpgradeCreatePermission, on by default:
    # kubernetes/kubernetes#134577, KEP-4006), which SPDY clients (kubectl before 1.31) always needed
    Need("get", POD_PORTFORWARD, "connect, profile (the WebSocket upgrade)"),
    Need("create", POD_PORTFORWARD, "connect, profile"),
    Need("list", EVENTS, "status, diagnose, logs --all"),
    Need("watch", EVENTS, "logs --all -f"),
    Need("list", WORKLOADS, "diagnose", "queue"),
    Need("list", PROVISIONING_REQUESTS, "diagnose", "queued"),
)
# (verb, resource) of every permission any job may need: what the Role of docs/cluster.md grants
NEEDED: tuple[tuple[str, Resource], ...] = tuple((n.verb, n.resource) for n in PERMISSIONS)


def needed_for(queue: bool, queued: bool) -> tuple[Need, ...]:
    """The permissions a job needs: Kueue's only with a queue, ProvisioningRequests only for queued capacity."""
    wanted = {"", *(["queue"] if queue else []), *(["queued"] if queued else [])}
    return tuple(n for n in PERMISSIONS if n.when in wanted)


def role_rules(needs: Sequence[Need] = PERMISSIONS) -> list[dict[str, list[str]]]:
    """The RBAC rules that grant ``needs``: one per (API group, resource), verbs in the table's order."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for need in needs:
        verbs = grouped.setdefault((need.resource.group, need.resource.rbac_resource), [])
        if need.verb not in verbs:
            verbs.append(need.verb)
    return [
        {"apiGroups": [group], "resources": [resource], "verbs": verbs} for (group, resource), verbs in grouped.items()
    ]


def role_yaml(namespace: str = "NAMESPACE") -> str:
    """The Role docs/cluster.md shows (generated): what the permissions row checks, nothing more."""
    lines = [
        "apiVersion: rbac.authorization.k8s.io/v1",
        "kind: Role",
        "metadata:",
        "  name: pwdeploy-user",
        f"  namespace: {namespace}",
        "rules:",
    ]
    for rule in role_rules():
        lines += [
            f'- apiGroups: ["{rule["apiGroups"][0]}"]',
            f'  resources: ["{rule["resources"][0]}"]',
            "  verbs: [" + ", ".join(f'"{v}"' for v in rule["verbs"]) + "]",
        ]
    return "\n".join(lines)


def check_with(max_workers: int) -> Check:
    return Check("permissions", functools.partial(_run, max_workers=max_workers), SOURCE)


def _run(target: Target, row: Row, *, max_workers: int) -> PreflightRow:
    ns, job = target.namespace, target.job
    needs = needed_for(bool(job.scheduling.queue), capacity_mode(job.tpu.capacity).provisioning_request)
    pairs = [(n.verb, n.resource) for n in needs]
    with ThreadPoolExecutor(max_workers=min(max_workers, len(pairs))) as pool:
        allowed = list(pool.map(lambda need: can_i(target.kube, ns, *need), pairs))
    denied = [n for n, ok in zip(needs, allowed, strict=True) if not ok]
    if not denied:
        return row(Status.OK, f"allowed in namespace {ns!r}: {_verbs(pairs)}")
    actions = [Action(n.verb, n.resource, ns) for n in denied]
    return row(
        Status.FAILED,
        f"denied in namespace {ns!r}: " + "; ".join(f"{n.verb} {n.resource.display} ({n.used_by})" for n in denied),
        rbac_hint(actions[0]) if len(actions) == 1 else _rules(actions, ns),
    )


def can_i(kube: Kube, namespace: str, verb: str, resource: Resource) -> bool:
    attributes = {"namespace": namespace, "verb": verb, "group": resource.group, "resource": resource.plural}
    if resource.subresource:
        attributes["subresource"] = resource.subresource
    body = {
        "apiVersion": ACCESS_REVIEWS.group_version,
        "kind": ACCESS_REVIEWS.kind,
        "spec": {"resourceAttributes": attributes},
    }
    answer = kube.request(Action("create", ACCESS_REVIEWS), "POST", ACCESS_REVIEWS.path(), body=body)
    return bool((answer.get("status") or {}).get("allowed"))


def _verbs(needs: Sequence[tuple[str, Resource]]) -> str:
    grouped: dict[str, list[str]] = {}
    for verb, resource in needs:
        grouped.setdefault(resource.display, []).append(verb)
    return "; ".join(f"{', '.join(verbs)} {display}" for display, verbs in grouped.items())


def _rules(denied: list[Action], namespace: str) -> str:
    grouped: dict[Resource, list[str]] = {}
    for action in denied:
        assert action.resource is not None
        grouped.setdefault(action.resource, []).append(action.verb)
    rules = "; ".join(
        f'apiGroups: ["{r.group}"], resources: [{r.rbac_resource}], verbs: [{", ".join(verbs)}]'
        for r, verbs in grouped.items()
    )
    return f"bind this identity to a Role in namespace {namespace} with the rules {rules}; check: kubectl auth can-i"
