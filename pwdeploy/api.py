"""pwdeploy as a library: typed functions over the rooms, for a notebook, a test or another tool (docs/api.md).

Each function wraps what the command of the same name calls, and raises the classes of ``pwdeploy.errors`` (the
exit code a command would give is the class's ``exit_code``); none prints. The rooms are imported inside the
functions, so ``import pwdeploy.api`` costs no more than ``import pwdeploy`` (kubernetes, yaml, jax: only when a
function needs them).

A cluster function takes a ``Cluster`` from ``connect`` (kubeconfig, context and namespace resolved as kubectl
resolves them); a job's name and a namespace are checked before any request is sent.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TextIO

    from pwdeploy.check.results import Report
    from pwdeploy.cluster.diagnose.findings import Diagnosis
    from pwdeploy.cluster.progress import JobState
    from pwdeploy.cluster.status import JobStatus
    from pwdeploy.cluster.submit import Outcome
    from pwdeploy.config.model import JobConfig
    from pwdeploy.kube.seam import Kube
    from pwdeploy.local.env import LocalPlan
    from pwdeploy.local.outcome import LocalRun
    from pwdeploy.manifests.common import Manifest

__all__ = [
    "Cluster",
    "check",
    "connect",
    "delete",
    "diagnose",
    "load",
    "logs",
    "plan_local",
    "render",
    "run_local",
    "status",
    "submit",
    "to_yaml",
    "validate",
    "wait",
    "warnings",
]

DryRun = Literal["none", "client", "server"]
Component = Literal["main", "proxy", "rm", "worker", "sidecar"]


# ---------------------------------------------------------------------------------------------- the job


def load(
    config: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    installed_jax: Callable[[], str | None] | None = None,
) -> JobConfig:
    """The job config, validated: from a YAML file (a path) or a mapping as the file would hold it (nested:
    ``{"tpu": {"type": "v5p-8"}}``, or dotted keys: ``{"tpu.type": "v5p-8"}``), with ``overrides`` on top.

    ``overrides`` are dotted config paths (``{"tpu.slices": 4}``) and merge as the command-line flags do: an env
    map key by key, XLA flags flag by flag. A mapping's relative paths are read from the current directory, a
    file's from its folder. ``installed_jax`` gives the jax version the images must match (default: the installed
    distribution's, read without importing jax). Every problem is raised at once: ``ConfigError`` (one) or
    ``ConfigErrors`` (several), each naming its field.
    """
    from pwdeploy import arguments
    from pwdeploy.config.load import flatten, load_job, merge
    from pwdeploy.errors import ConfigError

    overrides = arguments.mapping(overrides, "overrides")
    if config is None or isinstance(config, str | os.PathLike):
        return load_job(None if config is None else Path(config), overrides, installed_jax=installed_jax)
    if not isinstance(config, Mapping):
        raise ConfigError(None, f"a job config is a path or a mapping, not a {type(config).__name__}")
    flat = flatten(config)
    given = merge(flat, overrides or {})
    sources = dict.fromkeys(flat, "the config mapping") | dict.fromkeys(overrides or {}, "overrides")
    return load_job(None, given, sources=sources, installed_jax=installed_jax)


def warnings(job: JobConfig) -> list[str]:
    """What ``render`` and ``submit`` warn of: a valid job that is likely to go wrong (a literal credential in
    ``main.env``, a reclaimed capacity mode without restarts, ...)."""
    from pwdeploy.advice import job_warnings

    return list(job_warnings(_job(job)))


def render(job: JobConfig, *, validate: bool = True) -> list[Manifest]:
    """The job's Kubernetes objects (the JobSet, and what goes with it), as plain dicts in a stable order; with
    ``validate``, checked against the Kubernetes and JobSet schemas and webhook rules first (``ValidationError``
    lists every problem)."""
    from pwdeploy import manifests

    objects = manifests.build(_job(job))
    if validate:
        from pwdeploy.validation.validate import require_valid

        require_valid(objects)
    return objects


def validate(objects: Sequence[Mapping[str, Any]]) -> list[str]:
    """The problems the schemas and webhook rules find in ``objects`` (rendered or read from files); empty when
    the API server and JobSet's webhook would accept them."""
    from pwdeploy import arguments
    from pwdeploy.validation.validate import validate_objects

    return validate_objects(arguments.sequence(objects, "objects", "[jobset]"))


def to_yaml(objects: Sequence[Manifest]) -> str:
    """The objects as ``pwdeploy render`` prints them (YAML documents, deterministic), for ``kubectl apply -f -``."""
    from pwdeploy import arguments, manifests

    return manifests.to_yaml(list(arguments.sequence(objects, "objects", "api.render(job)")))  # type: ignore[arg-type]


