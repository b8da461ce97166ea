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
from pwdeploy.kube.api import POD_LOGS, Action, ApiError, Kube

SLICES_READY = re.compile(r"\*\*\*\s*(\d+)\s*/\s*(\d+)\s+Pathways Slices Now Ready")
LOG_TAIL_LINES = 500  # the latest count is near the end; a long-running RM's first lines are not needed
LOG_TAIL_BYTES = 256 * 1024


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


def read_slices(kube: Kube, namespace: str, pod: str, total: int) -> SlicesReady | None:
    """The resource manager's latest count from the end of its log; None when the log cannot be read (not yet
    readable, or this identity may not read logs): the count is progress, never a reason to fail."""
    query = [("container", ids.RM_CONTAINER), ("tailLines", str(LOG_TAIL_LINES)), ("limitBytes", str(LOG_TAIL_BYTES))]
    lines: list[str] = []
    stream = kube.stream_lines(Action("get", POD_LOGS, namespace, pod), POD_LOGS.path(namespace, pod), query)
    try:
        for line in stream:
            lines.append(line[:2000])
            if len(lines) > LOG_TAIL_LINES:  # a server that ignores tailLines
                del lines[0]
    except ApiError:
        return None
    finally:
        getattr(stream, "close", lambda: None)()
    return latest(lines, total)
