"""The resource manager's own count of ready TPU slices, read from its log on the head pod, for `status` and
`connect` while a job starts.

Google's "Troubleshoot Pathways on Cloud" page ("Health monitoring", docs.cloud.google.com/ai-hypercomputer/docs/
workloads/pathways-on-cloud/troubleshooting-pathways): "To verify all TPUs registered to the Pathways Resource
Manager are ready, you can look for ``***<num slices>/<num slices> Pathways Slices Now Ready ***`` in the
pathways-rm container logs", e.g. ``I1101 04:52:41.967764 1 multi_job_allocator.cc:1063] *** 2/2 Pathways Slices
Now Ready ***``. The same page: a client may connect once the proxy serves, before every slice is ready; its
computations wait for the slices (virtual slices until then).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from pwdeploy import identifiers as ids
from pwdeploy.cluster.jobsets import Object
from pwdeploy.cluster.logs import log_tail, unread_reason
from pwdeploy.kube.seam import ApiError, Kube

SLICES_READY = re.compile(r"\*\*\*\s*(\d+)\s*/\s*(\d+)\s+Pathways Slices Now Ready")
LOG_TAIL_LINES = 500  # the latest count is near the end; a long-running RM's first lines are not needed
LOG_TAIL_BYTES = 256 * 1024
LOG_WAIT_S = 2.0  # connecting, the first byte and the whole tail, in one try: `status` never waits longer on it


class SlicesReady(NamedTuple):
    ready: int
    total: int

    @property
    def text(self) -> str:
        return f"resource manager: {self.ready}/{self.total} Pathways slices ready"


def rm_running(pod: Object) -> bool:
    """Whether the pod's resource manager container runs (as a native sidecar or, headless, a plain container)."""
    status = pod.get("status") or {}
    for s in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        if isinstance(s, dict) and s.get("name") == ids.RM_CONTAINER:
            return "running" in (s.get("state") or {})
    return False


def worker_slices(jobset: Object) -> int:
    for rj in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        if isinstance(rj, dict) and rj.get("name") == ids.WORKER_JOB:
            return int(rj.get("replicas") or 1)
    return 0


def latest(lines: list[str], total: int) -> SlicesReady:
    """The last count the log states; 0 of ``total`` before the first."""
    for line in reversed(lines):
        match = SLICES_READY.search(line)
        if match:
            return SlicesReady(int(match[1]), int(match[2]))
    return SlicesReady(0, total)


def read_slices(kube: Kube, namespace: str, pod: str, total: int) -> SlicesReady:
    """The resource manager's latest count from the end of its log, read once within ``LOG_WAIT_S`` (no retries:
    the count is progress, never worth a wait); an ``ApiError`` when it cannot be read, for the caller to say
    (``unread_note``) or pass over."""
    lines = log_tail(
        kube, namespace, pod, ids.RM_CONTAINER, lines=LOG_TAIL_LINES, max_bytes=LOG_TAIL_BYTES, within=LOG_WAIT_S
    )
    return latest(lines, total)


def unread_note(error: ApiError, node: str = "") -> str:
    """One line saying that the count could not be read, and why (which component failed)."""
    return f"resource manager: the count of ready slices could not be read: {unread_reason(error, node)}"
