"""What a lost slice is to the evaluator, and what it costs in time: the failure `local run` and `drill` take it
for (``slice_lost``), and how long the Job controller waits before the lost pods' replacements
(``replacement_delay_s``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pwdeploy.identifiers import WORKER_JOB
from pwdeploy.manifests.failure_policy import PodFailure, backoff_limit, spec_of

POD_FAILURE_BACKOFF_S = 10.0  # kubernetes/kubernetes pkg/controller/job DefaultJobPodFailureBackOff
MAX_POD_FAILURE_BACKOFF_S = 600.0  # MaxJobPodFailureBackOff


def slice_lost(jobset: Mapping[str, Any], job_index: int = 0) -> PodFailure:
    """The failure `local run` and `drill` take a lost slice for: a worker pod of the slice gone with its VM
    (DisruptionTarget) once its host has used up its failures, which fails the slice's Job (rule slice_lost where
    the JobSet has it). On a cluster the program often dies first and exits with the retry code, which restarts
    the JobSet alike."""
    limit = backoff_limit(jobset, WORKER_JOB)
    return PodFailure(WORKER_JOB, conditions=("DisruptionTarget",), failed_before=limit, job_index=job_index)


def replacement_delay_s(jobset: Mapping[str, Any], replicated_job: str, hosts: int, failed_before: int = 0) -> float:
    """Seconds the Job controller waits, after the last of them, before it creates the replacements of ``hosts``
    pods of one Job that failed together (a lost slice: every host at once): 10 s x 2^(n-1), at most 10 minutes
    (backoff_utils.go ``getRemainingTimeForFailuresCount``). n counts every pod the Job saw fail since its last
    success, those its podFailurePolicy ignores included (``newBackoffRecord``), plus ``failed_before``; with
    ``backoffLimitPerIndex`` each host waits by its own failures alone (``getRemainingTimePerIndex``), so a slice
    lost whole waits as one host does."""
    per_index = isinstance(spec_of(jobset, replicated_job).get("backoffLimitPerIndex"), int)
    failures = failed_before + (1 if per_index else hosts)
    return float(min(POD_FAILURE_BACKOFF_S * 2.0 ** (failures - 1), MAX_POD_FAILURE_BACKOFF_S))
