"""A job submitted from start to end (`pwdeploy submit`): checked, preflighted when asked, applied, then followed
until it runs or ends and, for a headless job, connected to (docs/api.md, "The cluster")."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pwdeploy.api.cluster_api import Cluster, DryRun, given_cluster
from pwdeploy.api.job_api import given_job

if TYPE_CHECKING:
    from pwdeploy.cluster.deploy import DeployOptions, Submitted
    from pwdeploy.cluster.surroundings import Surroundings
    from pwdeploy.config.model import JobConfig
    from pwdeploy.kube.seam import Kube
    from pwdeploy.report import PreflightReport
    from pwdeploy.session.attach import SessionOptions


class SubmitOptions(NamedTuple):
    """How ``submit`` submits: the flags of `pwdeploy submit` beyond the job's config, by the same names."""

    dry_run: DryRun = "none"  # "client": nothing sent that could change the cluster; "server": admitted, not kept
    replace: bool = False  # another config under the job's name is deleted first (after ``confirm``)
    wait: Literal["running", "done"] | None = None  # follow the job until it runs or ends
    timeout: float | None = None  # of the wait, and of the connect session's
    connect: SessionOptions | None = None  # a headless job: once it runs, this port-forward session
    preflight: bool = False  # run the preflight checks (readiness, GCS, images) first; a failed one stops it
    region: str | None = None  # the cluster's GCP region, for the preflight's bucket-location check


def submit(
    cluster: Cluster | Callable[[], Cluster],
    job: JobConfig,
    options: SubmitOptions | None = None,
    *,
    confirm: Callable[[str], bool] | None = None,
    surroundings: Surroundings | None = None,
    **flags: Any,
) -> Submitted:
    """Validate the job, then create its JobSet (``pwdeploy submit``) and do what ``options`` ask: the preflight
    checks before, the wait and the connect session after. The same config again changes nothing (``result ==
    "unchanged"``); another config under the same name is a ``ClusterError`` unless ``options.replace``.
    ``cluster`` may be a function that returns one, called once the job is found valid (a config's problems are
    told before a kubeconfig's). ``confirm`` is asked before a replace (default: yes). The lines for the user go
    to ``surroundings.say``, the output's to ``surroundings.show`` (default: nowhere). The job's namespace is the
    cluster's when the config names none.

    Returns the ``Submitted``: the apply's ``outcome`` (its ``name``, ``namespace``, ``config_hash`` and
    ``result`` read through), the ``state`` waited for, the exit ``status`` (130: the wait was stopped; a connect
    session's own) and the ``next_steps`` to tell. ``SubmitOptions``' fields given as keywords (``dry_run=``,
    ``replace=``, as before ``SubmitOptions``) are read with a ``DeprecationWarning``.
    """
    from pwdeploy.advice import job_warnings
    from pwdeploy.cluster.deploy import submit_job
    from pwdeploy.cluster.surroundings import Surroundings

    chosen = _options(options, flags)
    around = surroundings or Surroundings()
    job = given_job(job)
    _ready(chosen, job)
    kube, namespace = given_cluster(cluster if isinstance(cluster, Cluster) else cluster())
    job = job._replace(namespace=job.namespace or namespace)
    for warning in job_warnings(job):
        around.say(f"warning: {warning}")
    checks = None if not chosen.preflight else lambda checked: _preflight(checked, kube, chosen.region)
    return submit_job(kube, job, _deploy_options(chosen, around), around, confirm=confirm or _yes, preflight=checks)


def _options(options: object, flags: Mapping[str, Any]) -> SubmitOptions:
    """The caller's options; the flags given as keywords (the signature before ``SubmitOptions``) on top."""
    import warnings

    from pwdeploy.arguments import a_kind
    from pwdeploy.errors import ArgumentError

    if options is not None and not isinstance(options, SubmitOptions):
        raise ArgumentError("options", f"must be a SubmitOptions, not {a_kind(options)}")
    unknown = sorted(set(flags) - set(SubmitOptions._fields))
    if unknown:
        raise ArgumentError(unknown[0], "is not an argument of submit", hint=f"valid: {SubmitOptions._fields}")
    if flags:
        warnings.warn(
            f"submit({', '.join(f'{k}=...' for k in flags)}) is deprecated: pass options=SubmitOptions(...)",
            DeprecationWarning,
            stacklevel=3,
        )
    return (options or SubmitOptions())._replace(**flags)


