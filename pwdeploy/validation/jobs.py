"""batch/v1 Job rules of the Kubernetes API server that its OpenAPI schema does not carry, plus the JobSet
convention that every pod of an Indexed child Job runs at once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pwdeploy.validation.pod_rules import containers_of, pod_spec_problems
from pwdeploy.validation.problems import Problem, integer, items, mapping

MAX_INDEXED_COMPLETIONS = 100_000


def _indexed_problems(path: str, completions: int | None, parallelism: int | None, *, in_jobset: bool) -> list[Problem]:
    """An Indexed Job's completions (required, bounded), and in a JobSet every pod running at once."""
    problems = []
    if completions is None:
        problems.append(Problem(f"{path}.completions", "required when completionMode is Indexed"))
    elif completions > MAX_INDEXED_COMPLETIONS:
        problems.append(
            Problem(f"{path}.completions", f"{completions} exceeds {MAX_INDEXED_COMPLETIONS} for an Indexed Job")
        )
    if in_jobset and completions is not None and completions != (1 if parallelism is None else parallelism):
        problems.append(
            Problem(
                f"{path}.parallelism",
                f"{parallelism} must equal completions ({completions}): every pod of an Indexed Job in a JobSet "
                "runs at once",
            )
        )
    return problems


def job_spec_problems(spec: Mapping[str, Any], path: str, *, in_jobset: bool) -> list[Problem]:
    """``in_jobset``: the JobSet webhook defaults completionMode to Indexed and restartPolicy to OnFailure."""
    problems: list[Problem] = []
    mode = spec.get("completionMode", "Indexed" if in_jobset else "NonIndexed")
    completions, parallelism = integer(spec.get("completions")), integer(spec.get("parallelism"))
    for field, value in (
        ("completions", completions),
        ("parallelism", parallelism),
        ("backoffLimit", integer(spec.get("backoffLimit"))),
    ):
        if value is not None and value < 0:
            problems.append(Problem(f"{path}.{field}", f"{value} must not be negative"))
    if mode == "Indexed":
        problems += _indexed_problems(path, completions, parallelism, in_jobset=in_jobset)
    elif spec.get("backoffLimitPerIndex") is not None:
        problems.append(Problem(f"{path}.backoffLimitPerIndex", "requires completionMode Indexed"))
    pod_path = f"{path}.template.spec"
    pod = mapping(mapping(spec.get("template")).get("spec"))
    restart = pod.get("restartPolicy", "OnFailure" if in_jobset else None)
    if restart not in ("OnFailure", "Never"):
        problems.append(
            Problem(f"{pod_path}.restartPolicy", f"{restart!r} is not valid for a Job; use OnFailure or Never")
        )
    policy = spec.get("podFailurePolicy")
    if policy is not None:
        if restart != "Never":
            problems.append(Problem(f"{path}.podFailurePolicy", "requires the pod's restartPolicy to be Never"))
        problems += _pod_failure_policy_problems(mapping(policy), f"{path}.podFailurePolicy", pod, pod_path)
    return problems + pod_spec_problems(pod, pod_path)


def _pod_failure_policy_problems(
    policy: Mapping[str, Any], path: str, pod: Mapping[str, Any], pod_path: str
) -> list[Problem]:
    problems: list[Problem] = []
    names = list(dict.fromkeys(str(container.get("name")) for _, container in containers_of(pod, pod_path)))
    for r, rule in items(policy.get("rules")):
        exit_codes = mapping(rule.get("onExitCodes"))
        if not exit_codes:
            continue
        at = f"{path}.rules[{r}].onExitCodes"
        container = exit_codes.get("containerName")
        if container is not None and container not in names:
            problems.append(
                Problem(
                    f"{at}.containerName", f"{container!r} is not a container of the pod; valid: {', '.join(names)}"
                )
            )
        values = exit_codes.get("values")
        codes = [v for v in values if integer(v) is not None] if isinstance(values, list) else []
        if exit_codes.get("operator") == "In" and 0 in codes:
            problems.append(Problem(f"{at}.values", "0 cannot be listed with operator In"))
        if codes != sorted(set(codes)):
            problems.append(Problem(f"{at}.values", "must be in ascending order without repeats"))
    return problems
