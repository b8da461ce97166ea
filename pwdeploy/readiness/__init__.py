"""Cluster readiness: can this cluster run this job? Read-only checks through the Kubernetes API, one preflight
report row each, run concurrently; one module per check, each declaring its name once (``Check``).

The control plane's version is asked first, alone: it also tells whether the API server answers at all, so an
unreachable cluster costs one request (with its retries) instead of one per check. The checks then run side by
side: ``kubernetes-version`` (version), ``jobset-api``, ``controllers``, ``namespace``, ``queue``,
``provisioning`` (capacity queued only), ``dynamic-slicing`` (tpu.dynamic_slicing only), ``tpu-capacity``,
``head-capacity``, ``permissions``, one ``secret`` row per Secret that ``main.secret_env`` references, and (mtc.enabled
only) ``mtc-version``, ``mtc-driver`` and ``mtc-configuration``. The checks
read what the job asks of the cluster (selectors, tolerations, requests) from the rendered JobSet, never from
constants of their own. Each node list, and the list of the cluster's active pods, is asked once however many
checks read it. A check the API server will not answer for this identity is ``not verified``; the only writes are
access reviews and one server dry run (nothing persisted).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from pwdeploy.config import JobConfig
from pwdeploy.errors import ConfigError, PwdeployError
from pwdeploy.kube.seam import ApiError, Kube
from pwdeploy.readiness import (
    controllers,
    dynamic_slicing,
    head_capacity,
    jobset_api,
    mtc_configuration,
    mtc_driver,
    mtc_version,
    namespace,
    permissions,
    provisioning,
    queue,
    secrets,
    tpu_capacity,
    version,
)
from pwdeploy.readiness.jobset_api import unknown_fields
from pwdeploy.readiness.target import Check, Row, Target
from pwdeploy.report import PreflightRow, Status

__all__ = ["MODULES", "Check", "Row", "Target", "check_cluster", "renderable", "unknown_fields"]

# The checks' modules in the order of the report (docs/preflight.md's table is generated from their docstrings).
MODULES = (
    version,
    jobset_api,
    controllers,
    namespace,
    queue,
    provisioning,
    dynamic_slicing,
    tpu_capacity,
    head_capacity,
    permissions,
    secrets,
    mtc_version,
    mtc_driver,
    mtc_configuration,
)

PLACEHOLDER_TAG = "unpushed"  # renders a job whose pushed image is missing: the image rows report it


def checks(job: JobConfig, *, max_workers: int) -> list[Check]:
    """Every check after the version, in the order of the report."""
    return [
        jobset_api.CHECK,
        controllers.CHECK,
        namespace.CHECK,
        queue.CHECK,
        *provisioning.checks(job.tpu.capacity),
        *dynamic_slicing.checks(job),
        tpu_capacity.CHECK,
        head_capacity.CHECK,
        permissions.check_with(max_workers),
        *secrets.checks(job),
        *mtc_version.checks(job),
        *mtc_driver.checks(job),
        *mtc_configuration.checks(job),
    ]


def check_cluster(job: JobConfig, kube: Kube, *, max_workers: int = 8) -> list[PreflightRow]:
    """One row per readiness check, in a fixed order; ``max_workers`` requests are in flight at most."""
    from pwdeploy import manifests

    (jobset,) = [obj for obj in manifests.build(renderable(job)) if obj.get("kind") == "JobSet"]
    target = Target(job, jobset, job.namespace or kube.namespace, kube)
    rest = checks(job, max_workers=max_workers)
    try:
        found = version.kubernetes_version(kube)
    except ApiError as exc:
        if exc.status in (None, 401):  # no answer, or the credentials are refused: nothing else can be asked
            skipped = "not checked: the API server did not answer the version request"
            return [
                Row(target, version.NAME, version.SOURCE)(Status.FAILED, exc.message, exc.hint),
                *(Row(target, check.name, check.source)(Status.NOT_VERIFIED, skipped) for check in rest),
            ]
        first = version.check_failed(exc)
    else:
        first = version.check_with(found)
    with ThreadPoolExecutor(max_workers=max_workers) as pool:
        return list(pool.map(lambda check: check(target), [first, *rest]))


def cluster_source(job: JobConfig, kube: Kube | PwdeployError) -> Callable[[], list[PreflightRow]]:
    """The readiness rows as a preflight source (``preflight --cluster`` and ``submit``), run beside the GCS and
    image checks and first in the report. A cluster that could not be found (the error ``kube`` holds: no
    kubeconfig, a bad one, an unknown context) is one failed ``cluster`` row saying why, and the other sources are
    still checked."""
    if not isinstance(kube, PwdeployError):
        found = kube
        return lambda: check_cluster(job, found)
    message = kube.line() if isinstance(kube, ConfigError) else kube.message
    source = "https://kubernetes.io/docs/concepts/configuration/organize-cluster-access-kubeconfig/"
    row = PreflightRow("cluster", Status.FAILED, "kubeconfig", f"not checked: {message}", kube.hint, source)
    return lambda: [row]


def renderable(job: JobConfig) -> JobConfig:
    """``job`` with a placeholder for a pushed image it lacks (``image.repository`` or ``sidecar.repository`` set,
    nothing pushed matches): what the cluster is asked does not depend on the image, and the image rows of
    preflight name the missing one with its fix."""
    if not job.headless and job.main.image is None and job.image.repository:
        job = job._replace(main=job.main._replace(image=f"{job.image.repository}:{PLACEHOLDER_TAG}"))
    if job.sidecar.image is None and job.sidecar.repository:
        job = job._replace(sidecar=job.sidecar._replace(image=f"{job.sidecar.repository}:{PLACEHOLDER_TAG}"))
    return job
