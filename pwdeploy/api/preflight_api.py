"""The checks before a job is submitted (``pwdeploy preflight``): the program check first, then the job's GCS
locations, its images and, given a cluster, the cluster's readiness, side by side in one report (docs/api.md,
"Before a submit")."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pwdeploy.api.job_api import PathLike, check_before, given_job, say_to

if TYPE_CHECKING:
    from typing import TextIO

    from pwdeploy.api.cluster_api import Cluster
    from pwdeploy.config.model import JobConfig
    from pwdeploy.report import PreflightReport, PreflightRow


def preflight(
    job: JobConfig,
    *,
    region: str | None = None,
    check_gcs: bool = True,
    cluster: Cluster | Callable[[], Cluster] | None = None,
    check_program: bool = True,
    config_file: PathLike | None = None,
    progress: TextIO | None = None,
) -> PreflightReport:
    """The job's preflight report (``pwdeploy preflight``): its GCS locations (unless ``check_gcs`` is False:
    bucket, permissions, lifecycle rules, ``region``, a probe object), every image it references, and with a
    ``cluster``, whether the cluster can run it (the readiness rows, first). ``cluster`` may be a function that
    returns one: a cluster it cannot give (no kubeconfig, an unknown context) is then one failed ``cluster`` row,
    and the other sources are still checked. A failed row is in the report (``report.failed``), not raised.

    With ``check_program``, the program check runs first, its findings told to ``progress`` (default: nowhere);
    an error finding stops the preflight with ``CheckError``. ``config_file`` lets the findings point at the
    config's lines. A ``region`` that is not a GCP region is an ``ArgumentError``."""
    from pwdeploy import arguments
    from pwdeploy.errors import CheckError
    from pwdeploy.preflight import run_preflight

    job = given_job(job)
    config = arguments.optional_path(config_file, "config_file")
    region = arguments.optional_text(region, "region")
    if check_program and check_before(job, say_to(progress), config_file=config).errors:
        raise CheckError(
            "the job's program would fail on Pathways (the findings above); preflight stopped",
            hint="fix them, or pass `check_program=False`",
        )
    sources = [] if cluster is None else [cluster_rows(job, cluster)]
    return run_preflight(job, region=region, check_gcs=check_gcs, extra_sources=sources)


def cluster_rows(job: JobConfig, cluster: Cluster | Callable[[], Cluster]) -> Callable[[], list[PreflightRow]]:
    """The readiness rows of ``cluster`` as a preflight source; a cluster the function cannot give is one failed
    row (found here, before the sources run side by side: a credential plugin's notices come first)."""
    from pwdeploy.api.cluster_api import Cluster, given_cluster
    from pwdeploy.errors import PwdeployError
    from pwdeploy.readiness import cluster_source

    if isinstance(cluster, Cluster):
        return cluster_source(job, cluster.kube)
    try:
        found = given_cluster(cluster())
    except PwdeployError as exc:
        return cluster_source(job, exc)
    return cluster_source(job, found.kube)
