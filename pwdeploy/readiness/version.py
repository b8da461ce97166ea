"""``kubernetes-version``: the control plane, and the kubelets of the nodes that would run pods with native
sidecars (node pools can lag the control plane; an older kubelet runs them as init containers that never
finish). The control plane's version is asked first, alone, by ``check_cluster``."""

from __future__ import annotations

import functools
import re

from pwdeploy.cluster.jobsets import Object
from pwdeploy.cluster.nodes import NODE_POOL_LABEL, kubelet_version, native_sidecar_pods, node_selector, schedulable
from pwdeploy.kube.seam import Action, ApiError, Kube
from pwdeploy.readiness.target import Check, Row, Target
from pwdeploy.report import PreflightRow, Status

# What this check's verdict rests on (its rows' ``source``).
SOURCE = "https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/ (native sidecars: 1.29 and later)"

NAME = "kubernetes-version"
MIN_KUBERNETES = (1, 29)  # native sidecars (initContainers with restartPolicy Always) are on by default from 1.29
_MIN = ".".join(map(str, MIN_KUBERNETES))

Version = tuple[int, int, str]


def kubernetes_version(kube: Kube) -> Version:
    """(major, minor, gitVersion) from ``/version``; GKE's minor reads like ``31+``."""
    answer = kube.request(Action("get", None, name="/version"), "GET", "/version")
    major, minor = (int(re.sub(r"\D", "", str(answer.get(k) or "")) or 0) for k in ("major", "minor"))
    return major, minor, str(answer.get("gitVersion") or f"{major}.{minor}")


def check_with(version: Version) -> Check:
    return Check(NAME, functools.partial(_run, version=version), SOURCE)


def check_failed(error: ApiError) -> Check:
    """The row when the version request got an answer that was not the version (e.g. 403)."""
    return Check(NAME, lambda target, row: row.not_verified(error), SOURCE)


def version_row(row: Row, version: Version) -> PreflightRow:
    """The control plane alone."""
    major, minor, text = version
    if (major, minor) >= MIN_KUBERNETES:
        return row(Status.OK, f"{text}: native sidecars are on")
    return row(
        Status.FAILED,
        f"{text}: the head's proxy and resource manager run as native sidecars, on by default from {_MIN}",
        f"upgrade the control plane and nodes to {_MIN} or later "
        "(gcloud container clusters upgrade CLUSTER --master --cluster-version VERSION)",
    )


def _run(target: Target, row: Row, *, version: Version) -> PreflightRow:
    first = version_row(row, version)
    notes: list[str] = []
    worst = first.status
    fixes = [first.fix] if first.fix else []
    for role, spec in native_sidecar_pods(target.jobset):
        try:
            nodes = [n for n in target.nodes.get(node_selector(spec)) if schedulable(n)]
        except ApiError as exc:
            notes.append(f"kubelets of the {role} nodes not checked: {exc.message}")
            continue
        status, note, fix = kubelet_lag(role, nodes)
        if note:
            notes.append(note)
        if fix:
            fixes.append(fix)
        if status is Status.FAILED or (status is Status.WARN and worst is Status.OK):
            worst = status
    return row(worst, "; ".join([first.message, *notes]), "; ".join(fixes) or None)


def kubelet_lag(role: str, nodes: list[Object]) -> tuple[Status, str | None, str | None]:
    """(status, note, fix) for the kubelets of ``nodes``: failed when every one is older than 1.29, a warning
    when some are (the scheduler may pick one); no note without versions to read."""
    versions = {n["metadata"]["name"]: kubelet_version(n) for n in nodes}
    known = {name: v for name, v in versions.items() if v is not None}
    if not known:
        return Status.OK, None, None
    old = [n for n in nodes if (v := known.get(n["metadata"]["name"])) is not None and v[:2] < MIN_KUBERNETES]
    texts = sorted({v[2] for v in known.values()})
    if not old:
        return Status.OK, f"{role} node kubelets {', '.join(texts)}", None
    pools = sorted({str((n["metadata"].get("labels") or {}).get(NODE_POOL_LABEL, "POOL")) for n in old})
    old_texts = sorted({v[2] for n in old if (v := known[n["metadata"]["name"]])})
    note = (
        f"kubelet {', '.join(old_texts)} on {len(old)} of {len(known)} {role} node(s) (node pool "
        f"{', '.join(pools)}): before {_MIN} it runs native sidecars as init containers that never finish, so the "
        f"{role} pods stay in Init"
    )
    fix = "; ".join(f"upgrade the node pool: gcloud container node-pools upgrade {p} --cluster CLUSTER" for p in pools)
    return (Status.FAILED if len(old) == len(known) else Status.WARN), note, fix
