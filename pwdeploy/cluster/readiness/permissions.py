"""``permissions``: SelfSubjectAccessReviews for what submit, status, logs and delete do in the job's namespace
(the only POSTs of a readiness run: they change nothing)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from pwdeploy.cluster.readiness.target import Check, Row, Target
from pwdeploy.kube.api import ACCESS_REVIEWS, EVENTS, JOBSETS, POD_LOGS, PODS, Action, Kube, Resource, rbac_hint
from pwdeploy.report import CheckResult, Status

NEEDED: tuple[tuple[str, Resource], ...] = (
    ("create", JOBSETS),
    ("patch", JOBSETS),
    ("get", JOBSETS),
    ("delete", JOBSETS),
    ("get", PODS),
    ("list", PODS),
    ("get", POD_LOGS),
    ("list", EVENTS),
)


def check_with(max_workers: int) -> Check:
    return Check("permissions", functools.partial(_run, max_workers=max_workers))


def _run(target: Target, row: Row, *, max_workers: int) -> CheckResult:
    ns = target.namespace
    with ThreadPoolExecutor(max_workers=min(max_workers, len(NEEDED))) as pool:
        allowed = list(pool.map(lambda need: can_i(target.kube, ns, *need), NEEDED))
    denied = [Action(verb, resource, ns) for (verb, resource), ok in zip(NEEDED, allowed, strict=True) if not ok]
    if not denied:
        return row(Status.OK, f"allowed in namespace {ns!r}: {_verbs(NEEDED)}")
    return row(
        Status.FAILED,
        f"denied in namespace {ns!r}: " + "; ".join(f"{a.verb} {a.resource.display}" for a in denied if a.resource),
        rbac_hint(denied[0]) if len(denied) == 1 else _rules(denied, ns),
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
