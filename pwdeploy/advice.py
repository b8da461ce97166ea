"""Warnings about a job that is valid but likely to go wrong on a cluster: the CLI prints them on stderr at
render and submit. Import-light (no manifests, no YAML): render pays for it on every run.
"""

from __future__ import annotations

import re

from pwdeploy import releases
from pwdeploy.config import JobConfig
from pwdeploy.config.capacity_modes import capacity_mode
from pwdeploy.text import looks_like_credential as looks_like_credential  # the one rule, also for evidence


def job_warnings(job: JobConfig) -> list[str]:
    """Every warning for ``job``, each one line that names the field and the fix."""
    return [
        *_kueue_memory(job),
        *_literal_credentials(job),
        *_gcs_dump_flag(job),
        *_headless_command(job),
        *_main_as_pid_1(job),
        *_flex_start_duration(job),
        *_capacity_without_recovery(job),
        *_release_dates(job),
        *_unreleased_jax(job),
        *_restarts_nothing(job),
    ]


def _restarts_nothing(job: JobConfig) -> list[str]:
    scheduling = job.scheduling
    if not scheduling.restart_on_user_code_failure or scheduling.max_restarts or job.headless:
        return []
    return [
        "scheduling.restart_on_user_code_failure restarts the JobSet on any failure of main, but "
        "scheduling.max_restarts is 0, so nothing is restarted; set --max-restarts N (a restart resumes only from "
        "storage.checkpoints or the program's own checkpoints)"
    ]


def _kueue_memory(job: JobConfig) -> list[str]:
    if job.tpu.worker_memory is None or job.scheduling.queue is None:
        return []
    return [
        f"tpu.worker_memory ({job.tpu.worker_memory}) with scheduling.queue ({job.scheduling.queue}): on clusters "
        "made by xpk, Kueue gives memory to the CPU flavor and adds its node-pool selector to the workers, which "
        "then never schedule; drop --worker-memory unless your ClusterQueue covers memory in the TPU flavor"
    ]


def _literal_credentials(job: JobConfig) -> list[str]:
    main = [
        f"main.env.{name} looks like a credential and would be written into the manifest in plain text; keep it "
        f"in a Kubernetes Secret and pass --secret-env {name}=SECRET/KEY (main.secret_env) instead"
        for name, _ in job.main.env
        if looks_like_credential(name)
    ]
    workers = [
        f"worker_env.{name} (--worker-env) looks like a credential and would be written into the manifest in plain "
        "text, for every pathways-worker; the workers run the Pathways server image, not your code, so drop it "
        "unless that server reads it"
        for name, _ in job.worker_env
        if looks_like_credential(name)
    ]
    return [*main, *workers]


def _gcs_dump_flag(job: JobConfig) -> list[str]:
    return [
        f"xla_flags: {flag} is a GCS location, which XLA skips without a word; use storage.hlo_dump "
        "(--hlo-dump): the proxy dumps to its pod and an uploader copies the files there"
        for flag in job.xla_flags
        if flag.startswith("--xla_dump_to=gs://")
    ]


def _headless_command(job: JobConfig) -> list[str]:
    if not job.headless or not job.main.command:
        return []
    return [
        f"headless: main.command ({' '.join(job.main.command)}) does not run: a headless job has no main "
        "container, you connect to its proxy from your own machine; drop --headless (headless) to run it"
    ]


def _main_as_pid_1(job: JobConfig) -> list[str]:
    if job.headless or job.head.share_process_namespace:
        return []
    return [
        "head.share_process_namespace is off: main is PID 1 of its container, and the kernel drops a SIGTERM it "
        "has no handler for, so a Kueue eviction or a deleted head pod SIGKILLs it after the grace period (exit "
        "137) and fails the JobSet; handle SIGTERM in the program (pwdeploy.runtime.stop_on_sigterm, "
        "docs/restarts.md) or drop --no-share-process-namespace"
    ]


