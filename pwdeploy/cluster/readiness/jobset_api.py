"""``jobset-api``: the JobSet CRD serves v1alpha2 and its schema knows every field (and enum value) pwdeploy
renders."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pwdeploy.cluster import jobsets as js
from pwdeploy.cluster.jobsets import Object
from pwdeploy.cluster.readiness.target import Check, Row, Target
from pwdeploy.kube.api import CRDS, JOBSETS, Action, ApiError, rbac_hint
from pwdeploy.report import CheckResult, Status

JOBSET_CRD = f"{JOBSETS.plural}.{JOBSETS.group}"
JOBSET_INSTALL = (
    "install the JobSet controller: kubectl apply --server-side -f "
    "https://github.com/kubernetes-sigs/jobset/releases/download/v0.10.1/manifests.yaml"
)


def _run(target: Target, row: Row) -> CheckResult:
    kube = target.kube
    try:
        crd: Object = kube.request(Action("get", CRDS, name=JOBSET_CRD), "GET", CRDS.path(name=JOBSET_CRD))
    except ApiError as exc:
        if exc.status == 404:
            return _missing(row)
        if exc.status != 403:
            raise
        if not js.serves_jobsets(kube):
            return _missing(row)
        return row(
            Status.NOT_VERIFIED,
            f"{JOBSETS.group_version} is served; whether it knows every rendered field is not verified: this "
            f"identity may not read the CustomResourceDefinition {JOBSET_CRD}",
            rbac_hint(Action("get", CRDS, name=JOBSET_CRD)),
        )
    served = [v for v in crd.get("spec", {}).get("versions") or [] if v.get("served")]
    version = next((v for v in served if v.get("name") == JOBSETS.version), None)
    if version is None:
        names = ", ".join(str(v.get("name")) for v in served) or "none"
        return row(
            Status.FAILED, f"the JobSet CRD serves {names}, not {JOBSETS.version}", f"upgrade JobSet; {JOBSET_INSTALL}"
        )
    schema = (version.get("schema") or {}).get("openAPIV3Schema")
    if not isinstance(schema, dict):
        return row(
            Status.NOT_VERIFIED,
            f"the JobSet CRD serves {JOBSETS.version} but publishes no schema to check fields against",
        )
    unknown = list(unknown_fields(target.jobset, schema))
    if unknown:
        shown = "; ".join(unknown[:5]) + (f" (and {len(unknown) - 5} more)" if len(unknown) > 5 else "")
        return row(
            Status.FAILED,
            f"the installed JobSet CRD does not know what pwdeploy renders: {shown}",
            f"upgrade JobSet; {JOBSET_INSTALL}",
        )
    return row(Status.OK, f"{JOBSETS.group_version} served; its schema knows every field of the rendered JobSet")


def _missing(row: Row) -> CheckResult:
    return row(Status.FAILED, f"the JobSet API ({JOBSETS.group_version}) is not installed", JOBSET_INSTALL)


def unknown_fields(value: Any, schema: dict[str, Any], path: str = "") -> Iterator[str]:
    """Paths in ``value`` that ``schema`` (an openAPIV3Schema) does not declare, and values outside its enums."""
    if isinstance(value, dict):
        properties = schema.get("properties")
        if properties is None:
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                for key, item in value.items():
                    yield from unknown_fields(item, extra, f"{path}.{key}".lstrip("."))
            return
        for key, item in value.items():
            if key in properties:
                yield from unknown_fields(item, properties[key], f"{path}.{key}".lstrip("."))
            elif not schema.get("x-kubernetes-preserve-unknown-fields"):
                yield f"{path}.{key}".lstrip(".")
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for index, item in enumerate(value):
                label = item.get("name", index) if isinstance(item, dict) else index
                yield from unknown_fields(item, items, f"{path}[{label}]")
    elif schema.get("enum") and value not in schema["enum"]:
        yield f"{path}: {value} (known: {', '.join(map(str, schema['enum']))})"


CHECK = Check("jobset-api", _run)
