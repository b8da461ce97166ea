"""The checks of one Kubernetes object, chosen by its kind: envelope, schema, then API-server/webhook rules."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pwdeploy.names import dns1035_label, dns1123_label, dns1123_subdomain, label_key, label_value
from pwdeploy.validation.jobs import job_spec_problems
from pwdeploy.validation.jobset_rules import jobset_problems
from pwdeploy.validation.pod_rules import pod_spec_problems
from pwdeploy.validation.problems import Problem, child, items, mapping, tagged
from pwdeploy.validation.schemas import jobset_validator, kubernetes_validator, schema_problems

JOBSET_GROUP = "jobset.x-k8s.io/"
# Objects whose names become DNS labels (Services, a JobSet's child Jobs and pods, namespaces).
_NAME_RULES: dict[str, Callable[[str], str | None]] = {
    "JobSet": dns1035_label,
    "Service": dns1035_label,
    "Namespace": dns1123_label,
}
_POD_TEMPLATE_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet")


def label(obj: object, index: int) -> str:
    """``Kind/name`` of ``obj`` for problem lines; the position in the input when it has neither."""
    kind = mapping(obj).get("kind")
    name = mapping(mapping(obj).get("metadata")).get("name")
    if isinstance(kind, str) and isinstance(name, str):
        return f"{kind}/{name}"
    return f"{kind if isinstance(kind, str) else 'object'} #{index + 1}"


def object_problems(obj: object, version: tuple[int, int]) -> list[Problem]:
    """Every problem of ``obj``, each naming the rule (``problems.RULES``) that found it."""
    if not isinstance(obj, Mapping):
        return [Problem("", f"expected a Kubernetes object (a mapping), got {type(obj).__name__}", "api-server")]
    problems = tagged(envelope_problems(obj), "api-server")
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str) or not api_version or not kind:
        return problems
    if kind == "JobSet" and api_version.startswith(JOBSET_GROUP):
        return problems + _jobset_structure_problems(obj, version) + tagged(jobset_problems(obj), "jobset-webhook")
    validator = kubernetes_validator(version, api_version, kind)
    if validator is None:
        where = f"{api_version} at Kubernetes {version[0]}.{version[1]}"
        unknown = f"no schema is known for {kind} in {where}, so it cannot be checked"
        return [*problems, Problem("kind", unknown, "kubernetes-schema")]
    problems += tagged(schema_problems(validator, obj), "kubernetes-schema")
    spec = mapping(obj.get("spec"))
    if kind == "Job" and api_version == "batch/v1":
        problems += tagged(job_spec_problems(spec, "spec", in_jobset=False), "api-server")
    elif kind == "Pod" and api_version == "v1":
        problems += tagged(pod_spec_problems(spec, "spec"), "api-server")
    elif kind in _POD_TEMPLATE_KINDS:
        template = mapping(mapping(spec.get("template")).get("spec"))
        problems += tagged(pod_spec_problems(template, "spec.template.spec"), "api-server")
    return problems


def envelope_problems(obj: Mapping[str, Any]) -> list[Problem]:
    problems = [
        Problem(field, "required field is missing; every Kubernetes object needs apiVersion and kind")
        for field in ("apiVersion", "kind")
        if not obj.get(field)
    ]
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return [*problems, Problem("metadata", "required field is missing (a mapping with at least name)")]
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        problems.append(Problem("metadata.name", "required field is missing"))
    else:
        rule = _NAME_RULES.get(str(obj.get("kind")), dns1123_subdomain)
        if reason := rule(name):
            problems.append(Problem("metadata.name", reason))
    namespace = metadata.get("namespace")
    if isinstance(namespace, str) and (reason := dns1123_label(namespace)):
        problems.append(Problem("metadata.namespace", reason))
    return problems + metadata_problems(metadata, "metadata")


def metadata_problems(metadata: Mapping[str, Any], path: str) -> list[Problem]:
    """Label and annotation keys, and label values."""
    problems: list[Problem] = []
    for section in ("labels", "annotations"):
        for key, value in mapping(metadata.get(section)).items():
            at = child(child(path, section), str(key))
            reason = label_key(str(key))
            if reason is None and section == "labels" and isinstance(value, str):
                reason = label_value(value)
            if reason:
                problems.append(Problem(at, reason))
    return problems


def _jobset_structure_problems(jobset: Mapping[str, Any], version: tuple[int, int]) -> list[Problem]:
    """The envelope against the shipped schema; each replicatedJob template as a batch/v1 Job."""
    problems = tagged(schema_problems(jobset_validator(), jobset), "jobset-schema")
    job_validator = kubernetes_validator(version, "batch/v1", "Job")
    assert job_validator is not None, "kubernetes-validate ships batch/v1 Job for every version"
    for i, rj in items(mapping(jobset.get("spec")).get("replicatedJobs")):
        template = rj.get("template")
        if not isinstance(template, Mapping):
            continue
        prefix = f"spec.replicatedJobs[{i}].template"
        problems += [
            Problem(child(prefix, str(key)), "unknown field", "jobset-schema")
            for key in template
            if key not in ("metadata", "spec")
        ]
        if not isinstance(template.get("spec"), Mapping):
            problems.append(Problem(f"{prefix}.spec", "required field is missing (the Job spec)", "jobset-schema"))
            continue
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": template.get("metadata", {}),
            "spec": template["spec"],
        }
        problems += tagged(schema_problems(job_validator, job, prefix), "kubernetes-schema")
        pod_metadata = mapping(mapping(template["spec"].get("template")).get("metadata"))
        rules = metadata_problems(mapping(template.get("metadata")), f"{prefix}.metadata")
        rules += metadata_problems(pod_metadata, f"{prefix}.spec.template.metadata")
        rules += job_spec_problems(template["spec"], f"{prefix}.spec", in_jobset=True)
        problems += tagged(rules, "api-server")
    return problems
