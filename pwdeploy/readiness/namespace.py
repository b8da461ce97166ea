"""``namespace``: the job's namespace exists."""

from __future__ import annotations

from pwdeploy.cluster import jobsets as js
from pwdeploy.readiness.target import Check, Row, Target
from pwdeploy.report import PreflightRow, Status

# What this check's verdict rests on (its rows' ``source``).
SOURCE = "https://kubernetes.io/docs/concepts/overview/working-with-objects/namespaces/"

FIELDS = ("namespace",)


def _run(target: Target, row: Row) -> PreflightRow:
    ns = target.namespace
    known = js.namespace_exists(target.kube, ns)
    if known is None:
        return row(Status.NOT_VERIFIED, f"this identity may not read namespace {ns!r}", fields=FIELDS)
    if not known:
        return row(
            Status.FAILED,
            f"namespace {ns!r} does not exist",
            f"kubectl create namespace {ns}, or set `namespace` in the job",
            FIELDS,
        )
    return row(Status.OK, f"namespace {ns!r} exists", fields=FIELDS)


CHECK = Check("namespace", _run, SOURCE)
