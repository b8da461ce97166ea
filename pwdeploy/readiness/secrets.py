"""``secret``: one row per Secret that ``main.secret_env`` references; its metadata only is read (values never
leave the cluster)."""

from __future__ import annotations

import functools

from pwdeploy.config import JobConfig, SecretRef
from pwdeploy.kube.seam import SECRETS, Action, ApiError
from pwdeploy.readiness.target import Check, Row, Target
from pwdeploy.report import PreflightRow, Status

# What this check's verdict rests on (its rows' ``source``).
SOURCE = "https://kubernetes.io/docs/concepts/configuration/secret/#using-secrets-as-environment-variables"

PARTIAL_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"  # a Secret's metadata, no data

Referenced = tuple[str, tuple[SecretRef, ...]]


def referenced_secrets(job: JobConfig) -> list[Referenced]:
    """(Secret name, its references), in the order main.secret_env first names them."""
    grouped: dict[str, list[SecretRef]] = {}
    for ref in job.main.secret_env:
        grouped.setdefault(ref.secret, []).append(ref)
    return [(name, tuple(refs)) for name, refs in grouped.items()]


def checks(job: JobConfig) -> list[Check]:
    return [Check("secret", functools.partial(_run, secret=s), SOURCE) for s in referenced_secrets(job)]


def _run(target: Target, row: Row, *, secret: Referenced) -> PreflightRow:
    name, refs = secret
    ns = target.namespace
    envs = ", ".join(r.env for r in refs)
    fields = tuple(f"main.secret_env.{r.env}" for r in refs)
    try:
        target.kube.request(Action("get", SECRETS, ns, name), "GET", SECRETS.path(ns, name), accept=PARTIAL_METADATA)
    except ApiError as exc:
        if exc.status == 403:
            return row(
                Status.NOT_VERIFIED,
                f"Secret {name!r} (for {envs}): this identity may not read Secrets in namespace {ns!r}",
                None,
                fields,
            )
        if exc.status != 404:
            raise
        literals = " ".join(f"--from-literal={key}=..." for key in dict.fromkeys(r.key for r in refs))
        return row(
            Status.FAILED,
            f"Secret {name!r} (for {envs}) does not exist in namespace {ns!r}",
            f"kubectl create secret generic {name} -n {ns} {literals}",
            fields,
        )
    keys = ", ".join(dict.fromkeys(r.key for r in refs))
    return row(Status.OK, f"Secret {name!r} exists in namespace {ns!r} (keys {keys} not read)", None, fields)
