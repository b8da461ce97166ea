"""Submitting rendered objects: mark them as pwdeploy's, check the cluster can run them, then apply.

Re-submitting the same config is a no-op ("unchanged"); a different config under the same name is refused
unless the caller replaces it (JobSets are largely immutable), which deletes and recreates after confirmation.
Replacing is also how a job that already ended runs again with the same config.
"""

from __future__ import annotations

import copy
import hashlib
import json
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Literal

from pwdeploy import __version__
from pwdeploy.cluster import jobsets as js
from pwdeploy.cluster.jobsets import Object
from pwdeploy.cluster.progress import TERMINAL, Phase, job_state
from pwdeploy.errors import ClusterError, PwdeployError
from pwdeploy.identifiers import CONFIG_HASH_ANNOTATION, MANAGED_BY, MANAGED_BY_LABEL, VERSION_ANNOTATION
from pwdeploy.kube.api_errors import WebhookError
from pwdeploy.kube.seam import Kube

Result = Literal["created", "unchanged", "replaced"]


class DryRun(Enum):
    NONE = "none"
    CLIENT = "client"  # reads only: nothing is sent that could change the cluster
    SERVER = "server"  # writes are sent with dryRun=All: the API server validates and admits, persists nothing


class InterruptedReplace(ClusterError):
    """Ctrl-C while the old JobSet was being deleted: it goes away, the new one was not created."""

    exit_code = 130


@dataclass(frozen=True)
class Outcome:
    name: str
    namespace: str
    config_hash: str
    result: Result
    ended: Phase | None = None  # for "unchanged": Completed or Failed when that job already ran to its end

    def describe(self, dry_run: DryRun) -> str:
        target = f"jobset {self.name} (namespace {self.namespace}, config {self.config_hash})"
        if self.result == "unchanged":
            ended = f"; it already ended ({self.ended}): pass --replace to run it again" if self.ended else ""
            return f"{target} unchanged{ended}"
        if dry_run is DryRun.NONE:
            return f"{target} {self.result}"
        if dry_run is DryRun.CLIENT:
            verb = {"created": "created", "replaced": "deleted and created again"}[self.result]
            return f"{target} would be {verb} (client dry run, nothing sent)"
        if self.result == "replaced":
            return (
                f"{target} would be deleted and created again: the API server accepted the delete (server dry run, "
                "nothing persisted; the new spec is admitted only once the old job is gone)"
            )
        return f"{target} would be created: the API server accepted it (server dry run, nothing persisted)"


