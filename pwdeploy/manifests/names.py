"""The exact bound on a JobSet's name, from the longest pod name it will generate.

The JobSet webhook requires child Job names ``<jobset>-<replicatedJob>-<jobIndex>`` and pod names
``<jobset>-<replicatedJob>-<jobIndex>-<podIndex>-xxxxx`` to be DNS-1035 labels (at most 63 characters).
"""

from __future__ import annotations

from pwdeploy.config import JobConfig
from pwdeploy.errors import ConfigError
from pwdeploy.identifiers import HEAD_JOB, WORKER_JOB
from pwdeploy.manifests.common import GENERATED_SUFFIX

DNS_LABEL_MAX = 63


def longest_pod_name_suffixes(job: JobConfig) -> list[str]:
    """What each replicatedJob appends to the JobSet name in its longest pod name (random suffix as x)."""
    rand = "x" * GENERATED_SUFFIX
    return [
        f"-{HEAD_JOB}-0-0-{rand}",
        f"-{WORKER_JOB}-{job.tpu.slices - 1}-{job.tpu.slice.vms - 1}-{rand}",
    ]


def max_name_length(job: JobConfig) -> int:
    return DNS_LABEL_MAX - max(len(s) for s in longest_pod_name_suffixes(job))


def check_name_length(job: JobConfig) -> None:
    bound = max_name_length(job)
    if len(job.name) > bound:
        longest = max(longest_pod_name_suffixes(job), key=len)
        raise ConfigError(
            "name",
            f"{job.name!r} is {len(job.name)} characters; this job's longest pod name is "
            f"'<name>{longest}', which must fit in {DNS_LABEL_MAX}, so the name can be at most {bound} characters",
        )
