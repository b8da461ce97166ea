"""``controllers``: the installed JobSet (and, for a job with a queue, Kueue) versions, read from their controller
Deployments' images, with the known defects of those versions that touch a pwdeploy job, and whether Kueue's
WaitForPodsReady would evict the job before it is likely to start.

The Deployments are the release manifests' (``namePrefix`` + ``controller-manager`` in ``namespace``,
kubernetes-sigs/jobset config/default/kustomization.yaml and kubernetes-sigs/kueue config/default/
kustomization.yaml); Kueue's Configuration is the ConfigMap ``kueue-manager-config`` (config/components/manager/
kustomization.yaml ``configMapGenerator``), key ``controller_manager_config.yaml``. WaitForPodsReady is on by
default since Kueue v0.19.0 with a 30-minute ``timeout`` and a ``recoveryTimeout`` that defaults to it
(CHANGELOG/CHANGELOG-0.19.md, #11855; apis/config/v1beta2/defaults.go); before, it is on only when configured,
with a 5-minute default timeout (apis/config/v1beta1/defaults.go). A version that cannot be read (another install,
no leave to read Deployments) is said, not guessed.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from pwdeploy import identifiers as ids
from pwdeploy.cluster.jobsets import Object
from pwdeploy.cluster.nodes import replicated_job
from pwdeploy.config.capacity_modes import capacity_mode
from pwdeploy.kube.seam import Action, ApiError, Kube, Resource
from pwdeploy.readiness.target import Check, Row, Target
from pwdeploy.report import PreflightRow, Status

# What this check's verdict rests on (its rows' ``source``).
SOURCE = (
    "kubernetes-sigs/jobset: config/default/kustomization.yaml; kubernetes-sigs/kueue: "
    "config/default/kustomization.yaml, apis/config/v1beta2/defaults.go (WaitForPodsReady)"
)

DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
JOBSET_DEPLOYMENT = ("jobset-system", "jobset-controller-manager")
KUEUE_DEPLOYMENT = ("kueue-system", "kueue-controller-manager")
KUEUE_CONFIG = ("kueue-system", "kueue-manager-config", "controller_manager_config.yaml")
Version = tuple[int, int, int]


class Defect(NamedTuple):
    """A known defect of a component's releases: affected below ``fixed`` in its minor line (a minor not listed
    and older than the first listed is affected from ``since``; newer than the last listed is not)."""

    component: str
    what: str
    fixed: tuple[Version, ...]  # the first fixed release of each minor line that has one; () none yet
    since: Version
    fix: str
    source: str
    multi_host: bool = False  # only a job whose slices span several VMs (a leader pod and followers) meets it

    def affects(self, version: Version) -> bool:
        if version < self.since:
            return False
        for fixed in self.fixed:
            if version[:2] == fixed[:2]:
                return version < fixed
        return not self.fixed or version < self.fixed[0]


DEFECTS: tuple[Defect, ...] = (
    Defect(
        "JobSet",
        "its pod webhook refuses a multi-host slice's other pods while the slice's failed leader pod is still there "
        "(FailedCreate `expected 1 leader pod (...), but got 2`): the Job never fails and the JobSet never restarts",
        (),
        (0, 0, 0),
        "delete the failed leader pod when it happens (pwdeploy diagnose names it); upgrade to a release after v0.12.0",
        "kubernetes-sigs/jobset#1276 (commit 1dc6eec9, on main after v0.12.0)",
        multi_host=True,
    ),
    Defect(
        "Kueue",
        "a JobSet deleted with foreground propagation (pwdeploy delete, submit --replace) can hang while a finished "
        "pod stays on an unreachable node",
        ((0, 16, 8), (0, 17, 2), (0, 18, 0)),
        (0, 16, 0),
        "upgrade Kueue (v0.16.8, v0.17.2, v0.18.0 or later)",
        "kubernetes-sigs/kueue CHANGELOG/CHANGELOG-0.16.md v0.16.8 (#10855), CHANGELOG-0.17.md v0.17.2 (#10856)",
    ),
    Defect(
        "Kueue",
        "with manageJobWithoutQueueName, JobSets without a queue outside managedJobsNamespaceSelector are held by "
        "Kueue anyway",
        ((0, 14, 5), (0, 15, 0)),
        (0, 0, 0),
        "upgrade Kueue (v0.14.5, v0.15.0 or later)",
        "kubernetes-sigs/kueue CHANGELOG/CHANGELOG-0.14.md v0.14.5 (#7762)",
    ),
)
PODS_READY_DEFAULT_SINCE: Version = (0, 19, 0)
PODS_READY_DEFAULT_S = 30 * 60  # v1beta2 DefaultWaitForPodsReadyTimeout
PODS_READY_OLD_DEFAULT_S = 5 * 60  # v1beta1 defaultPodsReadyTimeout (when waitForPodsReady is enabled)
# How long a job likely takes from admission to every pod Ready: pulling the multi-GB Pathways images and starting
# a slice takes minutes; a flex-start pool is provisioned only after admission and can take an hour or more
# (queued provisioning is not counted: Kueue admits it once its ProvisioningRequest has the nodes).
LIKELY_START_S = 10 * 60
LIKELY_START_SCALING_S = 60 * 60
FIELDS = ("scheduling.queue", "tpu.capacity")


def _run(target: Target, row: Row) -> PreflightRow:
    kube, notes, status, fixes = target.kube, [], Status.OK, []
    multi_host = int(replicated_job(target.jobset, ids.WORKER_JOB)["template"]["spec"].get("completions") or 1) > 1
    components = [("JobSet", JOBSET_DEPLOYMENT)]
    if target.job.scheduling.queue:
        components.append(("Kueue", KUEUE_DEPLOYMENT))
    versions: dict[str, Version] = {}
    for component, (namespace, name) in components:
        found, text = _deployed_version(kube, namespace, name)
        if found is None:
            notes.append(f"{component} version not read ({text})")
            continue
        versions[component] = found
        known = [
            d for d in DEFECTS if d.component == component and d.affects(found) and (multi_host or not d.multi_host)
        ]
        if not known:
            notes.append(f"{component} {text}: no known defect that touches this job")
        for defect in known:
            notes.append(f"{component} {text}: {defect.what} [{defect.source}]")
            fixes.append(defect.fix)
            status = Status.WARN
    if "Kueue" in versions:
        verdict, fix = _pods_ready(kube, target, versions["Kueue"])
        if verdict:
            notes.append(verdict)
        if fix:
            fixes.append(fix)
            status = Status.WARN
    if not versions:
        status = Status.NOT_VERIFIED
    fields = FIELDS if target.job.scheduling.queue else ()
    return row(status, "; ".join(notes), "; ".join(fixes) or None, fields)


def _deployed_version(kube: Kube, namespace: str, name: str) -> tuple[Version | None, str]:
    """(version, its text) of the Deployment's first container image tag, or (None, why not)."""
    try:
        deployment: Object = kube.request(
            Action("get", DEPLOYMENTS, namespace, name), "GET", DEPLOYMENTS.path(namespace, name)
        )
    except ApiError as exc:
        if exc.status in (403, 404):
            where = f"deployment {namespace}/{name}"
            return None, f"{where} not found" if exc.status == 404 else f"this identity may not read {where}"
        raise
    containers = (((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    image = str(containers[0].get("image", "")) if containers else ""
    found = re.search(r":v?(\d+)\.(\d+)\.(\d+)", image.rsplit("/", 1)[-1])
    if found is None:
        return None, f"image {image or 'none'} of deployment {namespace}/{name} carries no version tag"
    return (int(found[1]), int(found[2]), int(found[3])), f"v{found[1]}.{found[2]}.{found[3]}"


def _pods_ready(kube: Kube, target: Target, version: Version) -> tuple[str, str | None]:
    """(what Kueue's WaitForPodsReady does to this job, a fix when it likely evicts it before it starts)."""
    waits = _pods_ready_waits(_kueue_config(kube), version)
    if isinstance(waits, str):
        return waits, None
    timeout_s, recovery_s, said = waits
    likely = LIKELY_START_SCALING_S if _scales_after_admission(target) else LIKELY_START_S
    text = f"Kueue {said}: timeout {_minutes(timeout_s)}, recoveryTimeout {_minutes(recovery_s)}"
    if min(timeout_s, recovery_s) >= likely:
        return text, None
    return (
        f"{text}, and this job likely needs {_minutes(likely)} or more from admission to every pod Ready (image "
        "pulls"
        + (", a flex-start pool provisioned after admission" if likely == LIKELY_START_SCALING_S else "")
        + "): Kueue would evict it with PodsReadyTimeout",
        "raise waitForPodsReady.timeout and recoveryTimeout in Kueue's Configuration (ConfigMap kueue-manager-config "
        "in kueue-system), or use capacity that is there before admission (a reservation, queued provisioning)",
    )


def _kueue_config(kube: Kube) -> dict[str, Any] | None:
    """Kueue's Configuration from its ConfigMap; None when it cannot be read (forbidden, missing, not YAML)."""
    import yaml

    namespace, name, key = KUEUE_CONFIG
    try:
        config_map: Object = kube.request(
            Action("get", CONFIGMAPS, namespace, name), "GET", CONFIGMAPS.path(namespace, name)
        )
        config = yaml.safe_load(str((config_map.get("data") or {}).get(key) or "")) or {}
    except ApiError as exc:
        if exc.status not in (403, 404):
            raise
        return None
    except yaml.YAMLError:
        return None
    return config if isinstance(config, dict) else {}


def _pods_ready_waits(config: dict[str, Any] | None, version: Version) -> tuple[int, int, str] | str:
    """(timeout, recoveryTimeout in seconds, how they are known) of WaitForPodsReady, or why there is none."""
    on_by_default = version >= PODS_READY_DEFAULT_SINCE
    settings = config.get("waitForPodsReady") if config is not None else None
    if config is None:
        if not on_by_default:
            return "Kueue's WaitForPodsReady not read (its ConfigMap is not readable)"
        return (
            PODS_READY_DEFAULT_S,
            PODS_READY_DEFAULT_S,
            ("WaitForPodsReady is on by default since Kueue v0.19.0 (its ConfigMap is not readable)"),
        )
    if not isinstance(settings, dict) or settings.get("enable") is False:
        if not on_by_default or (isinstance(settings, dict) and settings.get("enable") is False):
            return "Kueue's WaitForPodsReady is off"
        return PODS_READY_DEFAULT_S, PODS_READY_DEFAULT_S, "WaitForPodsReady is on by default since Kueue v0.19.0"
    default = PODS_READY_DEFAULT_S if on_by_default else PODS_READY_OLD_DEFAULT_S
    timeout_s = duration_s(settings.get("timeout")) or default
    return timeout_s, duration_s(settings.get("recoveryTimeout")) or timeout_s, "WaitForPodsReady is configured"


def _scales_after_admission(target: Target) -> bool:
    mode = capacity_mode(target.job.tpu.capacity)
    return mode.scales_from_zero and not mode.provisioning_request


def duration_s(value: object) -> int | None:
    """Seconds of a Go duration (``30m``, ``1h30m``, ``90s``); None for anything else."""
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", str(value or ""))
    if not value or parts is None or not any(parts.groups()):
        return None
    hours, minutes, seconds = (int(p or 0) for p in parts.groups())
    return hours * 3600 + minutes * 60 + seconds


def _minutes(seconds: int) -> str:
    return f"{seconds // 60} min" if seconds % 60 == 0 else f"{seconds} s"


CHECK = Check("controllers", _run, SOURCE)
