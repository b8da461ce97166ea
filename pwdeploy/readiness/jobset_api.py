"""``jobset-api``: the JobSet CRD serves v1alpha2 and its schema knows every field (and enum value) pwdeploy
renders, and the JobSet controller answers: a server dry run of the rendered JobSet (under a probe name, so an
existing job is not touched) goes through its webhooks, whose defaulting must show in the answer.

JobSet's mutating webhook ``mjobset.kb.io`` defaults ``spec.network.publishNotReadyAddresses`` to true
(kubernetes-sigs/jobset v0.11.1 pkg/webhooks/jobset_webhook.go ``Default``; the CRD declares no default for it),
and the controller serves its webhooks from the same Deployment (config/components/manager): with that field left
out of the probe, an answer without it means no JobSet webhook ran (only the CRD is installed, nothing reconciles
a JobSet); a ``failed calling webhook`` error means the controller's pods do not answer."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from pwdeploy.cluster import jobsets as js
from pwdeploy.cluster.jobsets import Object
from pwdeploy.kube.api_errors import WebhookError
from pwdeploy.kube.seam import CRDS, JOBSETS, Action, ApiError, rbac_hint
from pwdeploy.readiness.target import Check, Row, Target
from pwdeploy.report import PreflightRow, Status

# What this check's verdict rests on (its rows' ``source``).
SOURCE = "kubernetes-sigs/jobset: pkg/webhooks/jobset_webhook.go (Default), config/components/crd"

JOBSET_CRD = f"{JOBSETS.plural}.{JOBSETS.group}"
PROBE_NAME = "pwdeploy-probe"  # the dry run's name: never an existing job's, so an update is never what is tested
WEBHOOK_DEFAULTED = ("network", "publishNotReadyAddresses")  # set by mjobset.kb.io, not by the CRD's schema
CONTROLLER_PODS = "kubectl get deployments,pods -n jobset-system (the JobSet controller serves its webhooks)"
JOBSET_INSTALL = (
    "install the JobSet controller: kubectl apply --server-side -f "
    "https://github.com/kubernetes-sigs/jobset/releases/download/v0.10.1/manifests.yaml"
)


def _run(target: Target, row: Row) -> PreflightRow:
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
    return _dry_run(target, row, f"{JOBSETS.group_version} served; its schema knows every field of the rendered JobSet")


def probe(jobset: Object, namespace: str) -> Object:
    """The rendered JobSet under the probe name, without the field only JobSet's webhook defaults."""
    obj = copy.deepcopy(jobset)
    obj["metadata"]["name"], obj["metadata"]["namespace"] = PROBE_NAME, namespace
    section, key = WEBHOOK_DEFAULTED
    (obj["spec"].get(section) or {}).pop(key, None)
    return obj


def _dry_run(target: Target, row: Row, schema_ok: str) -> PreflightRow:
    """The controller's webhooks answer and default the JobSet (a server dry run: nothing is persisted)."""
    try:
        answer = js.apply_jobset(target.kube, probe(target.jobset, target.namespace), dry_run=True)
    except WebhookError as exc:
        if not exc.denied:
            return row(
                Status.FAILED,
                f"{schema_ok}, but the admission webhook {exc.webhook!r} does not answer a server dry run: "
                f"{exc.message}",
                f"the controller is down or unreachable: {CONTROLLER_PODS}; {JOBSET_INSTALL}",
            )
        return row(
            Status.FAILED,
            f"{schema_ok}, but the admission webhook {exc.webhook!r} refuses the rendered JobSet: {exc.message}",
            f"upgrade JobSet; {JOBSET_INSTALL}",
        )
    except ApiError as exc:
        if exc.status in (403, 404):  # may not create JobSets, or the namespace is missing (its own row)
            return row(Status.NOT_VERIFIED, f"{schema_ok}; the controller was not checked: {exc.message}", exc.hint)
        raise
    section, key = WEBHOOK_DEFAULTED
    if ((answer.get("spec") or {}).get(section) or {}).get(key) is None:
        return row(
            Status.FAILED,
            f"{schema_ok}, but no JobSet webhook ran on a server dry run (spec.{section}.{key} was not defaulted): "
            "the JobSet CRD is installed without its controller, so nothing would create the job's pods",
            f"{JOBSET_INSTALL}; check: {CONTROLLER_PODS}",
        )
    return row(Status.OK, f"{schema_ok}; the controller's webhooks answer a server dry run")


def _missing(row: Row) -> PreflightRow:
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


CHECK = Check("jobset-api", _run, SOURCE)