def config_hash(objects: list[Object]) -> str:
    """A digest of what was rendered, ignoring pwdeploy's own bookkeeping (its version and this hash)."""
    stripped = copy.deepcopy(objects)
    for obj in stripped:
        for part in ("labels", "annotations"):
            values = obj.get("metadata", {}).get(part) or {}
            for key in (CONFIG_HASH_ANNOTATION, VERSION_ANNOTATION):
                values.pop(key, None)
    canonical = json.dumps(stripped, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def mark_managed(objects: list[Object], namespace: str) -> list[Object]:
    """Copies of the rendered objects that say they are pwdeploy's and record the config hash.

    The renderer normally sets the managed-by label and version annotation itself (then these are no-ops).
    """
    digest = config_hash(objects)
    marked = copy.deepcopy(objects)
    for obj in marked:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", namespace)
        meta.setdefault("labels", {}).setdefault(MANAGED_BY_LABEL, MANAGED_BY)
        annotations = meta.setdefault("annotations", {})
        annotations.setdefault(VERSION_ANNOTATION, __version__)
        annotations[CONFIG_HASH_ANNOTATION] = digest
    return marked


def submit(
    kube: Kube,
    objects: list[Object],
    *,
    dry_run: DryRun = DryRun.NONE,
    replace: bool = False,
    confirm: Callable[[str], bool] = lambda question: False,
    on_progress: Callable[[str], None] = lambda line: None,
) -> Outcome:
    """Apply the (marked) JobSet, unless an identical one is already there.

    With ``replace``, a JobSet of another config (or of this config that already ended) is deleted, after
    ``confirm``, and created again.
    """
    desired = _the_jobset(objects)
    name, namespace = js.name_of(desired), js.namespace_of(desired)
    digest = str(js.annotation(desired, CONFIG_HASH_ANNOTATION))  # mark_managed set it
    existing = js.get_jobset(kube, namespace, name)
    if existing is not None and js.being_deleted(existing):
        on_progress(f"jobset {name} is still being deleted; waiting for it to go")
        _wait_deleted(kube, namespace, name, dry_run)
        existing = None
    result: Result = "created"
    if existing is not None:
        old = js.annotation(existing, CONFIG_HASH_ANNOTATION) or _applied_hash(existing, digest)
        phase = job_state(existing).phase
        ended = phase if phase in TERMINAL else None
        if old == digest and not (replace and ended):
            return Outcome(name, namespace, digest, "unchanged", ended)
        _refuse_unless_replacing(existing, name, namespace, old, digest, replace)
        _delete_for_replace(kube, name, namespace, dry_run, confirm, on_progress)
        if dry_run is not DryRun.NONE:
            return Outcome(name, namespace, digest, "replaced")  # the new spec is admitted only after the delete
        result = "replaced"
    if dry_run is DryRun.SERVER:
        js.apply_jobset(kube, desired, dry_run=True)
    elif dry_run is DryRun.NONE:
        _apply_saying_what_an_interrupt_left(kube, desired, digest)
    return Outcome(name, namespace, digest, result)


class InterruptedApply(ClusterError):
    """Ctrl-C (exit 130) or SIGTERM (exit 143) while the JobSet's apply was in flight; the message says whether
    the JobSet was created (it was looked up after the interrupt) and how to delete it."""

    exit_code = 130


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be, so both leave the same report."""


IMMUTABLE = "field is immutable"  # apimachinery's ValidateImmutableField, which JobSet's webhook applies to a spec
CHECK_DEADLINE_S = 10.0  # how long the look-up after an interrupt may take: the user is waiting to be let go
SETTLE_S = 1.0  # an apply the server took just before the connection closed may land a moment later


def _apply_saying_what_an_interrupt_left(kube: Kube, desired: Object, digest: str) -> None:
    """Apply; interrupted (Ctrl-C, SIGTERM) while the request is in flight, the server may or may not have created
    the JobSet: look, and say which, with the commands to see and delete it, never just 'Aborted.'."""
    name, namespace = js.name_of(desired), js.namespace_of(desired)
    try:
        with _sigterm_as_interrupt():
            js.apply_jobset(kube, desired, dry_run=False)
    except WebhookError as refused:
        raise _lost_a_race(refused, name, namespace) from None
    except KeyboardInterrupt as interrupt:
        signal_name, code = ("SIGTERM", 143) if isinstance(interrupt, _Terminated) else ("Ctrl-C", 130)
        error = _what_the_interrupt_left(kube, namespace, name, digest, signal_name)
        error.exit_code = code
        raise error from None


def _lost_a_race(refused: WebhookError, name: str, namespace: str) -> ClusterError:
    """JobSet's webhook refused the apply of a JobSet that was not there when submit looked, as immutable: another
    submit (of another config) created it meanwhile. Any other refusal is itself."""
    if not (refused.denied and IMMUTABLE in refused.message):
        return refused
    reason = refused.message[refused.message.rfind("denied the request: ") :].removeprefix("denied the request: ")
    return ClusterError(
        f"jobset {name} was created meanwhile in namespace {namespace} with another config (another submit "
        f"under this name?), and a JobSet's spec cannot be changed in place: JobSet's webhook: {reason}",
        hint=f"see which runs: pwdeploy status {name} -n {namespace}; pass `replace` to delete it and create this "
        "job, or choose another name (--name)",
    )


def _what_the_interrupt_left(kube: Kube, namespace: str, name: str, digest: str, signal_name: str) -> InterruptedApply:
    import dataclasses

    from pwdeploy.kube.seam import RetryPolicy

    ns = f" -n {namespace}"
    see, delete = f"pwdeploy status {name}{ns}", f"pwdeploy delete {name}{ns}"
    quick = dataclasses.replace(kube, deadline=CHECK_DEADLINE_S, retry=RetryPolicy(attempts=2), on_wait=None)
    try:
        found = js.get_jobset(quick, namespace, name)
        if found is None:
            kube.clock.sleep(SETTLE_S)
            found = js.get_jobset(quick, namespace, name)
    except (KeyboardInterrupt, PwdeployError) as exc:
        why = "interrupted again" if isinstance(exc, KeyboardInterrupt) else f"the look-up failed: {exc}"
        return InterruptedApply(
            f"{signal_name} while jobset {name} was being applied; whether it was created is not known ({why})",
            hint=f"see: {see}; if it is there and you do not want it (it holds TPUs): {delete}",
        )
    if found is not None and js.annotation(found, CONFIG_HASH_ANNOTATION) == digest:
        return InterruptedApply(
            f"{signal_name} while jobset {name} was being applied: it WAS created (config {digest}) and its pods "
            "are being scheduled (TPUs are billed while they run)",
            hint=f"keep it and follow it: {see}; or delete it: {delete}",
        )
    return InterruptedApply(
        f"{signal_name} while jobset {name} was being applied: it was not created; nothing of this submit runs",
        hint=f"run the same `pwdeploy submit` again; check with: {see}",
    )


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises ``_Terminated`` here (main thread only: elsewhere signals cannot be handled)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum: int, frame: object) -> None:
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _the_jobset(objects: list[Object]) -> Object:
    jobsets = [o for o in objects if o.get("kind") == "JobSet"]
    others = [f"{o.get('kind')} {o.get('metadata', {}).get('name')}" for o in objects if o.get("kind") != "JobSet"]
    if len(jobsets) != 1 or others:
        raise ClusterError(f"submit applies exactly one JobSet; the rendered objects are: {', '.join(others)}")
    return jobsets[0]


def _delete_for_replace(
    kube: Kube,
    name: str,
    namespace: str,
    dry_run: DryRun,
    confirm: Callable[[str], bool],
    on_progress: Callable[[str], None],
) -> None:
    if dry_run is DryRun.NONE and not confirm(
        f"Delete jobset {name} in namespace {namespace} (its pods stop now) and create it again?"
    ):
        raise PwdeployError("not replaced: nothing was changed")
    if dry_run is DryRun.CLIENT:
        return
    js.delete_jobset(kube, namespace, name, dry_run=dry_run is DryRun.SERVER)
    if dry_run is DryRun.SERVER:
        return
    on_progress(f"deleting jobset {name} (waiting for its pods to stop)")
    try:
        _wait_deleted(kube, namespace, name, dry_run)
    except KeyboardInterrupt:
        raise InterruptedReplace(
            f"interrupted while jobset {name} was being deleted: the old job is going away and the new config "
            "was not submitted",
            hint="run the same `pwdeploy submit` again (`replace` is no longer needed once it is gone)",
        ) from None


def _refuse_unless_replacing(
    existing: Object, name: str, namespace: str, old: str | None, new: str, replace: bool
) -> None:
    if replace:
        return
    if js.is_managed(existing) and old is None:  # rendered by pwdeploy, applied by another client (kubectl)
        raise ClusterError(
            f"jobset {name} already exists in namespace {namespace}: applied from `pwdeploy render` by another "
            f"client, without the {CONFIG_HASH_ANNOTATION} annotation submit records, so whether it runs this "
            "config is not known",
            hint=f"pass `replace` to delete it and create this job, keep it (pwdeploy status {name} -n {namespace}), "
            "or choose another name (--name)",
        )
    if not js.is_managed(existing) or old is None:
        raise ClusterError(
            f"jobset {name} already exists in namespace {namespace} and was not created by pwdeploy",
            hint="choose another name (--name), or pass `replace` to delete it and create this job instead",
        )
    raise ClusterError(
        f"jobset {name} already exists in namespace {namespace} with a different config "
        f"(running {old}, submitting {new}); a JobSet's spec cannot be changed in place",
        hint="pass `replace` to delete the running job and create this one, or choose another name (--name)",
    )


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"  # kubectl apply (client-side) records the object


def _applied_hash(existing: Object, digest: str) -> str | None:
    """The config hash of what `kubectl apply -f` (client-side) of a `pwdeploy render` output recorded: ``digest``
    when it is this config (with or without the namespace kubectl may have filled in), another hash when not, None
    without such a record (``kubectl apply --server-side``, ``kubectl create``)."""
    text = js.annotation(existing, LAST_APPLIED)
    try:
        applied = json.loads(text) if text else None
    except ValueError:
        return None
    if not isinstance(applied, dict):
        return None
    bare = copy.deepcopy(applied)
    bare.get("metadata", {}).pop("namespace", None)
    hashes = (config_hash([applied]), config_hash([bare]))
    return digest if digest in hashes else hashes[0]


def _wait_deleted(kube: Kube, namespace: str, name: str, dry_run: DryRun) -> None:
    if dry_run is not DryRun.NONE:
        return
    if not js.wait_gone(kube, namespace, name):
        raise ClusterError(
            f"jobset {name} is still being deleted after {js.DELETE_TIMEOUT_S:.0f} s; nothing was created",
            hint=f"look for stuck pods or finalizers: pwdeploy status {name} -n {namespace}",
        )