def check(job: JobConfig, paths: Sequence[str | os.PathLike[str]] = (), *, config_file: Path | None = None) -> Report:
    """The program check (``pwdeploy check``) over the job's entry module, what it imports from the job's folder,
    and ``paths``. The report's ``errors`` are what would make the command exit with ``CheckError``'s code; this
    function returns them rather than raising. ``config_file`` lets findings point at the config's lines."""
    from pwdeploy import arguments
    from pwdeploy.check import check as run_check

    checked = arguments.paths(paths, "paths")
    return run_check(_job(job), list(checked), config_file=arguments.optional_path(config_file, "config_file"))


def plan_local(
    job: JobConfig,
    command: Sequence[str] = (),
    *,
    cwd: str | os.PathLike[str] | None = None,
    cores: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> LocalPlan:
    """What ``pwdeploy local run`` would start, without starting it: the command and its folder (``main.command``
    beside the config, or ``command`` in ``cwd``, default the current directory; a leading ``python3`` is this
    Python), the emulated CPU devices and the variables set on top of ``environ`` (default: this process's),
    with the plan's warnings and notes. ``cores`` defaults to the CPU cores this process may use."""
    from pwdeploy import arguments
    from pwdeploy.local.env import plan

    return plan(
        _job(job),
        arguments.strings(command, "command", "['python3', 'train.py']"),
        cwd=arguments.optional_path(cwd, "cwd") or Path.cwd(),
        cores=_cores(cores),
        environ=_environ(environ),
    )


def run_local(
    job: JobConfig,
    command: Sequence[str] = (),
    *,
    cwd: str | os.PathLike[str] | None = None,
    config_file: str | os.PathLike[str] | None = None,
    check_program: bool = True,
    check_limits: bool = True,
    resume: bool = False,
    fail_at_step: int | None = None,
    kill_after: float | None = None,
    lose_slices: Sequence[str] = (),
    restore_slices: Sequence[str] = (),
    summary_json: str | os.PathLike[str] | None = None,
    cores: int | None = None,
    environ: Mapping[str, str] | None = None,
    progress: TextIO | None = None,
) -> LocalRun:
    """Run the job on emulated CPU devices as ``pwdeploy local run`` does, and return how it went: the exit
    status, attempts and restarts, where the checkpoints, profiles and HLO dumps went, the peaks and the per-step
    transfers. The job's own output goes where this process's stdout and stderr go; pwdeploy's lines (the plan's
    warnings, the program check's findings, each failed attempt, the summary) go to ``progress`` (default:
    nowhere). The arguments are the command's flags: ``command`` and ``cwd`` as for ``plan_local``,
    ``check_program`` (``--no-check``), ``check_limits`` (``--no-limits-check``), ``resume``, ``fail_at_step``,
    ``kill_after``, ``lose_slices`` and ``restore_slices`` (``"SLICE@STEP"``), ``summary_json``.

    A job that fails is a result (``exit_status`` not 0), not an exception. Raised: ``ConfigError`` (a headless
    job, a bad argument), ``LocalRunError`` (the command cannot start, a checkpoint folder another run holds, slice
    events that never happened in a run that succeeded) and ``LocalLimitsError`` (a run that succeeded went over
    main.memory or main.shm_size: the cluster would have killed it).
    """
    from pwdeploy import arguments
    from pwdeploy.local.launch import RunOptions, Surroundings
    from pwdeploy.local.launch import run_local as launch
    from pwdeploy.local.restarts import Faults

    job = _job(job)
    command = arguments.strings(command, "command", "['python3', 'train.py']")
    options = RunOptions(
        check_limits=check_limits,
        resume=resume,
        faults=Faults(
            fail_at_step=arguments.optional_whole(fail_at_step, "fail_at_step", 1),
            kill_after=arguments.seconds(kill_after, "kill_after"),
        ),
        lose_slice=arguments.strings(lose_slices, "lose_slices", "['1@40']"),
        restore_slice=arguments.strings(restore_slices, "restore_slices", "['1@80']"),
        summary_json=arguments.optional_path(summary_json, "summary_json"),
    )

    def say(line: str) -> None:
        if progress is not None:
            print(line, file=progress, flush=True)

    around = Surroundings(
        cwd=arguments.optional_path(cwd, "cwd") or Path.cwd(),
        cores=_cores(cores),
        environ=_environ(environ),
        say=say,
    )
    given = arguments.optional_path(config_file, "config_file")

    def program_check(local_plan: LocalPlan) -> list[str]:
        from pwdeploy.check import check_before_run
        from pwdeploy.text import printable

        report = check_before_run(
            job, config_file=given, command=local_plan.command if command else (), cwd=local_plan.cwd
        )
        for line in report.lines(fixes=False):
            say(printable(line))
        return [finding.rule for finding in report.errors]

    return launch(job, command, around, options, check_program=program_check if check_program else None)


def _job(job: object) -> JobConfig:
    """A caller's job: what ``load`` returns (a mapping or a path is ``load``'s to read first)."""
    from pwdeploy.arguments import a_kind
    from pwdeploy.config.model import JobConfig
    from pwdeploy.errors import ConfigError

    if not isinstance(job, JobConfig):
        raise ConfigError("job", f"must be a JobConfig, not {a_kind(job)}", hint="job = api.load(...)")
    return job


def _cores(cores: object) -> int:
    from pwdeploy import arguments

    return len(os.sched_getaffinity(0)) if cores is None else arguments.whole(cores, "cores", 1)


def _environ(environ: object) -> Mapping[str, str]:
    from pwdeploy import arguments

    checked = arguments.environment(environ, "environ")
    return os.environ if checked is None else checked


# ---------------------------------------------------------------------------------------------- the cluster


class Cluster(NamedTuple):
    """A connected cluster (``kube``: pwdeploy's bounded client) and the namespace the functions work in."""

    kube: Kube
    namespace: str


def connect(
    kubeconfig: str | os.PathLike[str] | None = None,
    context: str | None = None,
    namespace: str | None = None,
    *,
    on_notice: Callable[[str], None] | None = None,
) -> Cluster:
    """The cluster a kubeconfig's context names (default: ``KUBECONFIG``, else ``~/.kube/config``, else the
    in-cluster service account) and the namespace (default: the context's). Nothing is asked of the server yet.
    ``on_notice`` hears what a user should know on the way (a slow credential plugin, credentials not sent over
    plain http). A missing or unusable kubeconfig, or a bad namespace, is a ``ConfigError``; a credential
    plugin that fails is a ``ClusterError``."""
    from pwdeploy import arguments
    from pwdeploy.kube.kubeconfig import load_kube

    _check_namespace(namespace)
    path = arguments.optional_path(kubeconfig, "kubeconfig")
    kube = load_kube(path, arguments.optional_text(context, "context"), on_notice=on_notice)
    return Cluster(kube, namespace or kube.namespace)


def submit(cluster: Cluster, job: JobConfig, *, dry_run: DryRun = "none", replace: bool = False) -> Outcome:
    """Validate the job, then create its JobSet, as ``pwdeploy submit`` (without the preflight checks, and
    without waiting: see ``wait``). The same config again changes nothing (``result == "unchanged"``); another
    config under the same name is a ``ClusterError`` unless ``replace``, which deletes the old JobSet first.
    ``dry_run``: ``"client"`` sends nothing that could change the cluster, ``"server"`` has the API server admit
    it without persisting. The job's namespace is the cluster's when the config names none."""
    from pwdeploy import manifests
    from pwdeploy.cluster.deploy import SubmitOptions, submit_job
    from pwdeploy.cluster.submit import DryRun as Mode
    from pwdeploy.cluster.surroundings import Surroundings
    from pwdeploy.validation.validate import require_valid

    if dry_run not in ("none", "client", "server"):
        from pwdeploy.errors import ConfigError

        raise ConfigError("dry_run", f"{dry_run!r} is not a dry-run mode; valid: none, client, server")
    job = _job(job)._replace(namespace=job.namespace or _cluster(cluster).namespace)
    require_valid(manifests.build(job))
    options = SubmitOptions(dry_run=Mode(dry_run), replace=replace)
    return submit_job(cluster.kube, job, options, Surroundings(), confirm=lambda q: True).outcome


def status(cluster: Cluster, name: str) -> JobStatus:
    """The job's JobSet, pods, recent warning events and diagnose's findings on them, as ``pwdeploy status``
    reads them; a job that is not there is a ``ClusterError``."""
    from pwdeploy.cluster.status import read_status
    from pwdeploy.kube.seam import reading_answers

    _check_name(name)
    cluster = _cluster(cluster)
    with reading_answers(cluster.kube):
        return read_status(cluster.kube, cluster.namespace, name)


def wait(
    cluster: Cluster,
    name: str,
    *,
    until: Literal["running", "done"] = "done",
    timeout: float | None = None,
    progress: TextIO | None = None,
) -> JobState:
    """Poll until the job runs (``"running"``: every expected pod Running) or ends (``"done"``), and return its
    state. A failed job, a job that disappears and a ``timeout`` (seconds) passed are ``ClusterError``s (the job
    itself is left alone). ``progress`` gets one line per change (default: nowhere)."""
    import io

    from pwdeploy import arguments
    from pwdeploy.cluster.wait import Display, wait_for
    from pwdeploy.kube.seam import reading_answers

    _check_name(name)
    timeout = arguments.seconds(timeout, "timeout")
    if until not in ("running", "done"):
        from pwdeploy.errors import ConfigError

        raise ConfigError("until", f"{until!r} is not a state to wait for; valid: running, done")
    cluster = _cluster(cluster)
    display = Display(io.StringIO() if progress is None else progress, tty=False)
    with reading_answers(cluster.kube):
        return wait_for(cluster.kube, cluster.namespace, name, until=until, display=display, timeout=timeout)


def logs(
    cluster: Cluster,
    name: str,
    *,
    component: Component = "main",
    slice_index: int = 0,
    host: int = 0,
    tail: int | None = None,
    previous: bool = False,
    follow: bool = False,
) -> Iterator[bytes]:
    """The log of one of the job's containers, byte for byte as the API server sends it (``pwdeploy logs``):
    the pod is found now (``ClusterError`` when there is none yet), the log is read as the iterator is consumed.
    ``slice_index`` and ``host`` pick a worker (or its sidecar); ``follow`` keeps reading until the container
    ends."""
    from pwdeploy import arguments
    from pwdeploy.cluster.logs import COMPONENTS, find_pod, log_bytes
    from pwdeploy.errors import ConfigError
    from pwdeploy.kube.seam import reading_answers

    _check_name(name)
    if component not in COMPONENTS:
        raise ConfigError("component", f"{component!r} is not a component; valid: {', '.join(COMPONENTS)}")
    slice_index, host = arguments.whole(slice_index, "slice_index", 0), arguments.whole(host, "host", 0)
    tail = arguments.optional_whole(tail, "tail", 0)
    kube, namespace = _cluster(cluster)
    with reading_answers(kube):
        pod = find_pod(kube, namespace, name, component, slice_index, host)
    container = COMPONENTS[component][1]
    return log_bytes(kube, namespace, pod, container, follow=follow, tail=tail, previous=previous)


def diagnose(cluster: Cluster, name: str) -> Diagnosis:
    """Why the job is not running (``pwdeploy diagnose``): its findings, most important first, each with its
    evidence and fix. The diagnosis is returned whatever it found: the command's ``DiagnosisError`` is for
    findings of severity error, which are ``Diagnosis.errors`` here."""
    from pwdeploy.cluster.diagnose import diagnose as explain
    from pwdeploy.kube.seam import reading_answers

    _check_name(name)
    cluster = _cluster(cluster)
    with reading_answers(cluster.kube):
        return explain(cluster.kube, cluster.namespace, name)


def delete(cluster: Cluster, name: str, *, wait: bool = False) -> None:
    """Delete a pwdeploy-managed job (its JobSet, Jobs and pods), as ``pwdeploy delete --yes``. A JobSet that
    another tool created is refused (``ClusterError``); with ``wait``, return only once it is gone."""
    from pwdeploy.cluster import jobsets as js
    from pwdeploy.errors import ClusterError
    from pwdeploy.kube.seam import reading_answers

    _check_name(name)
    kube, namespace = _cluster(cluster)
    with reading_answers(kube):
        if not js.is_managed(js.require_jobset(kube, namespace, name)):
            raise ClusterError(
                f"jobset {name} in namespace {namespace} is not managed by pwdeploy; not deleting it",
                hint="delete it with the tool that created it",
            )
        js.delete_jobset(kube, namespace, name)
        if wait and not js.wait_gone(kube, namespace, name):
            raise ClusterError(
                f"jobset {name} is still being deleted after {js.DELETE_TIMEOUT_S:.0f} s",
                hint=f"look for stuck pods or finalizers: pwdeploy status {name} -n {namespace}",
            )


def _cluster(cluster: object) -> Cluster:
    from pwdeploy.arguments import a_kind
    from pwdeploy.errors import ConfigError

    if not isinstance(cluster, Cluster):
        raise ConfigError("cluster", f"must be a Cluster, not {a_kind(cluster)}", hint="cluster = api.connect(...)")
    return cluster


def _check_namespace(namespace: str | None) -> None:
    from pwdeploy import arguments
    from pwdeploy.errors import ConfigError
    from pwdeploy.names import dns1123_label

    problem = None if namespace is None else dns1123_label(arguments.text(namespace, "namespace"))
    if problem is not None:
        raise ConfigError("namespace", f"{namespace!r} is not a valid namespace: {problem}")


def _check_name(name: str) -> None:
    from pwdeploy import arguments
    from pwdeploy.errors import ConfigError
    from pwdeploy.names import dns1035_label

    problem = dns1035_label(arguments.text(name, "name"))
    if problem is not None:
        raise ConfigError("name", f"{name!r} is not a job name: {problem}", hint="the name is the config's `name`")
