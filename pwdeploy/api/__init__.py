"""pwdeploy as a library: typed functions over the rooms, for a notebook, a test or another tool (docs/api.md).
The command line is their first caller: each command parses its flags, calls one of them and shows the result.

Each function raises the classes of ``pwdeploy.errors`` (the exit code a command would give is the class's
``exit_code``); none prints. A wrong argument is an ``ArgumentError`` (a ``ConfigError``) naming the argument.
The functions, their result types and the errors are importable from here (``from pwdeploy.api import
JobStatus, ClusterError``), and each is imported when first used, so ``import pwdeploy.api`` costs no more than
``import pwdeploy`` (kubernetes, yaml, jax: only when a function needs them).

A cluster function takes a ``Cluster`` from ``cluster`` (kubeconfig, context and namespace resolved as kubectl
resolves them); a job's name and a namespace are checked before any request is sent.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pwdeploy.api.cluster_api import (
        ClientSettings,
        Cluster,
        cluster,
        connect,
        delete,
        diagnose,
        list_jobs,
        logs,
        status,
        submit,
        wait,
    )
    from pwdeploy.api.job_api import check, load, render, to_yaml, validate, warnings
    from pwdeploy.api.local_api import LocalRunOptions, plan_local, run_local
    from pwdeploy.check.results import Report
    from pwdeploy.cluster.diagnose.findings import Diagnosis
    from pwdeploy.cluster.progress import JobState
    from pwdeploy.cluster.status import JobStatus, JobSummary
    from pwdeploy.cluster.submit import Outcome
    from pwdeploy.config.model import JobConfig
    from pwdeploy.errors import (
        ArgumentError,
        BuildError,
        CheckError,
        ClusterError,
        ConfigError,
        ConfigErrors,
        DependencyError,
        DiagnosisError,
        LocalLimitsError,
        LocalRunError,
        PreflightError,
        PwdeployError,
        ValidationError,
    )
    from pwdeploy.kube.kubeconfig import PluginLimits
    from pwdeploy.kube.seam import RequestLimits
    from pwdeploy.local.env import LocalPlan
    from pwdeploy.local.outcome import LocalRun

# Where each public name lives: the functions in this package's modules, the types they take and return in their
# rooms, the errors in pwdeploy.errors. Read by ``__getattr__`` on first use.
_PLACES: dict[str, str] = {
    **dict.fromkeys(["load", "warnings", "render", "validate", "to_yaml", "check"], "pwdeploy.api.job_api"),
    **dict.fromkeys(["LocalRunOptions", "plan_local", "run_local"], "pwdeploy.api.local_api"),
    **dict.fromkeys(
        ["Cluster", "ClientSettings", "cluster", "connect", "list_jobs", "submit", "status", "wait", "logs"],
        "pwdeploy.api.cluster_api",
    ),
    **dict.fromkeys(["diagnose", "delete"], "pwdeploy.api.cluster_api"),
    "JobConfig": "pwdeploy.config.model",
    "Report": "pwdeploy.check.results",
    "LocalPlan": "pwdeploy.local.env",
    "LocalRun": "pwdeploy.local.outcome",
    "Outcome": "pwdeploy.cluster.submit",
    "JobStatus": "pwdeploy.cluster.status",
    "JobSummary": "pwdeploy.cluster.status",
    "JobState": "pwdeploy.cluster.progress",
    "Diagnosis": "pwdeploy.cluster.diagnose.findings",
    "RequestLimits": "pwdeploy.kube.seam",
    "PluginLimits": "pwdeploy.kube.kubeconfig",
    **dict.fromkeys(
        [
            "PwdeployError",
            "ConfigError",
            "ConfigErrors",
            "ArgumentError",
            "ValidationError",
            "ClusterError",
            "PreflightError",
            "BuildError",
            "DependencyError",
            "LocalRunError",
            "LocalLimitsError",
            "DiagnosisError",
            "CheckError",
        ],
        "pwdeploy.errors",
    ),
}

__all__ = [  # noqa: RUF022 - in the order of docs/api.md: the job, the cluster, the types, the errors
    "load",
    "warnings",
    "render",
    "validate",
    "to_yaml",
    "check",
    "plan_local",
    "run_local",
    "LocalRunOptions",
    "cluster",
    "Cluster",
    "ClientSettings",
    "connect",
    "list_jobs",
    "submit",
    "status",
    "wait",
    "logs",
    "diagnose",
    "delete",
    "JobConfig",
    "Report",
    "LocalPlan",
    "LocalRun",
    "Outcome",
    "JobStatus",
    "JobSummary",
    "JobState",
    "Diagnosis",
    "RequestLimits",
    "PluginLimits",
    "PwdeployError",
    "ConfigError",
    "ConfigErrors",
    "ArgumentError",
    "ValidationError",
    "ClusterError",
    "PreflightError",
    "BuildError",
    "DependencyError",
    "LocalRunError",
    "LocalLimitsError",
    "DiagnosisError",
    "CheckError",
]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use (then kept here)."""
    place = _PLACES.get(name)
    if place is None:
        raise AttributeError(f"module 'pwdeploy.api' has no attribute {name!r}")
    value = getattr(importlib.import_module(place), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
