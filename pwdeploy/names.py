"""The Kubernetes name rules (k8s.io/apimachinery/pkg/util/validation) used by the API server and the JobSet webhook."""

from __future__ import annotations

import re

MAX_LABEL = 63
MAX_SUBDOMAIN = 253

_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_ENV_VAR_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")
_PORT_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def dns1035_label(value: str) -> str | None:
    """Why ``value`` is not a DNS-1035 label (Service, JobSet and generated Job/Pod names), or None."""
    if len(value) > MAX_LABEL:
        return f"{short(value)} is {len(value)} characters; a DNS-1035 label has at most {MAX_LABEL}"
    if not _DNS1035.fullmatch(value):
        return (
            f"{value!r} is not a DNS-1035 label: use lower-case letters, digits and '-', "
            "starting with a letter and ending with a letter or digit"
        )
    return None


def dns1123_label(value: str) -> str | None:
    """Why ``value`` is not a DNS-1123 label (container, volume, namespace names), or None."""
    if len(value) > MAX_LABEL:
        return f"{short(value)} is {len(value)} characters; a DNS-1123 label has at most {MAX_LABEL}"
    if not _DNS1123_LABEL.fullmatch(value):
        return (
            f"{value!r} is not a DNS-1123 label: use lower-case letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return None


def dns1123_subdomain(value: str) -> str | None:
    """Why ``value`` is not a DNS-1123 subdomain (most object names), or None."""
    if len(value) > MAX_SUBDOMAIN:
        return f"{short(value)} is {len(value)} characters; a DNS-1123 subdomain has at most {MAX_SUBDOMAIN}"
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        return (
            f"{value!r} is not a DNS-1123 subdomain: use lower-case letters, digits, '-' and '.', "
            "starting and ending with a letter or digit"
        )
    return None


def label_key(value: str) -> str | None:
    """Why ``value`` is not a label or annotation key (``[prefix/]name``), or None."""
    prefix, _, name = value.rpartition("/")
    if prefix and (reason := dns1123_subdomain(prefix)):
        return f"key {value!r}: prefix {reason}"
    if len(name) > MAX_LABEL or not _QUALIFIED_NAME.fullmatch(name):
        return (
            f"key {value!r}: the name part must be at most {MAX_LABEL} characters of letters, digits, "
            "'-', '_' and '.', starting and ending with a letter or digit"
        )
    return None


def label_value(value: str) -> str | None:
    if len(value) > MAX_LABEL or not _LABEL_VALUE.fullmatch(value):
        return (
            f"{short(value)} is not a label value: at most {MAX_LABEL} characters of letters, digits, "
            "'-', '_' and '.', starting and ending with a letter or digit"
        )
    return None


def env_var_name(value: str) -> str | None:
    if not _ENV_VAR_NAME.fullmatch(value):
        return (
            f"{value!r} is not a valid environment variable name: use letters, digits, '_', '-' and '.', "
            "not starting with a digit"
        )
    return None


def port_name(value: str) -> str | None:
    """Why ``value`` is not an IANA service name (named container ports), or None."""
    if len(value) > 15 or not _PORT_NAME.fullmatch(value) or "--" in value or not re.search("[a-z]", value):
        return (
            f"{value!r} is not a port name: at most 15 lower-case letters, digits and single '-', "
            "with at least one letter"
        )
    return None


GENERATED_SUFFIX = 5  # the random suffix Kubernetes appends to pod names


def longest_pod_name_suffix(head_job: str, worker_job: str, slices: int, vms: int) -> str:
    """What the longest pod name of a Pathways JobSet appends to its name (random suffix as x).

    The JobSet webhook requires child Job names ``<jobset>-<replicatedJob>-<jobIndex>`` and pod names
    ``<jobset>-<replicatedJob>-<jobIndex>-<podIndex>-xxxxx`` to be DNS-1035 labels.
    """
    rand = "x" * GENERATED_SUFFIX
    return max(f"-{head_job}-0-0-{rand}", f"-{worker_job}-{slices - 1}-{vms - 1}-{rand}", key=len)


def coordinator_endpoint(jobset: str, replicated_job: str, job_index: int, pod_index: int, subdomain: str) -> str:
    """The coordinator's address, which the JobSet controller also writes as the label
    ``jobset.sigs.k8s.io/coordinator`` on every child Job and pod (``CoordinatorEndpoint`` in
    pkg/controllers/jobset_controller.go, read at v0.11.0 and 08dfbdfd). A label value holds at most 63 characters;
    JobSet >= v0.11.0 rejects a longer one at admission (``validateCoordinatorLabelValue``, PR #1079)."""
    return f"{jobset}-{replicated_job}-{job_index}-{pod_index}.{subdomain}"


def longest_name_for_coordinator(replicated_job: str, job_index: int = 0, pod_index: int = 0) -> int:
    """The longest JobSet name whose coordinator label fits when the subdomain is the JobSet's name, the default
    (``GetSubdomain``): the name appears twice, so (63 - the rest) // 2; 22 for the coordinator pathways-head 0/0."""
    rest = len(coordinator_endpoint("", replicated_job, job_index, pod_index, ""))
    return (MAX_LABEL - rest) // 2


def jobset_name_bound(head_job: str, worker_job: str, slices: int, vms: int, coordinator_label: str) -> tuple[int, str]:
    """The longest name a Pathways JobSet (coordinator: the head's pod 0 of Job 0, subdomain: the JobSet's name)
    may have, and why: the tighter of its longest pod name and its coordinator label (``coordinator_label``: the
    label's key)."""
    suffix = longest_pod_name_suffix(head_job, worker_job, slices, vms)
    pod_bound = MAX_LABEL - len(suffix)
    coordinator_bound = longest_name_for_coordinator(head_job)
    if pod_bound < coordinator_bound:
        return pod_bound, f"this job's longest pod name is '<name>{suffix}', which must fit in {MAX_LABEL}"
    label = coordinator_endpoint("<name>", head_job, 0, 0, "<name>")
    return coordinator_bound, (
        f"the JobSet controller labels every pod {coordinator_label}={label} (the coordinator's address, "
        f"its subdomain the name), a label value of at most {MAX_LABEL} characters (JobSet >= v0.11 rejects the "
        "JobSet at submit, older versions fail creating its Jobs)"
    )


def short(value: object, limit: int = 60) -> str:
    """``value``'s repr, cut to ``limit`` characters for a message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
