"""How main ends when its head pod is deleted, read from a JobSet (as `render` prints it, or as it is on the
cluster): the one reading `local run`'s evictions and `drill`'s prediction share.

The kubelet stops a container with SIGTERM to its first process and SIGKILL once the pod's
``terminationGracePeriodSeconds`` is over (kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go
``killContainer``). Without ``shareProcessNamespace`` on the head pod, main is PID 1 of its container, and the kernel
delivers a signal from outside the namespace to it only when it has a handler for it (pid_namespaces(7)): a main
without one ends in the SIGKILL, 137. With it, the pause container is PID 1 and SIGTERM ends such a main, 143.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from typing import Any

from pwdeploy import identifiers as ids
from pwdeploy.manifests.failure_policy import PodFailure

DEFAULT_GRACE_SECONDS = 30.0  # Kubernetes' terminationGracePeriodSeconds when a pod sets none


def head_pod(jobset: Mapping[str, Any]) -> Mapping[str, Any]:
    """The head pod's template spec (empty for a JobSet without one)."""
    for rj in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        if isinstance(rj, Mapping) and rj.get("name") == ids.HEAD_JOB:
            template = ((rj.get("template") or {}).get("spec") or {}).get("template") or {}
            spec = template.get("spec") if isinstance(template, Mapping) else None
            return spec if isinstance(spec, Mapping) else {}
    return {}


def main_is_pid_1(jobset: Mapping[str, Any]) -> bool:
    """Whether main is PID 1 of its container: the head pod does not share its process namespace."""
    return head_pod(jobset).get("shareProcessNamespace") is not True


def grace_seconds(jobset: Mapping[str, Any]) -> float:
    """The head pod's terminationGracePeriodSeconds, else Kubernetes' default."""
    seconds = head_pod(jobset).get("terminationGracePeriodSeconds")
    if isinstance(seconds, int) and not isinstance(seconds, bool) and seconds >= 0:
        return float(seconds)
    return DEFAULT_GRACE_SECONDS


def stopped_main(jobset: Mapping[str, Any], *, conditions: tuple[str, ...] = (), suspended: bool = False) -> PodFailure:
    """The head pod's failure when it is deleted (``conditions``: what the deleter set on it; ``suspended``: its
    Job was suspended, as Kueue's eviction does) and main has no SIGTERM handler: killed by SIGTERM under a shared
    process namespace, by the SIGKILL at the end of the grace period as PID 1."""
    ended = signal.SIGKILL if main_is_pid_1(jobset) else signal.SIGTERM
    return PodFailure(
        ids.HEAD_JOB, signal=ended, container=ids.MAIN_CONTAINER, conditions=conditions, suspended=suspended
    )
