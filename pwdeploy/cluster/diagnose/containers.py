"""Containers: what the kubelet reports once a pod has a node: config errors (a missing Secret), native sidecars
that never let the main container start, and terminations (OOM kill, SIGBUS on a full /dev/shm, any other
non-zero exit with its last log lines).

Texts matched:
- ``CreateContainerConfigError`` with the kubelet's ``secret "<name>" not found`` or ``couldn't find key <key> in
  Secret <ns>/<name>`` (kubernetes/kubernetes pkg/kubelet/kubelet_pods.go).
- terminated reason ``OOMKilled`` (exit 137); exit code 135 = 128 + SIGBUS (7), what a write to a full
  memory-backed /dev/shm raises.
- waiting reason ``CrashLoopBackOff`` with ``back-off 5m0s restarting failed container=<c> pod=<p>`` (kubernetes/
  kubernetes pkg/kubelet/kuberuntime/kuberuntime_manager.go ``doBackOff``, ``kubecontainer.ErrCrashLoopBackOff``):
  the kubelet keeps restarting a container that keeps failing; an error whatever the last termination was (OOM
  kill, SIGBUS, a crash), since it does not come right by itself.
- native sidecars (init containers with restartPolicy: Always, Kubernetes >= 1.29 by default): on an older
  kubelet they run as ordinary init containers that never finish, so the pod stays ``PodInitializing``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import NamedTuple

from pwdeploy import identifiers as ids
from pwdeploy.cluster.diagnose import pathways
from pwdeploy.cluster.diagnose import pods as p
from pwdeploy.cluster.diagnose.findings import Cause, Observation, quote
from pwdeploy.cluster.diagnose.pathways import SHM_EXHAUSTED
from pwdeploy.cluster.diagnose.read import MAX_LOGS, LogTail, Snapshot
from pwdeploy.severity import Severity

SIDECAR_GRACE_S = 120  # a sidecar running this long while the main container waits has not "started" it
_SECRET = re.compile(
    r'secret "(?P<name>[^"]+)" not found|couldn\'t find key (?P<key>\S+) in Secret [^/\s]+/(?P<in>\S+)'
)
SIGBUS_EXIT = 135
LAST_LINES = 3

# What each cause's rule rests on (its findings' ``source``).
KUBELET_CONFIG = "kubernetes/kubernetes: pkg/kubelet/kubelet_pods.go (CreateContainerConfigError)"
SIDECAR_DOCS = "https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/"
OOM_KILL = "kubernetes/kubernetes: pkg/kubelet (terminated reason OOMKilled, exit code 137 = 128 + SIGKILL)"
CRASH_LOOP = "kubernetes/kubernetes: pkg/kubelet/kuberuntime/kuberuntime_manager.go (doBackOff, CrashLoopBackOff)"

MISSING_SECRET = Cause(
    "missing-secret", "start", '`secret "x" not found`, `couldn\'t find key`', severity="error", source=KUBELET_CONFIG
)
CONTAINER_CONFIG = Cause(
    "container-config",
    "start",
    "the kubelet cannot create the container from its spec",
    severity="error",
    fix="the container's configuration refers to something missing (see the message): a ConfigMap, a key",
    source=KUBELET_CONFIG,
)
SIDECAR_NOT_STARTED = Cause(
    "sidecar-not-started",
    "start",
    "`main` waits in PodInitializing for 2 min: the proxy has not passed its startup probe (it does not listen "
    "yet), or the native sidecars do not start (kubelet < 1.29)",
    severity="error",
    source=SIDECAR_DOCS,
)
# A termination: an error while the container is down or crash-looping, a warning once it runs again or the
# Job replaced its pod (_terminated, _recovered).
OOM_KILLED = Cause(
    "oom-killed", "run", "a container was OOM-killed: which container, against which memory field", source=OOM_KILL
)
CRASH = Cause(
    "crash",
    "run",
    "any other non-zero exit, with its last log lines: an error while the container is down or in "
    "CrashLoopBackOff (whatever its cause), a warning once it runs again or the Job replaced the failed pod",
    source=CRASH_LOOP,
)


def observations(snap: Snapshot) -> list[Observation]:
    logs = {(t.pod, t.container): t for t in snap.logs}
    alike = _logs_by_kind(snap, logs)
    found: list[Observation] = []
    for pod in snap.pods:
        if pod.get("metadata", {}).get("deletionTimestamp"):
            continue
        found += _sidecars(pod, snap.now, snap.name)
        successor = p.replacement(pod, snap.pods)
        for c in p.containers(pod):
            found += _waiting(c, snap.namespace)
            log = logs.get((p.name(pod), str(c.spec.get("name")))) or alike.get(_kind(c))
            found += [_recovered(obs, successor) if successor else obs for obs in _terminated(c, log, snap.name)]
    return found


def _recovered(obs: Observation, successor: str) -> Observation:
    """A failure the Job already recovered from (it replaced the failed pod): a warning, not an error."""
    evidence = f"{obs.evidence}; the Job replaced the pod: {successor} runs in its place"
    return obs._replace(severity="warning", key=f"{obs.key}/replaced", evidence=evidence)


def _kind(c: p.Container) -> tuple[str, str, int] | None:
    """(role, container, exit code) of a failed run: wanted_logs reads one log per kind, which stands for all."""
    return p.failure_kind(c)


def _logs_by_kind(snap: Snapshot, logs: dict[tuple[str, str], LogTail]) -> dict[tuple[str, str, int] | None, LogTail]:
    found: dict[tuple[str, str, int] | None, LogTail] = {}
    for pod in snap.pods:
        for c in p.containers(pod):
            tail = logs.get((p.name(pod), str(c.spec.get("name"))))
            if tail is not None and (kind := _kind(c)) is not None:
                found.setdefault(kind, tail)
    return found


def _waiting(c: p.Container, namespace: str) -> list[Observation]:
    waiting = (c.status.get("state") or {}).get("waiting") or {}
    if waiting.get("reason") != "CreateContainerConfigError":
        return []
    message = str(waiting.get("message") or "")
    container, role, pod = str(c.spec.get("name")), p.role(c.pod), p.name(c.pod)
    evidence = f"container {container}: CreateContainerConfigError: {quote(message)}"
    match = _SECRET.search(message)
    if match is None:
        return [CONTAINER_CONFIG.observe(role, pod, message, evidence)]
    secret = match["name"] or match["in"]
    key = match["key"] or "KEY"
    fix = (
        f"create the Secret in namespace {namespace}: kubectl create secret generic {secret} -n {namespace} "
        f"--from-literal={key}=VALUE, or fix main.secret_env (NAME=SECRET/KEY)"
    )
    return [MISSING_SECRET.observe(role, pod, message, evidence, fix=fix)]


# The init containers pwdeploy renders with restartPolicy: Always (they run beside the main container).
NATIVE_SIDECARS = frozenset({ids.PROXY_CONTAINER, ids.RM_CONTAINER, ids.SIDECAR_CONTAINER, ids.HLO_UPLOADER_CONTAINER})


def _sidecars(pod: p.Object, now: datetime, job: str) -> list[Observation]:
    """A native sidecar that runs while the main containers still wait (PodInitializing) long after it started."""
    listed = list(p.containers(pod))
    if not any(
        ((c.status.get("state") or {}).get("waiting") or {}).get("reason") == "PodInitializing"
        for c in listed
        if not c.init
    ):
        return []
    found = []
    for c in listed:
        running = (c.status.get("state") or {}).get("running") or {}
        # pwdeploy's native sidecars only: another init container may simply take long (a data download)
        if not c.init or c.spec.get("name") not in NATIVE_SIDECARS or not running.get("startedAt"):
            continue
        since = _seconds_since(str(running["startedAt"]), now)
        dropped = c.spec.get("restartPolicy") != "Always"
        if since is None or since < SIDECAR_GRACE_S:
            continue
        name = str(c.spec.get("name"))
        if c.spec.get("startupProbe") and c.status.get("started") is False:  # running, its probe not yet passed
            found.append(_probe_pending(c, name, since, job))
            continue
        if c.status.get("started") is True:  # started as a sidecar: main waits on another container
            continue
        evidence = (
            f"init container {name} has run for {since // 60} min while the main containers wait (PodInitializing)"
            + ("; its restartPolicy: Always is gone from the live pod (the API server dropped it)" if dropped else "")
        )
        fix = (
            "native sidecars need Kubernetes >= 1.29 on the control plane and on the nodes' kubelets: upgrade the "
            "node pool (gcloud container clusters upgrade CLUSTER --node-pool POOL)"
        )
        found.append(SIDECAR_NOT_STARTED.observe(p.role(pod), p.name(pod), name, evidence, fix=fix))
    return found


def _probe_pending(c: p.Container, name: str, since: int, job: str) -> Observation:
    """A sidecar whose startup probe has not passed holds the main containers back by design (the proxy's probe
    waits for its port): not an old kubelet, but a server that does not listen."""
    probe = c.spec.get("startupProbe") or {}
    port = (probe.get("tcpSocket") or {}).get("port")
    evidence = (
        f"init container {name} has run for {since // 60} min without passing its startup probe"
        + (f" (nothing listens on port {port} yet)" if port else "")
        + "; the main containers wait for it"
    )
    fix = (
        f"read its log: pwdeploy logs {job} --component {_component(name)}{_where(c.pod)}; the kubelet restarts it "
        "once the probe gives up"
    )
    return SIDECAR_NOT_STARTED.observe(p.role(c.pod), p.name(c.pod), f"{name}/probe", evidence, fix=fix)


def _seconds_since(timestamp: str, now: datetime) -> int | None:
    try:
        return int((now - datetime.fromisoformat(timestamp.replace("Z", "+00:00"))).total_seconds())
    except (ValueError, TypeError):  # not a timestamp, or one without a zone
        return None


def _ended(c: p.Container) -> tuple[dict[str, object], bool] | None:
    """(the termination, whether it is the container's current state) of a failed run, or None."""
    return p.failed_run(c)


def crash_looping(c: p.Container) -> bool:
    return ((c.status.get("state") or {}).get("waiting") or {}).get("reason") == "CrashLoopBackOff"


class Termination(NamedTuple):
    """A container that ended (now, or last time while it crash-loops), as the rules below read it."""

    c: p.Container
    log: LogTail | None  # its last lines, when read
    job: str
    code: int  # its exit code
    reason: str  # the kubelet's (OOMKilled, Error, ...)
    now: bool  # ended now, not last time
    looping: bool  # in CrashLoopBackOff
    ran: str  # what it did, as the evidence starts

    @property
    def container(self) -> str:
        return str(self.c.spec.get("name"))

    def observe(self, cause: Cause, key: str, evidence: str, fix: str) -> list[Observation]:
        """The one observation of ``cause``: an error while the container is down or crash-looping, a warning
        once it runs again (or the Job replaced its pod)."""
        severity: Severity = "error" if self.now or self.looping else "warning"
        return [cause.observe(p.role(self.c.pod), p.name(self.c.pod), key, evidence, severity=severity, fix=fix)]


def _terminated(c: p.Container, log: LogTail | None, job: str) -> list[Observation]:
    """What a container that ended says: the first rule of TERMINATIONS that names it."""
    ended = _termination(c, log, job)
    if ended is None:
        return []
    return next(found for rule in TERMINATIONS if (found := rule(ended)) is not None)


def _termination(c: p.Container, log: LogTail | None, job: str) -> Termination | None:
    looping = crash_looping(c)
    last = (c.status.get("lastState") or {}).get("terminated")
    ended = _ended(c) or ((last, False) if looping and isinstance(last, dict) else None)  # exit 0, again and again
    if ended is None or p.disrupted(c.pod):
        return None
    term, now = ended
    code, reason = int(str(term.get("exitCode") or 0)), str(term.get("reason") or "")
    restarts = int(c.status.get("restartCount") or 0)
    signal = " = SIGBUS" if code == SIGBUS_EXIT else ""
    ran = f"container {c.spec.get('name')} terminated: {reason or 'Error'} (exit {code}{signal})"
    ran += f", restarted {restarts} times" if restarts else ""
    ran += ", now in CrashLoopBackOff (the kubelet keeps restarting it)" if looping else ""
    return Termination(c, log, job, code, reason, now, looping, ran)


def _oom_killed(t: Termination) -> list[Observation] | None:
    if t.reason != "OOMKilled":
        return None
    limit, field = p.memory_limit(t.c), p.MEMORY_FIELD.get(t.container, "the container's memory limit")
    fix = f"raise {field} (now {limit})" if limit else f"the node ran out of memory: set {field} or use a larger host"
    return t.observe(OOM_KILLED, t.container, f"{t.ran}; memory limit {limit or 'none'}", fix)


def _sigbus(t: Termination) -> list[Observation] | None:
    if t.code != SIGBUS_EXIT:
        return None
    shm = p.shm_volume(t.c)
    size = f"/dev/shm sizeLimit {shm[1]}" if shm else "no memory-backed /dev/shm"
    field = p.shm_field(t.c, shm[0]) if shm else "main.shm_size / tpu.shm_size"
    fix = f"/dev/shm filled up: raise {field}" + (f" (now {shm[1]})" if shm and shm[1] else "")
    return t.observe(SHM_EXHAUSTED, t.container, f"{t.ran}; {size}", fix)


def _sidecar_stopped(t: Termination) -> list[Observation] | None:
    return [] if _stopped_by_kubelet(t.c, t.code) and not t.looping else None  # a sidecar stopped with its pod


def _named_by_pathways(t: Termination) -> list[Observation] | None:
    return [] if t.log is not None and pathways.classify(t.log.lines) is not None else None  # its log's rules


def _crash(t: Termination) -> list[Observation]:
    tail = [line for line in (t.log.lines if t.log else []) if line.strip()][-LAST_LINES:]
    evidence = t.ran + (f"; last log lines: {' | '.join(quote(line, 200) for line in tail)}" if tail else "")
    fix = f"read the whole log: pwdeploy logs {t.job} --component {_component(t.container)}{_where(t.c.pod)}"
    return t.observe(CRASH, f"{t.container}/{t.code}", evidence, fix + (" --previous" if not t.now else ""))


# What an ended container is, in order: the first rule that names it decides (None: not this one; []: nothing
# to say of it).
TERMINATIONS: tuple[Callable[[Termination], list[Observation] | None], ...] = (
    _oom_killed,
    _sigbus,
    _sidecar_stopped,
    _named_by_pathways,
    _crash,
)


def _where(pod: p.Object) -> str:
    """`` --slice S --host H`` for a worker pod (`pwdeploy logs` reads slice 0 host 0 without them), else ""."""
    if p.role(pod) != "worker pod":
        return ""
    labels = pod.get("metadata", {}).get("labels") or {}
    slice_index, host = labels.get(ids.JOB_INDEX_LABEL), labels.get(ids.COMPLETION_INDEX_LABEL)
    if not (str(slice_index).isdigit() and str(host).isdigit()):
        return ""
    return f" --slice {slice_index} --host {host}"


def _stopped_by_kubelet(c: p.Container, code: int) -> bool:
    """A native sidecar the kubelet stopped once the regular containers ended (kubernetes
    kuberuntime_termination_order.go): SIGTERM (143), or the SIGKILL that ends a sidecar ignoring it as PID 1 of its
    container (137; an OOM kill is named before this). A deleted pod's containers are not read at all."""
    return c.init and c.spec.get("restartPolicy") == "Always" and code in (128 + 15, 128 + 9)


def _component(container: str) -> str:
    from pwdeploy.cluster.logs import COMPONENTS

    return next((k for k, (_, name) in COMPONENTS.items() if name == container), container)


def wanted_logs(snap: Snapshot) -> list[tuple[str, str, bool]]:
    """(pod, container, previous) of at most MAX_LOGS containers: one per kind of failure first (the user's
    program before the rest), then, while the job runs, the proxy and one worker (hangs, GCS refusals)."""
    failed: dict[tuple[str, str, int], tuple[str, str, bool]] = {}
    running: list[tuple[str, str, bool]] = []
    for pod in sorted(snap.pods, key=lambda q: (p.role(q) != "head pod", p.name(q))):
        for c in p.containers(pod):
            ended = _ended(c)
            name = str(c.spec.get("name"))
            if ended is not None and ended[0].get("reason") != "OOMKilled":
                key = (p.role(pod), name, int(str(ended[0].get("exitCode"))))
                failed.setdefault(key, (p.name(pod), name, not ended[1]))
            elif (
                (c.status.get("state") or {}).get("running")
                and name in _WATCHED
                and name not in {r[1] for r in running}
            ):
                running.append((p.name(pod), name, False))
    first = sorted(failed.values(), key=lambda w: w[1] != "main")
    return (first + running)[:MAX_LOGS]


_WATCHED = (ids.PROXY_CONTAINER, ids.RM_CONTAINER, ids.WORKER_CONTAINER)  # their logs say hang, GCS refusals
