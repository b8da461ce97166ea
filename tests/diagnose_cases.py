"""Diagnose fixtures (tests/fixtures/diagnose/*.yaml) served by StubKubeApiServer, a loopback stub.

A fixture holds the objects as the API returns them, per role: ``pods.head`` / ``pods.worker`` is the ``status``
(and optional ``spec`` container patches) of every pod of that role, built on the pod template of the rendered
JobSet (so names, labels and specs are what `pwdeploy render` makes); ``events`` are Event objects whose
``involvedObject`` is given as ``for: head|worker|jobset|workload`` (one event per matching object);
``jobset`` is merged into the rendered JobSet (a ``null`` removes a key), ``head_pod_spec`` into its head pod
template (``shareProcessNamespace: null``: a JobSet rendered before pwdeploy rendered it) and ``head_job`` into
each head Job; ``jobs: false`` serves no Jobs and no pods (no JobSet controller
made them); ``absent: [worker]`` serves no pods of that role (their creation was refused);
``absent_hosts`` serves no pods of those hosts of every worker Job (the followers JobSet's webhook refused);
``tpu_type`` is the job's (v5p-8 unless given); ``extra_pods`` are more pods (``for``, ``index``, ``host``,
``suffix``, ``status``: a failed pod beside its replacement); events ``for: worker-job|head-job`` are about the
Jobs; each event's ``involvedObject`` carries its object's uid (the job's events are told apart by uid);
``workload`` and ``provisioningrequests`` are Kueue and autoscaler objects; ``logs`` are container logs. Each
fixture cites the public source of its message texts beside them.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from pwdeploy import identifiers as ids
from tests.kube_objects import rendered_jobset
from tests.kube_stub import StubKubeApiServer

FIXTURES = Path(__file__).parent / "fixtures" / "diagnose"
ROLES = {"head": ids.HEAD_JOB, "worker": ids.WORKER_JOB}
RECENT = "2026-01-01T00:04:30Z"  # an event's time unless the fixture gives one: 30 s before FakeClock's now


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((FIXTURES / f"{name}.yaml").read_text(encoding="utf-8"))
    return data


def names() -> list[str]:
    return sorted(p.stem for p in FIXTURES.glob("*.yaml"))


def serve(
    stub: StubKubeApiServer,
    fixture: dict[str, Any],
    *,
    job: str = "dp-example",
    slices: int = 2,
    tpu_type: str = "v5p-8",
) -> dict[str, list[str]]:
    """Put the fixture's objects in the stub; the pod names per role."""
    stub.provisioning_version = fixture.get("provisioning")
    jobset = rendered_jobset(job, tpu_type=fixture.get("tpu_type", tpu_type), slices=slices)
    _merge(jobset, fixture.get("jobset") or {})
    head = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == ids.HEAD_JOB)
    _merge(head["template"]["spec"]["template"]["spec"], fixture.get("head_pod_spec") or {})
    stub.put("jobsets", jobset)
    pods: dict[str, list[str]] = {"head": [], "worker": []}
    jobs: dict[str, list[str]] = {"head-job": [], "worker-job": []}
    uids = {job: jobset["metadata"]["uid"]}  # name -> uid of every object an event may be about
    for role, rj in ROLES.items():
        spec_rj = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == rj)
        per_role = (fixture.get("pods") or {}).get(role) or {}
        for index in range(int(spec_rj.get("replicas", 1))):
            made = _job(job, rj, index, spec_rj["template"]["spec"])
            jobs[f"{role}-job"].append(made["metadata"]["name"])
            if fixture.get("jobs", True):
                _merge(made, (fixture.get("head_job") or {}) if rj == ids.HEAD_JOB else {})
                uids[made["metadata"]["name"]] = stub.put("jobs", made)["metadata"]["uid"]
            if not fixture.get("jobs", True) or role in (fixture.get("absent") or []):
                continue  # no Job, or its pods were refused: no pods
            for host in range(int(spec_rj["template"]["spec"].get("parallelism", 1))):
                if role == "worker" and host in (fixture.get("absent_hosts") or []):
                    continue
                pod = _pod(job, rj, index, host, spec_rj["template"]["spec"]["template"]["spec"], per_role, made)
                uids[pod["metadata"]["name"]] = stub.put("pods", pod)["metadata"]["uid"]
                pods[role].append(pod["metadata"]["name"])
    for extra in fixture.get("extra_pods") or []:
        rj = ROLES[extra["for"]]
        spec_rj = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == rj)
        template = spec_rj["template"]["spec"]["template"]["spec"]
        owner = stub.get("jobs", "default", f"{job}-{rj}-{extra['index']}")
        pod = _pod(job, rj, extra["index"], extra["host"], template, extra, owner, suffix=extra["suffix"])
        stub.put("pods", pod)
    workload = fixture.get("workload")
    if workload is not None:
        workload = copy.deepcopy(workload)
        workload["metadata"].setdefault("labels", {})["kueue.x-k8s.io/job-uid"] = jobset["metadata"]["uid"]
        uids[workload["metadata"]["name"]] = stub.put("workloads", workload)["metadata"]["uid"]
    for request in fixture.get("provisioningrequests") or []:
        stub.put("provisioningrequests", copy.deepcopy(request))
    targets = {**pods, **jobs, "jobset": [job], "workload": [workload["metadata"]["name"]] if workload else []}
    kinds = {"head": "Pod", "worker": "Pod", "jobset": "JobSet", "workload": "Workload"}
    kinds |= {"head-job": "Job", "worker-job": "Job"}
    for n, event in enumerate(fixture.get("events") or []):
        event = copy.deepcopy(event)
        role = event.pop("for")
        event.setdefault("lastTimestamp", RECENT)
        for m, target in enumerate(targets[role]):
            stub.put(
                "events",
                {
                    **copy.deepcopy(event),
                    "metadata": {"name": f"{target}.{n}.{m}"},
                    "involvedObject": {
                        "kind": kinds[role],
                        "name": target,
                        "namespace": "default",
                        "uid": uids.get(target, f"gone-{target}"),
                    },
                },
            )
    for log in fixture.get("logs") or []:
        store = stub.previous_logs if log.get("previous") else stub.logs
        for pod_name in pods[log["for"]]:
            store[("default", pod_name, str(log["container"]))] = str(log["text"])
    return pods


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _job(job: str, rj: str, index: int, spec: dict[str, Any]) -> dict[str, Any]:
    """A Job as the JobSet controller makes it (its labels; parallelism from the template) and the Job controller
    reports it."""
    labels = {ids.JOBSET_NAME_LABEL: job, ids.REPLICATED_JOB_LABEL: rj, ids.JOB_INDEX_LABEL: str(index)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{job}-{rj}-{index}", "labels": labels},
        "spec": {"parallelism": spec.get("parallelism", 1), "completions": spec.get("completions", 1)},
        "status": {},
    }


def _pod(
    job: str,
    rj: str,
    index: int,
    host: int,
    template: dict[str, Any],
    role: dict[str, Any],
    owner: dict[str, Any] | None = None,
    suffix: str = "x7k2p",
) -> dict[str, Any]:
    spec = copy.deepcopy(template)
    for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
        _merge(container, (role.get("containers") or {}).get(container["name"], {}))
    status = copy.deepcopy(
        role.get("status") or {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    )
    scheduled = not any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" for c in status.get("conditions", [])
    )
    if scheduled:
        spec["nodeName"] = f"gke-node-{rj}-{index}-{host}"
    owners = [{"apiVersion": "batch/v1", "kind": "Job", "controller": True, **_ref(owner)}] if owner else []
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job}-{rj}-{index}-{host}-{suffix}",
            "ownerReferences": owners,
            "labels": {
                ids.JOBSET_NAME_LABEL: job,
                ids.REPLICATED_JOB_LABEL: rj,
                ids.JOB_INDEX_LABEL: str(index),
                ids.COMPLETION_INDEX_LABEL: str(host),
            },
        },
        "spec": spec,
        "status": status,
    }


def _ref(obj: dict[str, Any]) -> dict[str, Any]:
    return {"name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"]}
