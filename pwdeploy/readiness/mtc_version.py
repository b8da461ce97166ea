"""``mtc-version``: with ``mtc.enabled``, GKE Standard 1.32.4-gke.1415000 or later, which multi-tier checkpointing
needs (the GKE MTC page); the API server's ``gitVersion`` carries GKE's build (``v1.32.4-gke.1415000``). Autopilot,
which MTC does not support, is not visible through the Kubernetes API: the row says so."""

from __future__ import annotations

import re

from pwdeploy.config import JobConfig
from pwdeploy.kube.seam import Action
from pwdeploy.readiness.mtc_driver import FIELDS, SETUP
from pwdeploy.readiness.target import Check, Row, Target
from pwdeploy.report import PreflightRow, Status

# What this check's verdict rests on (its rows' ``source``).
SOURCE = "https://cloud.google.com/kubernetes-engine/docs/how-to/machine-learning/training/multi-tier-checkpointing"

MIN_GKE = (1, 32, 4, 1415000)
_GKE = re.compile(r"v?(\d+)\.(\d+)\.(\d+)-gke\.(\d+)")


def checks(job: JobConfig) -> list[Check]:
    return [Check("mtc-version", _version, SOURCE)] if job.mtc.enabled else []


def gke_version(text: str) -> tuple[int, ...] | None:
    found = _GKE.search(text)
    return tuple(int(part) for part in found.groups()) if found else None


def _version(target: Target, row: Row) -> PreflightRow:
    answer = target.kube.request(Action("get", None, name="/version"), "GET", "/version")
    text = str(answer.get("gitVersion") or "")
    found = gke_version(text)
    autopilot = "; MTC does not run on Autopilot, which the Kubernetes API does not tell"
    if found is None:
        detail = f"{text or 'the version'} is not a GKE version: MTC is a GKE feature (Standard 1.32.4-gke.1415000+)"
        return row(Status.WARN, detail + autopilot, SETUP, FIELDS)
    if found < MIN_GKE:
        fix = "upgrade the cluster to 1.32.4-gke.1415000 or later: gcloud container clusters upgrade CLUSTER --master"
        return row(Status.FAILED, f"{text}: MTC needs GKE 1.32.4-gke.1415000 or later" + autopilot, fix, FIELDS)
    return row(Status.OK, f"{text}: MTC needs 1.32.4-gke.1415000 or later" + autopilot, None, FIELDS)
