"""``queue``: the Kueue LocalQueue of ``scheduling.queue`` exists in the job's namespace, read at the version
Kueue prefers (v1beta2 from Kueue v0.15.0; a Kueue that serves only v1beta1, deprecated with its removal
announced, is said to be old)."""

from __future__ import annotations

from pwdeploy.cluster import jobsets as js
from pwdeploy.readiness.target import Check, Row, Target
from pwdeploy.report import PreflightRow, Status

# What this check's verdict rests on (its rows' ``source``).
SOURCE = "https://kueue.sigs.k8s.io/docs/concepts/local_queue/"

FIELDS = ("scheduling.queue",)


def _run(target: Target, row: Row) -> PreflightRow:
    queue, ns, kube = target.job.scheduling.queue, target.namespace, target.kube
    if not queue:
        return row(Status.OK, "scheduling.queue is not set: Kueue does not queue this job", None, FIELDS)
    resource = js.kueue_localqueues(kube)
    if resource is None:
        return row(
            Status.FAILED,
            f"scheduling.queue is {queue!r} but Kueue (kueue.x-k8s.io) is not installed",
            "install Kueue or remove scheduling.queue",
            FIELDS,
        )
    old = (
        f"; Kueue serves {resource.group_version} (a release before v0.15.0: v1beta1 is deprecated, its removal "
        "announced; upgrade Kueue)"
        if resource.version == "v1beta1"
        else f" ({resource.group_version})"
    )
    if js.localqueue_exists(kube, resource, ns, queue):
        return row(Status.OK, f"LocalQueue {queue!r} exists in namespace {ns!r}{old}", None, FIELDS)
    names = js.localqueue_names(kube, resource, ns)
    available = f"available: {', '.join(names)}" if names else "there are none in this namespace"
    return row(
        Status.FAILED,
        f"LocalQueue {queue!r} does not exist in namespace {ns!r}; {available}",
        "set scheduling.queue (--queue) to one of them, or create it",
        FIELDS,
    )


CHECK = Check("queue", _run, SOURCE)
