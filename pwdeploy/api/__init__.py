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

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pwdeploy.api.cluster_api import (
        ClientSettings,
        Cluster,
        cluster,
        connect,
        delete,
        diagnose,
        from_kubernetes,
        list_jobs,
        logs,
        status,
        timeline,
        wait,
    )
    from pwdeploy.api.drill_api import drill
    from pwdeploy.api.images_api import build_image, build_sidecar, image_inputs, sidecar_inputs
    from pwdeploy.api.job_api import (
        ManifestCheck,
        check,
        config_reference,
        finding_schema,
        load,
        render,
        schema,
        to_json,
        to_yaml,
        validate,
        validate_files,
        warnings,
        write_manifests,
    )
    from pwdeploy.api.local_api import LocalRunOptions, plan_local, run_local
    from pwdeploy.api.preflight_api import preflight
    from pwdeploy.api.session_api import connect_session, profile
    from pwdeploy.api.submit_api import SubmitOptions, submit
    from pwdeploy.check.results import Report
    from pwdeploy.cluster.deploy import Submitted
    from pwdeploy.cluster.diagnose.findings import Diagnosis
    from pwdeploy.cluster.progress import JobState
    from pwdeploy.cluster.status import JobStatus, JobSummary
    from pwdeploy.cluster.submit import Outcome
    from pwdeploy.cluster.surroundings import Surroundings
    from pwdeploy.cluster.timeline import Entry as TimelineEntry
    from pwdeploy.cluster.timeline import Timeline
    from pwdeploy.config.model import JobConfig
    from pwdeploy.drill.conduct import Drilled, DrillOptions
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
    from pwdeploy.finding import Finding
    from pwdeploy.images.build import BuildResult
    from pwdeploy.images.inputs import ImageInputs
    from pwdeploy.kube.kubeconfig import PluginLimits
    from pwdeploy.kube.seam import RequestLimits
    from pwdeploy.local.env import LocalPlan
    from pwdeploy.local.outcome import LocalRun
    from pwdeploy.report import PreflightReport, PreflightRow
    from pwdeploy.session.attach import SessionOptions
    from pwdeploy.session.profiling import Capture

# Where each public name lives: the functions in this package's modules, the types they take and return in their
# rooms, the errors in pwdeploy.errors. Read by ``__getattr__`` on first use.
_PLACES: dict[str, str] = {
    **dict.fromkeys(
        [
            "load",
            "warnings",
            "render",
            "validate",
            "to_yaml",
            "to_json",
            "write_manifests",
            "schema",
            "finding_schema",
            "config_reference",
            "validate_files",
            "ManifestCheck",
            "check",
        ],
        "pwdeploy.api.job_api",
    ),
    **dict.fromkeys(["image_inputs", "build_image", "sidecar_inputs", "build_sidecar"], "pwdeploy.api.images_api"),
    **dict.fromkeys(["LocalRunOptions", "plan_local", "run_local"], "pwdeploy.api.local_api"),
    **dict.fromkeys(
        ["Cluster", "ClientSettings", "cluster", "from_kubernetes", "connect", "list_jobs", "status", "wait"],
        "pwdeploy.api.cluster_api",
    ),
    **dict.fromkeys(["submit", "SubmitOptions"], "pwdeploy.api.submit_api"),
    **dict.fromkeys(["connect_session", "profile"], "pwdeploy.api.session_api"),
    "preflight": "pwdeploy.api.preflight_api",
    "drill": "pwdeploy.api.drill_api",
    **dict.fromkeys(["DrillOptions", "Drilled"], "pwdeploy.drill.conduct"),
    **dict.fromkeys(["logs", "timeline", "diagnose", "delete"], "pwdeploy.api.cluster_api"),
    "JobConfig": "pwdeploy.config.model",
    "ImageInputs": "pwdeploy.images.inputs",
    "BuildResult": "pwdeploy.images.build",
    "Report": "pwdeploy.check.results",
    "Finding": "pwdeploy.finding",
    "LocalPlan": "pwdeploy.local.env",
    "LocalRun": "pwdeploy.local.outcome",
    "Outcome": "pwdeploy.cluster.submit",
    "Submitted": "pwdeploy.cluster.deploy",
    "Surroundings": "pwdeploy.cluster.surroundings",
    "SessionOptions": "pwdeploy.session.attach",
    "Capture": "pwdeploy.session.profiling",
    "Timeline": "pwdeploy.cluster.timeline",
    "TimelineEntry": "pwdeploy.cluster.timeline:Entry",
    "PreflightReport": "pwdeploy.report",
    "PreflightRow": "pwdeploy.report",
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

__all__ = [  # noqa: RUF022 - in the order of docs/api.md: the job, images, the cluster, the types, the errors
    "load",
    "warnings",
    "render",
    "validate",
    "to_yaml",
    "to_json",
    "write_manifests",
    "schema",
    "finding_schema",
    "config_reference",
    "validate_files",
    "ManifestCheck",
    "check",
    "plan_local",
    "run_local",
    "LocalRunOptions",
    "image_inputs",
    "build_image",
    "sidecar_inputs",
    "build_sidecar",
    "cluster",
    "Cluster",
    "ClientSettings",
    "from_kubernetes",
    "connect",
    "list_jobs",
    "preflight",
    "submit",
    "SubmitOptions",
    "status",
    "wait",
    "logs",
    "timeline",
    "TimelineEntry",
    "diagnose",
    "delete",
    "connect_session",
    "SessionOptions",
    "profile",
    "drill",
    "DrillOptions",
    "Drilled",
    "Surroundings",
    "JobConfig",
    "Report",
    "Finding",
    "ImageInputs",
    "BuildResult",
    "LocalPlan",
    "LocalRun",
    "PreflightReport",
    "PreflightRow",
    "Outcome",
    "Submitted",
    "Capture",
    "Timeline",
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
    module, _, attribute = place.partition(":")  # "module:attribute" where the room names it otherwise
    # __import__, not importlib.import_module: the import is timed (python -X importtime) as a statement's is.
    value = getattr(__import__(module, fromlist=[name]), attribute or name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