def _flex_start_duration(job: JobConfig) -> list[str]:
    if capacity_mode(job.tpu.capacity).run_duration != "node-label" or job.tpu.max_run_duration is None:
        return []
    return [
        f"tpu.max_run_duration with capacity {job.tpu.capacity}: the workers also select the node label "
        f"cloud.google.com/gke-max-run-duration-seconds={job.tpu.max_run_duration}, which only nodes created with "
        f"that run duration carry; if your {job.tpu.capacity} pool was created without one, the workers never "
        "schedule: "
        "drop --max-run-duration (docs/capacity.md)"
    ]


def _capacity_without_recovery(job: JobConfig) -> list[str]:
    ended_by = capacity_mode(job.tpu.capacity).reclaimed
    restarts, checkpoints = job.scheduling.max_restarts, job.storage.checkpoints
    if not ended_by or (restarts > 0 and checkpoints is not None):
        return []
    if restarts == 0:
        lost = "with scheduling.max_restarts 0 that ends the job for good"
        fix = "pass --max-restarts N" + ("" if checkpoints is not None else " and --checkpoint-dir gs://... to resume")
    else:
        lost = "without storage.checkpoints each of the scheduling.max_restarts restarts starts again from step 0"
        fix = "pass --checkpoint-dir gs://BUCKET/PREFIX and save checkpoints there"
    return [f"tpu.capacity {job.tpu.capacity}: {ended_by}; {lost}: {fix}"]


# A dated Pathways tag: server:20260730-jax_0.10.2, sidecar:20260423-python_3.12-jax_0.10.0 (the date is the
# release; the default jax-<V> tags carry none). Compiled on first use only (re caches it): most renders pin at
# most one of these images, and compiling it at import would cost every render about 0.1 ms.
_RELEASE_DATE = r":([0-9]{8})-(?:python_[0-9.]+-)?jax_[0-9.]+(?:@.*)?$"


def _release_dates(job: JobConfig) -> list[str]:
    """Each Pathways release pairs a proxy with its own server build; a proxy of another release was reported to die
    with a cache-key mismatch. Dated tags show the release: differing dates are worth a word before submitting."""
    images = {
        "images.proxy_server": job.images.proxy_server,
        "images.server": job.images.server,
        "images.worker": job.images.worker,
        "sidecar.base_image": job.sidecar.base_image,
        "sidecar.image": job.sidecar.image,
    }
    pinned = {path: image for path, image in images.items() if image}
    if len(pinned) < 2:
        return []
    dates = {path: m[1] for path, image in pinned.items() if (m := re.search(_RELEASE_DATE, image))}
    if len(set(dates.values())) < 2:
        return []
    listed = ", ".join(f"{path} {date}" for path, date in dates.items())
    return [
        f"Pathways images of different release dates ({listed}): a proxy and a server of different releases may "
        "not agree (a proxy of another release was seen dying with a cache-key mismatch); pin one release's tags "
        "(the same YYYYMMDD-jax_<V>) for all of them"
    ]


def _unreleased_jax(job: JobConfig) -> list[str]:
    """A JAX with no Pathways release seen (a fresh install can resolve one newer than any), whose default images
    would be a guess: jax-<V>, which no source shows."""
    version = job.pathways_version
    unpinned = [
        path
        for path, image in (("images.server", job.images.server), ("images.proxy_server", job.images.proxy_server))
        if not image
    ]
    if releases.known(version) or not unpinned:
        return []
    nearest = releases.nearest(version)
    near = ", ".join(f"{v} ({releases.default_tag(v)})" for v in nearest)
    return [
        f"pathways_version {version}: no Pathways release for jax {version} is known (docs/images.md), so "
        f"{' and '.join(unpinned)} default to a guess (jax-{version}); releases seen for the nearest JAX: {near}; "
        f"install that jax (pip install jax=={nearest[0]} jaxlib=={nearest[0]}), or pin "
        "--server-image and --proxy-server-image; check: pwdeploy preflight -f job.yaml"
    ]