def _ready(options: SubmitOptions, job: JobConfig) -> None:
    """Every problem of the options and the config, told before the cluster is asked anything (or even found)."""
    from pwdeploy import manifests
    from pwdeploy.validation.validate import require_valid

    _check(options, job)
    if options.connect is not None:
        from pwdeploy.session.attach import bind_local

        bind_local(options.connect.local_port).close()  # a port in use stops submit before the job is created
    require_valid(manifests.build(job._replace(namespace=job.namespace or "default")))


def _check(options: SubmitOptions, job: JobConfig) -> None:
    """Options that would be ignored are refused, so a script never believes it waited."""
    from pwdeploy import arguments
    from pwdeploy.errors import ArgumentError

    if options.dry_run not in ("none", "client", "server"):
        raise ArgumentError("dry_run", f"{options.dry_run!r} is not a dry-run mode; valid: none, client, server")
    if options.wait not in (None, "running", "done"):
        raise ArgumentError("wait", f"{options.wait!r} is not a state to wait for; valid: running, done")
    arguments.seconds(options.timeout, "timeout")
    connect = options.connect is not None
    if options.timeout is not None and options.wait is None and not connect:
        raise ArgumentError("timeout", "applies only to `wait`", hint="add `wait` (or `wait=done`), or drop `timeout`")
    if options.wait is not None and options.dry_run != "none":
        raise ArgumentError("wait", f"a `dry_run={options.dry_run}` creates nothing to wait for")
    if connect and options.dry_run != "none":
        raise ArgumentError("connect", f"a `dry_run={options.dry_run}` creates nothing to connect to")
    if connect and options.wait == "done":
        raise ArgumentError("connect", "a headless job is done only when deleted; `connect` waits until it runs")
    if connect and not job.headless:
        raise ArgumentError("connect", "applies to headless jobs only: this job's program runs in the cluster")


def _deploy_options(options: SubmitOptions, around: Surroundings) -> DeployOptions:
    from functools import partial

    from pwdeploy.cluster.deploy import DeployOptions
    from pwdeploy.cluster.submit import DryRun as Mode

    session = None
    if options.connect is not None:
        from pwdeploy.session.attach import run_session

        opened = options.connect
        if opened.timeout is None:
            opened = opened._replace(timeout=options.timeout)
        session = partial(run_session, options=opened, around=around)
    return DeployOptions(
        dry_run=Mode(options.dry_run),
        replace=options.replace,
        wait="done" if options.wait == "done" else "running" if options.wait is not None else None,
        timeout=options.timeout,
        connect=session,
    )


def _preflight(job: JobConfig, kube: Kube, region: str | None) -> list[str]:
    """The cluster readiness, GCS and image checks, side by side; a failed row stops submit before anything is
    created, and the rows that are not ok are the lines told before it goes on."""
    from pwdeploy.errors import PreflightError
    from pwdeploy.preflight import run_preflight
    from pwdeploy.readiness import cluster_source

    report = run_preflight(job, region=region, extra_sources=[cluster_source(job, kube)])
    if report.failed:
        raise PreflightError(
            "preflight failed; nothing was submitted:\n" + report.format_table(),
            hint="fix what the report names, or pass `preflight=False` to submit anyway",
        )
    return unsettled_rows(report)


def unsettled_rows(report: PreflightReport) -> list[str]:
    """One line per row that is not ok: ``warning: CHECK LOCATION: DETAIL`` (or ``not verified: ...``)."""
    from pwdeploy.report import Status

    word = {Status.WARN: "warning", Status.NOT_VERIFIED: "not verified", Status.FAILED: "failed"}
    return [f"{word[r.status]}: {r.id} {r.where}: {r.message}" for r in report.results if r.status in word]


def _yes(_question: str) -> bool:
    return True
