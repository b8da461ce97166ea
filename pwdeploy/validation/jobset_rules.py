"""The JobSet admission webhook's rules (kubernetes-sigs/jobset pkg/webhooks, v0.10.1 and later) that a schema
cannot express: generated Job and Pod names, the coordinator label (v0.11.0 and later), references between
fields, indices and failure-policy rule names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pwdeploy.names import (
    MAX_LABEL,
    coordinator_endpoint,
    dns1035_label,
    dns1123_subdomain,
    label_value,
    longest_name_for_coordinator,
)
from pwdeploy.validation.problems import Problem, duplicates, integer, items, mapping

MAX_INT32 = 2**31 - 1
POD_SUFFIX = "-xxxxx"  # the 5 random characters Kubernetes appends to a Job's pod names
_RULE_NAME = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
_FAILURE_REASONS = (
    "BackoffLimitExceeded",
    "DeadlineExceeded",
    "FailedIndexes",
    "MaxFailedIndexesExceeded",
    "PodFailurePolicy",
)
# Pattern text, compiled (and cached by `re`) at its first use: a render whose config does not reach it pays nothing.
_DOMAIN_PATH = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[-A-Za-z0-9_./]+"


def jobset_problems(jobset: Mapping[str, Any]) -> list[Problem]:
    spec = mapping(jobset.get("spec"))
    name = mapping(jobset.get("metadata")).get("name")
    replicated = items(spec.get("replicatedJobs"))
    problems = _replicated_job_problems(name if isinstance(name, str) else None, replicated)
    names = [str(rj.get("name")) for _, rj in replicated]
    problems += _target_problems(spec, names)
    problems += _coordinator_problems(
        mapping(spec.get("coordinator")), dict(zip(names, (rj for _, rj in replicated), strict=True))
    )
    if isinstance(name, str):
        problems += _coordinator_label_problems(name, mapping(spec.get("coordinator")), mapping(spec.get("network")))
    problems += _failure_rule_problems(mapping(spec.get("failurePolicy")))
    problems += _network_problems(mapping(spec.get("network")))
    managed_by = spec.get("managedBy")
    if isinstance(managed_by, str) and (len(managed_by) > MAX_LABEL or not re.fullmatch(_DOMAIN_PATH, managed_by)):
        problems.append(
            Problem(
                "spec.managedBy",
                f"{managed_by!r} must be a domain-prefixed path of at most {MAX_LABEL} characters, "
                "e.g. kueue.x-k8s.io/multikueue",
            )
        )
    if not replicated:
        problems.append(Problem("spec.replicatedJobs", "a JobSet needs at least one replicatedJob"))
    return problems


def _replicated_job_problems(jobset_name: str | None, replicated: list[tuple[int, Mapping[str, Any]]]) -> list[Problem]:
    names = [(f"spec.replicatedJobs[{i}].name", rj.get("name")) for i, rj in replicated]
    problems = duplicates(names, "replicatedJob names must be unique")
    seen: set[object] = set()
    for i, rj in replicated:
        path = f"spec.replicatedJobs[{i}]"
        rj_name = rj.get("name")
        if isinstance(rj_name, str) and (reason := dns1035_label(rj_name)):
            problems.append(Problem(f"{path}.name", reason))
        seen.add(rj_name)
        group = rj.get("groupName")
        if isinstance(group, str) and (reason := dns1035_label(group)):
            problems.append(Problem(f"{path}.groupName", reason))
        replicas = integer(rj.get("replicas", 1))
        if replicas is not None and replicas < 1:
            problems.append(Problem(f"{path}.replicas", f"{replicas} must be at least 1"))
        job_spec = mapping(mapping(rj.get("template")).get("spec"))
        parallelism = integer(job_spec.get("parallelism", 1))
        if replicas and parallelism and replicas * parallelism > MAX_INT32:
            problems.append(Problem(path, f"replicas x parallelism = {replicas * parallelism} exceeds {MAX_INT32}"))
        if jobset_name is not None and isinstance(rj_name, str) and replicas is not None and replicas >= 1:
            problems += _generated_name_problems(jobset_name, rj_name, replicas, job_spec)
        problems += _depends_on_problems(path, rj, seen if i else set())
    return problems


def _generated_name_problems(
    jobset_name: str, rj_name: str, replicas: int, job_spec: Mapping[str, Any]
) -> list[Problem]:
    """The longest child Job name and, for Indexed Jobs, the longest pod name must be DNS-1035 labels."""
    problems: list[Problem] = []
    longest = {"job": f"-{rj_name}-{replicas - 1}"}
    completions = integer(job_spec.get("completions"))
    if job_spec.get("completionMode") == "Indexed" and completions is not None and completions >= 1:
        longest["pod"] = f"-{rj_name}-{replicas - 1}-{completions - 1}{POD_SUFFIX}"
    for what, suffix in longest.items():
        generated = jobset_name + suffix
        if len(generated) > MAX_LABEL:
            bound = MAX_LABEL - len(suffix)
            problems.append(
                Problem(
                    "metadata.name",
                    f"{jobset_name!r} is too long: {what} name {generated!r} has {len(generated)} characters "
                    f"(max {MAX_LABEL}); with replicatedJob {rj_name!r} the JobSet name may have at most {bound}",
                )
            )
    return problems


def _depends_on_problems(path: str, rj: Mapping[str, Any], earlier: set[object]) -> list[Problem]:
    depends = rj.get("dependsOn")
    if depends is None:
        return []
    if not earlier:
        return [Problem(f"{path}.dependsOn", "the first replicatedJob cannot depend on another")]
    return [
        Problem(f"{path}.dependsOn[{k}].name", f"{dep.get('name')!r} is not an earlier replicatedJob")
        for k, dep in items(depends)
        if dep.get("name") not in earlier or dep.get("name") == rj.get("name")
    ]


def _target_problems(spec: Mapping[str, Any], names: list[str]) -> list[Problem]:
    problems = _unknown_targets(mapping(spec.get("successPolicy")), "spec.successPolicy", names)
    for r, rule in items(mapping(spec.get("failurePolicy")).get("rules")):
        problems += _unknown_targets(rule, f"spec.failurePolicy.rules[{r}]", names)
    if mapping(spec.get("startupPolicy")).get("startupPolicyOrder") == "InOrder" and any(
        "dependsOn" in rj for _, rj in items(spec.get("replicatedJobs"))
    ):
        problems.append(
            Problem(
                "spec.startupPolicy",
                "startupPolicyOrder InOrder and replicatedJobs[].dependsOn cannot be used together",
            )
        )
    return problems


def _unknown_targets(policy: Mapping[str, Any], path: str, names: list[str]) -> list[Problem]:
    """``targetReplicatedJobs`` entries of a success policy or failure rule that name no replicatedJob."""
    targets = policy.get("targetReplicatedJobs")
    return [
        Problem(f"{path}.targetReplicatedJobs[{k}]", f"{target!r} is not a replicatedJob; valid: {', '.join(names)}")
        for k, target in enumerate(targets if isinstance(targets, list) else [])
        if target not in names
    ]


def _coordinator_problems(coordinator: Mapping[str, Any], by_name: dict[str, Mapping[str, Any]]) -> list[Problem]:
    target = coordinator.get("replicatedJob")
    if not coordinator or not isinstance(target, str):
        return []
    rj = by_name.get(target)
    if rj is None:
        return [
            Problem("spec.coordinator.replicatedJob", f"{target!r} is not a replicatedJob; valid: {', '.join(by_name)}")
        ]
    job_spec = mapping(mapping(rj.get("template")).get("spec"))
    replicas = integer(rj.get("replicas", 1)) or 1
    job_index = integer(coordinator.get("jobIndex", 0))
    pod_index = integer(coordinator.get("podIndex", 0))
    completions = integer(job_spec.get("completions"))
    if job_index is not None and not 0 <= job_index < replicas:
        return [
            Problem("spec.coordinator.jobIndex", f"{job_index} is out of range for {target!r} ({replicas} replicas)")
        ]
    if job_spec.get("completionMode") != "Indexed":
        return [Problem("spec.coordinator.replicatedJob", f"the Job of {target!r} must use completionMode Indexed")]
    if pod_index is not None and completions is not None and not 0 <= pod_index < completions:
        return [
            Problem(
                "spec.coordinator.podIndex", f"{pod_index} is out of range for {target!r} ({completions} completions)"
            )
        ]
    return []


def _coordinator_label_problems(
    jobset_name: str, coordinator: Mapping[str, Any], network: Mapping[str, Any]
) -> list[Problem]:
    """The coordinator's address becomes the label jobset.sigs.k8s.io/coordinator on every child Job and pod
    (``labelAndAnnotateObject``); JobSet >= v0.11.0 rejects a JobSet whose value is no label value
    (``validateCoordinatorLabelValue``, PR #1079), v0.10.1 admits it and then fails creating the Jobs. The other
    values that controller derives (JobSet and replicatedJob names, a 40-character hash, indices) fit whenever the
    generated Job names do."""
    target = coordinator.get("replicatedJob")
    job_index, pod_index = integer(coordinator.get("jobIndex", 0)), integer(coordinator.get("podIndex", 0))
    if not isinstance(target, str) or job_index is None or pod_index is None:
        return []
    own = network.get("subdomain")
    subdomain = own if isinstance(own, str) and own else None  # GetSubdomain: unset or empty is the JobSet's name
    value = coordinator_endpoint(jobset_name, target, job_index, pod_index, subdomain or jobset_name)
    if label_value(value) is None:
        return []
    if subdomain is not None:
        longest = MAX_LABEL - len(coordinator_endpoint("", target, job_index, pod_index, subdomain))
        fits = f"with spec.network.subdomain {subdomain!r} the JobSet name may have at most {longest}"
    else:
        longest = longest_name_for_coordinator(target, job_index, pod_index)
        fits = f"the subdomain defaults to the JobSet name, so that name may have at most {longest}"
    return [
        Problem(
            "metadata.name",
            f"{jobset_name!r} is too long: the coordinator label {value!r} has {len(value)} characters "
            f"(max {MAX_LABEL}); {fits}",
        )
    ]


def _failure_rule_problems(policy: Mapping[str, Any]) -> list[Problem]:
    rules = items(policy.get("rules"))
    problems = duplicates(
        [(f"spec.failurePolicy.rules[{r}].name", rule.get("name")) for r, rule in rules], "rule names must be unique"
    )
    for r, rule in rules:
        path = f"spec.failurePolicy.rules[{r}]"
        name = rule.get("name")
        if isinstance(name, str) and (not 1 <= len(name) <= 128 or not _RULE_NAME.fullmatch(name)):
            problems.append(
                Problem(
                    f"{path}.name",
                    f"{name!r} is not a rule name: 1-128 letters, digits and '_,:' (no '-'), "
                    "starting with a letter and ending with a letter, digit or '_'",
                )
            )
        reasons = rule.get("onJobFailureReasons")
        for k, reason in enumerate(reasons if isinstance(reasons, list) else []):
            if reason not in _FAILURE_REASONS:
                problems.append(
                    Problem(
                        f"{path}.onJobFailureReasons[{k}]", f"{reason!r} is not one of {', '.join(_FAILURE_REASONS)}"
                    )
                )
    max_restarts = integer(policy.get("maxRestarts"))
    if max_restarts is not None and max_restarts < 0:
        problems.append(Problem("spec.failurePolicy.maxRestarts", f"{max_restarts} must not be negative"))
    return problems


def _network_problems(network: Mapping[str, Any]) -> list[Problem]:
    subdomain = network.get("subdomain")
    if not isinstance(subdomain, str) or not subdomain:
        return []
    reason = dns1123_subdomain(subdomain) or dns1035_label(subdomain)
    return [Problem("spec.network.subdomain", reason)] if reason else []
