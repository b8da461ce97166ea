"""Preflight: what can be checked before a job is submitted, from several sources, in one report.

Sources: GCS (``preflight.gcs``: buckets, permissions, lifecycle, region, probes) and images
(``preflight.image_checks``: every image the job references exists). A further source is any function that
returns rows (``RowSource``), passed as ``extra_sources``, e.g. the cluster's readiness. The sources run side by side;
the report lists the further sources' rows first, then GCS, then images.

The sources are imported when they run: ``pwdeploy.gcs`` builds rows of ``preflight.report``, so importing them
here would make a cycle, and ``import pwdeploy.preflight`` stays light.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from pwdeploy.config import JobConfig
from pwdeploy.gcs import storage_client as gcs_client
from pwdeploy.report import PreflightReport, PreflightRow, Status

if TYPE_CHECKING:
    from pwdeploy.preflight.image_checks import ImageLookup

__all__ = ["PreflightReport", "PreflightRow", "RowSource", "Status", "run_preflight"]

RowSource = Callable[[], Iterable[PreflightRow]]


def run_preflight(
    job: JobConfig,
    *,
    client_factory: Callable[[], Any] = gcs_client.default_client,
    region: str | None = None,
    image_lookup: ImageLookup | None = None,
    check_gcs: bool = True,
    check_images: bool = True,
    extra_sources: Sequence[RowSource] = (),
) -> PreflightReport:
    """Every check for ``job``: ``extra_sources``, then GCS (unless ``check_gcs`` is false), then images (unless
    ``check_images`` is false), all at once.

    ``client_factory`` builds the google.cloud.storage client and ``image_lookup`` asks a registry for a manifest
    (default: a ``RegistryClient`` with docker's credentials); both are seams for tests. ``region`` is the
    cluster's GCP region (ConfigError naming --region when it is not one).
    """
    from pwdeploy.preflight import gcs

    region = gcs.check_region(region)
    parts: list[Callable[[], PreflightReport]] = [_as_report(source) for source in extra_sources]
    if check_gcs:
        parts.append(lambda: gcs.check_gcs(job, client_factory=client_factory, region=region))
    if check_images:
        parts.append(lambda: PreflightReport(tuple(_image_rows(job, image_lookup))))
    if not parts:
        return PreflightReport(())
    with ThreadPoolExecutor(max_workers=len(parts)) as pool:
        reports = [future.result() for future in [pool.submit(part) for part in parts]]
    return reports[0].combine(*reports[1:])


def _image_rows(job: JobConfig, lookup: ImageLookup | None) -> list[PreflightRow]:
    from pwdeploy.preflight.image_checks import check_images

    if lookup is None:
        from pwdeploy.registry.client import RegistryClient
        from pwdeploy.registry.credentials import Credentials

        lookup = RegistryClient(Credentials().for_registry).lookup
    return check_images(job, lookup)


def _as_report(source: RowSource) -> Callable[[], PreflightReport]:
    return lambda: PreflightReport(tuple(source()))
