"""Manifest validation: a valid Pathways-like JobSet passes; each broken variant gives its one problem line;
the shipped JobSet schema agrees with the real CRDs; `pwdeploy validate` exit codes and messages."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from pwdeploy import identifiers as ids
from pwdeploy.cli import cli
from pwdeploy.errors import ConfigError
from pwdeploy.finding import Finding
from pwdeploy.validation.problems import RULES
from pwdeploy.validation.validate import validate_files, validate_objects
from tests.crd import CRD_VERSIONS, validate_against_crd


def said(findings: list[Finding]) -> list[str]:
    """Each finding as ``where: message`` (the old problem line), after checking the shape every one has."""
    for f in findings:
        assert (f.severity, f.source, f.fix) == ("error", RULES[f.id], ""), f
    return [f"{f.where}: {f.message}" for f in findings]


PATHWAYS_JOBSET = """
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: demo
  namespace: default
  labels: {<QUEUE_LABEL>: tpu-queue}
spec:
  coordinator: {replicatedJob: <HEAD_JOB>}
  network: {enableDNSHostnames: true, publishNotReadyAddresses: true}
  startupPolicy: {startupPolicyOrder: InOrder}
  successPolicy: {operator: All, targetReplicatedJobs: [<HEAD_JOB>]}
  failurePolicy:
    restartStrategy: Recreate
    maxRestarts: 2
    rules:
    - {name: user_program_failed, action: FailJobSet, onJobFailureReasons: [PodFailurePolicy],
       targetReplicatedJobs: [<HEAD_JOB>]}
  replicatedJobs:
  - name: <HEAD_JOB>
    replicas: 1
    template:
      metadata:
        annotations: {<EXCLUSIVE_TOPOLOGY_ANNOTATION>: kubernetes.io/hostname}
      spec:
        backoffLimit: 0
        completionMode: Indexed
        completions: 1
        parallelism: 1
        podFailurePolicy:
          rules:
          - action: FailJob
            onExitCodes: {containerName: <MAIN_CONTAINER>, operator: NotIn, values: [0]}
        template:
          spec:
            hostNetwork: true
            dnsPolicy: ClusterFirstWithHostNet
            restartPolicy: Never
            nodeSelector: {cloud.google.com/gke-nodepool: cpu-np}
            initContainers:
            - name: <PROXY_CONTAINER>
              image: us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:jax-0.10.2
              restartPolicy: Always
              args: [--server_port=<PROXY_PORT>, "--resource_manager_address=$(PATHWAYS_HEAD):<RM_PORT>"]
              env:
              - name: PATHWAYS_HEAD
                valueFrom:
                  fieldRef: {fieldPath: "metadata.labels['<COORDINATOR_LABEL>']"}
              ports: [{containerPort: <PROXY_PORT>}]
              resources: {limits: {cpu: "16", memory: 100Gi}}
            - name: <RM_CONTAINER>
              image: us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:jax-0.10.2
              restartPolicy: Always
              args: [--server_port=<RM_PORT>, --node_type=resource_manager]
              env: [{name: TPU_SKIP_MDS_QUERY, value: "true"}]
              ports: [{containerPort: <RM_PORT>}, {containerPort: 29002}]
              resources: {limits: {cpu: "8", memory: 32Gi}}
            containers:
            - name: <MAIN_CONTAINER>
              image: us-docker.pkg.dev/p/r/train:1
              command: [python3, train.py]
              env:
              - {name: JAX_PLATFORMS, value: proxy}
              - {name: JAX_BACKEND_TARGET, value: "grpc://localhost:<PROXY_PORT>"}
              resources: {requests: {cpu: "4", memory: 16Gi}, limits: {cpu: "8", memory: 32Gi}}
              volumeMounts: [{name: dshm, mountPath: /dev/shm}]
              securityContext: {allowPrivilegeEscalation: false, privileged: false}
            volumes:
            - {name: dshm, emptyDir: {medium: Memory, sizeLimit: 8Gi}}
  - name: <WORKER_JOB>
    replicas: 2
    template:
      metadata:
        annotations: {<EXCLUSIVE_TOPOLOGY_ANNOTATION>: cloud.google.com/gke-nodepool}
      spec:
        backoffLimit: 8
        completionMode: Indexed
        completions: 2
        parallelism: 2
        template:
          spec:
            hostNetwork: true
            dnsPolicy: ClusterFirstWithHostNet
            restartPolicy: OnFailure
            nodeSelector:
              cloud.google.com/gke-tpu-accelerator: tpu-v5p-slice
              cloud.google.com/gke-tpu-topology: 2x2x2
            tolerations: [{key: google.com/tpu, operator: Exists, effect: NoSchedule}]
            containers:
            - name: <WORKER_CONTAINER>
              image: us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:jax-0.10.2
              args: [--server_port=<WORKER_PORT>]
              ports: [{containerPort: <WORKER_PORT>}, {containerPort: 8471}]
              resources: {limits: {google.com/tpu: 4}}
"""

HEAD = "spec.replicatedJobs[0].template.spec.template.spec"
WORKER = "spec.replicatedJobs[1].template.spec.template.spec"
MAIN = f"{HEAD}.containers[0]"
PROXY = f"{HEAD}.initContainers[0]"


def jobset() -> dict[str, Any]:
    text = re.sub(r"<([A-Z_]+)>", lambda m: str(getattr(ids, m[1])), PATHWAYS_JOBSET)
    obj: dict[str, Any] = yaml.safe_load(text)
    return obj


def pod(obj: dict[str, Any], index: int) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["replicatedJobs"][index]["template"]["spec"]["template"]["spec"]
    return spec


def head(obj: dict[str, Any]) -> dict[str, Any]:
    return pod(obj, 0)


def main(obj: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = head(obj)["containers"][0]
    return container


def worker_job(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["replicatedJobs"][1]["template"]["spec"]
    return spec


def test_pathways_jobset_is_valid() -> None:
    assert validate_objects([jobset()]) == []


def test_other_kinds_and_several_objects() -> None:
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "1"}}
    assert validate_objects([config_map, jobset()]) == []
    bad_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i:1", "restartPolicy": "Always", "imagePull": "x"}]},
    }
    assert said(validate_objects([bad_pod])) == [
        "Pod/p: spec.containers[0].imagePull: unknown field; did you mean 'imagePullPolicy'?",
        "Pod/p: spec.containers[0].restartPolicy: only initContainers may set restartPolicy (Always makes a native "
        "sidecar); remove it here",
    ]


Mutation = Callable[[dict[str, Any]], object]

# (id, mutation, expected problem lines without the "JobSet/<name>: " prefix, CRD versions that also catch it)
BROKEN: list[tuple[str, Mutation, list[str], tuple[str, ...]]] = [
    (
        "wrong type",
        lambda o: o["spec"]["replicatedJobs"][1].update(replicas="two"),
        ["spec.replicatedJobs[1].replicas: 'two' is not an integer"],
        CRD_VERSIONS,
    ),
    (
        "wrong type in a pod",
        lambda o: head(o)["initContainers"][0]["ports"][0].update(containerPort=str(ids.PROXY_PORT)),
        [f"{PROXY}.ports[0].containerPort: '{ids.PROXY_PORT}' is not an integer"],
        CRD_VERSIONS,
    ),
    (
        "unknown JobSet field",
        lambda o: o["spec"].update(sucessPolicy=o["spec"].pop("successPolicy")),
        ["spec.sucessPolicy: unknown field; did you mean 'successPolicy'?"],
        CRD_VERSIONS,
    ),
    (
        "unknown container field",
        lambda o: main(o).update(imagePullPolicyy="IfNotPresent"),
        [f"{MAIN}.imagePullPolicyy: unknown field; did you mean 'imagePullPolicy'?"],
        CRD_VERSIONS,
    ),
    (
        "unknown Job field",
        lambda o: worker_job(o).update(backofLimit=3),
        ["spec.replicatedJobs[1].template.spec.backofLimit: unknown field; did you mean 'backoffLimit'?"],
        CRD_VERSIONS,
    ),
    (
        "unknown template field",
        lambda o: o["spec"]["replicatedJobs"][1]["template"].update(status={}),
        ["spec.replicatedJobs[1].template.status: unknown field"],
        CRD_VERSIONS,
    ),
    (
        "bad enum",
        lambda o: o["spec"]["startupPolicy"].update(startupPolicyOrder="Sequential"),
        ["spec.startupPolicy.startupPolicyOrder: 'Sequential' is not one of AnyOrder, InOrder"],
        CRD_VERSIONS,
    ),
    (
        "enum value newer than JobSet v0.10.1",
        lambda o: o["spec"]["failurePolicy"].update(restartStrategy="InPlaceRestart"),
        ["spec.failurePolicy.restartStrategy: 'InPlaceRestart' is not one of Recreate, BlockingRecreate"],
        ("0.10.1",),
    ),
    (
        "maxRestarts above int32",
        lambda o: o["spec"]["failurePolicy"].update(maxRestarts=2**31),
        ["spec.failurePolicy.maxRestarts: 2147483648 is above the maximum 2147483647"],
        (),
    ),
    (
        "wrong apiVersion",
        lambda o: o.update(apiVersion="jobset.x-k8s.io/v1"),
        ["apiVersion: 'jobset.x-k8s.io/v1' must be 'jobset.x-k8s.io/v1alpha2'"],
        CRD_VERSIONS,
    ),
    (
        "missing replicatedJob name",
        lambda o: o["spec"]["replicatedJobs"][1].pop("name"),
        ["spec.replicatedJobs[1].name: required field is missing"],
        CRD_VERSIONS,
    ),
    (
        "too-long name",
        lambda o: o["metadata"].update(name="a" * 40),
        [
            f"metadata.name: '{'a' * 40}' is too long: pod name '{'a' * 40}-{ids.HEAD_JOB}-0-0-xxxxx' has 64 "
            f"characters (max 63); with replicatedJob '{ids.HEAD_JOB}' the JobSet name may have at most 39",
            f"metadata.name: '{'a' * 40}' is too long: the coordinator label '{'a' * 40}-{ids.HEAD_JOB}-0-0."
            f"{'a' * 40}' has 99 characters (max 63); the subdomain defaults to the JobSet name, so that name may "
            "have at most 22",
        ],
        (),
    ),
    (
        "name not DNS-1035",
        lambda o: o["metadata"].update(name="Demo"),
        [
            "metadata.name: 'Demo' is not a DNS-1035 label: use lower-case letters, digits and '-', starting with a "
            "letter and ending with a letter or digit"
        ],
        (),
    ),
    (
        "duplicate container name",
        lambda o: head(o)["containers"].append(dict(main(o), volumeMounts=[])),
        [
            f"{HEAD}.containers[1].name: '{ids.MAIN_CONTAINER}' is already used by {MAIN}.name; container names "
            "must be unique across containers and initContainers"
        ],
        CRD_VERSIONS,
    ),
    (
        "container name shared with an initContainer",
        lambda o: main(o).update(name=ids.RM_CONTAINER),
        [
            "spec.replicatedJobs[0].template.spec.podFailurePolicy.rules[0].onExitCodes.containerName: "
            f"'{ids.MAIN_CONTAINER}' is not a container of the pod; valid: {ids.PROXY_CONTAINER}, {ids.RM_CONTAINER}",
            f"{MAIN}.name: '{ids.RM_CONTAINER}' is already used by {HEAD}.initContainers[1].name; container names "
            "must be unique across containers and initContainers",
        ],
        (),
    ),
    (
        "restartPolicy on a plain container",
        lambda o: main(o).update(restartPolicy="Always"),
        [
            f"{MAIN}.restartPolicy: only initContainers may set restartPolicy (Always makes a native sidecar); "
            "remove it here"
        ],
        (),
    ),
    (
        "initContainer restartPolicy other than Always",
        lambda o: head(o)["initContainers"][0].update(restartPolicy="OnFailure"),
        [f"{PROXY}.restartPolicy: 'OnFailure' is not allowed; the only value is Always"],
        (),
    ),
    (
        "shm sizeLimit above the memory limit",
        lambda o: head(o)["volumes"][0]["emptyDir"].update(sizeLimit="64Gi"),
        [
            f"{HEAD}.volumes[0].emptyDir.sizeLimit: 64Gi exceeds the memory limit 32Gi of {MAIN} that mounts it "
            f"({MAIN}.volumeMounts[0]); lower sizeLimit or raise the memory limit"
        ],
        (),
    ),
    (
        "memory-backed volumes of one container together above its memory limit",
        lambda o: (
            head(o)["volumes"].append({"name": "transfer", "emptyDir": {"medium": "Memory", "sizeLimit": "30Gi"}}),
            main(o).setdefault("volumeMounts", []).append({"name": "transfer", "mountPath": "/tmp/transfer"}),
        ),
        [
            f"{MAIN}.resources.limits.memory: 32Gi is less than the memory-backed volumes this container mounts: "
            "dshm (8Gi) + transfer (30Gi); lower their sizeLimit or raise the memory limit"
        ],
        (),
    ),
    (
        "bad quantity",
        lambda o: main(o)["resources"]["limits"].update(cpu="eight"),
        [f"{MAIN}.resources.limits.cpu: 'eight' is not a quantity; use e.g. 8, 500m, 16Gi"],
        CRD_VERSIONS,
    ),
    (
        "request above limit",
        lambda o: main(o)["resources"]["requests"].update(memory="64Gi"),
        [f"{MAIN}.resources.requests.memory: request 64Gi exceeds the limit 32Gi"],
        (),
    ),
    (
        "fractional TPU",
        lambda o: pod(o, 1)["containers"][0]["resources"]["limits"].update({"google.com/tpu": "500m"}),
        [f"{WORKER}.containers[0].resources.limits[google.com/tpu]: '500m' must be a whole number for google.com/tpu"],
        (),
    ),
    (
        "coordinator naming a missing replicatedJob",
        lambda o: o["spec"]["coordinator"].update(replicatedJob="head"),
        [f"spec.coordinator.replicatedJob: 'head' is not a replicatedJob; valid: {ids.HEAD_JOB}, {ids.WORKER_JOB}"],
        (),
    ),
    (
        "coordinator pod index out of range",
        lambda o: o["spec"]["coordinator"].update(podIndex=1),
        [f"spec.coordinator.podIndex: 1 is out of range for '{ids.HEAD_JOB}' (1 completions)"],
        (),
    ),
    (
        "successPolicy naming a missing replicatedJob",
        lambda o: o["spec"]["successPolicy"].update(targetReplicatedJobs=["main"]),
        [
            "spec.successPolicy.targetReplicatedJobs[0]: 'main' is not a replicatedJob; "
            f"valid: {ids.HEAD_JOB}, {ids.WORKER_JOB}"
        ],
        (),
    ),
    (
        "failure rule naming a missing replicatedJob",
        lambda o: o["spec"]["failurePolicy"]["rules"][0].update(targetReplicatedJobs=[ids.HEAD_JOB, "workers"]),
        [
            "spec.failurePolicy.rules[0].targetReplicatedJobs[1]: 'workers' is not a replicatedJob; "
            f"valid: {ids.HEAD_JOB}, {ids.WORKER_JOB}"
        ],
        (),
    ),
    (
        "image pull policy the API server does not know",
        lambda o: main(o).update(imagePullPolicy="Sometimes"),
        [f"{MAIN}.imagePullPolicy: 'Sometimes' is not one of Always, IfNotPresent, Never"],
        (),
    ),
    (
        "duplicate replicatedJob name",
        lambda o: o["spec"]["replicatedJobs"][1].update(name=ids.HEAD_JOB),
        [
            f"spec.replicatedJobs[1].name: '{ids.HEAD_JOB}' is already used by spec.replicatedJobs[0].name; "
            "replicatedJob names must be unique"
        ],
        CRD_VERSIONS,
    ),
    (
        "zero replicas",
        lambda o: o["spec"]["replicatedJobs"][1].update(replicas=0),
        ["spec.replicatedJobs[1].replicas: 0 must be at least 1"],
        (),
    ),
    (
        "completions differ from parallelism",
        lambda o: worker_job(o).update(parallelism=1),
        [
            "spec.replicatedJobs[1].template.spec.parallelism: 1 must equal completions (2): every pod of an Indexed "
            "Job in a JobSet runs at once"
        ],
        (),
    ),
    (
        "failure rule name with a hyphen",
        lambda o: o["spec"]["failurePolicy"]["rules"][0].update(name="user-program-failed"),
        [
            "spec.failurePolicy.rules[0].name: 'user-program-failed' is not a rule name: 1-128 letters, digits and "
            "'_,:' (no '-'), starting with a letter and ending with a letter, digit or '_'"
        ],
        (),
    ),
    (
        "unknown job failure reason",
        lambda o: o["spec"]["failurePolicy"]["rules"][0].update(onJobFailureReasons=["OOMKilled"]),
        [
            "spec.failurePolicy.rules[0].onJobFailureReasons[0]: 'OOMKilled' is not one of BackoffLimitExceeded, "
            "DeadlineExceeded, FailedIndexes, MaxFailedIndexesExceeded, PodFailurePolicy"
        ],
        (),
    ),
    (
        "dependsOn on the first replicatedJob",
        lambda o: o["spec"]["replicatedJobs"][0].update(dependsOn=[{"name": ids.WORKER_JOB, "status": "Ready"}]),
        [
            "spec.replicatedJobs[0].dependsOn: the first replicatedJob cannot depend on another",
            "spec.startupPolicy: startupPolicyOrder InOrder and replicatedJobs[].dependsOn cannot be used together",
        ],
        (),
    ),
    (
        "bad env var name",
        lambda o: main(o)["env"].append({"name": "1BAD", "value": "x"}),
        [
            f"{MAIN}.env[2].name: '1BAD' is not a valid environment variable name: use letters, digits, '_', '-' "
            "and '.', not starting with a digit"
        ],
        (),
    ),
    (
        "duplicate env var",
        lambda o: main(o)["env"].append({"name": "JAX_PLATFORMS", "value": "cpu"}),
        [f"{MAIN}.env[2].name: 'JAX_PLATFORMS' is already used by {MAIN}.env[0].name; env names must be unique"],
        CRD_VERSIONS,
    ),
    (
        "unsupported fieldRef",
        lambda o: head(o)["initContainers"][0]["env"][0]["valueFrom"]["fieldRef"].update(fieldPath="metadata.lbls"),
        [
            f"{PROXY}.env[0].valueFrom.fieldRef.fieldPath: 'metadata.lbls' is not supported; valid: metadata.name, "
            "metadata.namespace, metadata.uid, spec.nodeName, spec.serviceAccountName, status.hostIP, "
            "status.hostIPs, status.podIP, status.podIPs, metadata.labels['KEY'], metadata.annotations['KEY']"
        ],
        (),
    ),
    (
        "mount of a missing volume",
        lambda o: main(o)["volumeMounts"][0].update(name="shm"),
        [f"{MAIN}.volumeMounts[0].name: 'shm' is not a volume of this pod; valid: dshm"],
        (),
    ),
    (
        "port out of range",
        lambda o: pod(o, 1)["containers"][0]["ports"][1].update(containerPort=84710),
        [f"{WORKER}.containers[0].ports[1].containerPort: 84710 is not a port number: use 1..65535"],
        (),
    ),
    (
        "port clash on the host network",
        lambda o: main(o).update(ports=[{"containerPort": ids.PROXY_PORT}]),
        [f"{MAIN}.ports[0].containerPort: host port {ids.PROXY_PORT}/TCP is also used by {PROXY}"],
        (),
    ),
    (
        "pod restartPolicy Always in a Job",
        lambda o: pod(o, 1).update(restartPolicy="Always"),
        [f"{WORKER}.restartPolicy: 'Always' is not valid for a Job; use OnFailure or Never"],
        (),
    ),
    (
        "podFailurePolicy without restartPolicy Never",
        lambda o: head(o).update(restartPolicy="OnFailure"),
        ["spec.replicatedJobs[0].template.spec.podFailurePolicy: requires the pod's restartPolicy to be Never"],
        (),
    ),
    (
        "missing image",
        lambda o: main(o).pop("image"),
        [f"{MAIN}.image: required field is missing"],
        (),
    ),
    (
        "toleration value with Exists",
        lambda o: pod(o, 1)["tolerations"][0].update(value="present"),
        [f"{WORKER}.tolerations[0].value: must be empty when operator is Exists"],
        (),
    ),
    (
        "label value too long",
        lambda o: o["metadata"]["labels"].update({ids.QUEUE_LABEL: "q" * 64}),
        [
            f"metadata.labels[{ids.QUEUE_LABEL}]: '{'q' * 56}... is not a label value: at most 63 "
            "characters of letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
        ],
        (),
    ),
]


@pytest.mark.parametrize(("mutation", "expected"), [(m, e) for _, m, e, _ in BROKEN], ids=[b[0] for b in BROKEN])
def test_broken_variant_gives_its_problem(mutation: Mutation, expected: list[str]) -> None:
    obj = jobset()
    mutation(obj)
    label = f"JobSet/{obj['metadata']['name']}"
    assert said(validate_objects([obj])) == [f"{label}: {line}" for line in expected]


def test_name_bound_is_exact() -> None:
    """The coordinator label <name>-pathways-head-0-0.<name> binds first: 22 characters fit, 23 do not. With a
    short spec.network.subdomain the head's pod name binds again: 39 fit (that name is then 63 characters)."""
    obj = jobset()
    obj["metadata"]["name"] = "a" * 22  # the label is then exactly 63 characters
    assert said(validate_objects([obj])) == []
    obj["metadata"]["name"] = "a" * 23
    assert said(validate_objects([obj])) == [
        f"JobSet/{'a' * 23}: metadata.name: '{'a' * 23}' is too long: the coordinator label "
        f"'{'a' * 23}-{ids.HEAD_JOB}-0-0.{'a' * 23}' has 65 characters (max 63); the subdomain defaults to the "
        "JobSet name, so that name may have at most 22"
    ]
    obj["spec"]["network"]["subdomain"] = "s"
    obj["metadata"]["name"] = "a" * 39
    assert said(validate_objects([obj])) == []
    obj["spec"]["network"]["subdomain"] = "s" * 6
    assert said(validate_objects([obj])) == [
        f"JobSet/{'a' * 39}: metadata.name: '{'a' * 39}' is too long: the coordinator label "
        f"'{'a' * 39}-{ids.HEAD_JOB}-0-0.ssssss' has 64 characters (max 63); with spec.network.subdomain 'ssssss' "
        "the JobSet name may have at most 38"
    ]


def test_native_sidecars_need_kubernetes_1_28() -> None:
    problems = said(validate_objects([jobset()], kubernetes_version="1.27"))
    assert any(line.startswith(f"JobSet/demo: {PROXY}.restartPolicy: unknown field") for line in problems), problems
    assert validate_objects([jobset()], kubernetes_version="v1.33.1") == []


@pytest.mark.parametrize("version", ["1.99", "latest", "1.2"])
def test_unsupported_kubernetes_version(version: str) -> None:
    with pytest.raises(ConfigError, match=r"^kubernetes_version: .*valid: 1\.25 to"):
        validate_objects([jobset()], kubernetes_version=version)


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        ("just text", ["object #1: expected a Kubernetes object (a mapping), got str"]),
        (
            {"kind": "ConfigMap", "metadata": {"name": "c"}},
            ["ConfigMap/c: apiVersion: required field is missing; every Kubernetes object needs apiVersion and kind"],
        ),
        (
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}},
            ["ConfigMap #1: metadata.name: required field is missing"],
        ),
        (
            {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": {"name": "q"}},
            [
                "LocalQueue/q: kind: no schema is known for LocalQueue in kueue.x-k8s.io/v1beta1 at Kubernetes 1.31, "
                "so it cannot be checked"
            ],
        ),
    ],
)
def test_envelope_problems(obj: Any, expected: list[str]) -> None:
    assert said(validate_objects([obj])) == expected


# --- the shipped envelope schema against the real CRDs --------------------------------------------------------


@pytest.mark.parametrize("version", CRD_VERSIONS)
def test_valid_example_passes_the_crd(version: str) -> None:
    assert validate_against_crd(jobset(), version) == []


CRD_CAUGHT = [(b[0], b[1], version) for b in BROKEN for version in b[3]]


@pytest.mark.parametrize(
    ("mutation", "version"), [(m, v) for _, m, v in CRD_CAUGHT], ids=[f"{c[0]}-{c[2]}" for c in CRD_CAUGHT]
)
def test_crd_and_pwdeploy_both_catch(mutation: Mutation, version: str) -> None:
    obj = jobset()
    mutation(obj)
    assert validate_against_crd(obj, version) != []
    assert validate_objects([obj]) != []


def test_newer_crd_accepts_what_the_baseline_schema_rejects() -> None:
    """The shipped schema is the v0.10.1 baseline: values only newer JobSets know are problems."""
    obj = jobset()
    obj["spec"]["failurePolicy"]["restartStrategy"] = "InPlaceRestart"
    assert validate_against_crd(obj, "0.12.0") == []


# --- files -----------------------------------------------------------------------------------------------------


def test_validate_files_yaml_and_json(tmp_path: Path) -> None:
    good, bad = jobset(), jobset()
    bad["spec"]["replicatedJobs"][1]["replicas"] = 0
    multi = tmp_path / "all.yaml"
    multi.write_text(yaml.safe_dump_all([good, None, bad]))
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [good, bad]}))
    expected = "JobSet/demo: spec.replicatedJobs[1].replicas: 0 must be at least 1"
    assert said(validate_files([multi, str(listed)])) == [f"{multi}: {expected}", f"{listed}: {expected}"]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "bad.yaml",
            "kind: [JobSet\n",
            "bad.yaml: not valid YAML: expected ',' or ']', but got '<stream end>' at line 2, column 1",
        ),
        ("dup.yaml", "kind: JobSet\nkind: Job\n", "dup.yaml: duplicate key 'kind' at line 2, column 1"),
        ("bad.json", '{"kind": }', "bad.json: not valid JSON: Expecting value at line 1, column 10"),
    ],
)
def test_bad_files_are_config_errors(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        validate_files([path])
    assert str(info.value) == f"{tmp_path}/{message}"


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: no such file"):
        validate_files([tmp_path / "nope.yaml"])


# --- the command -----------------------------------------------------------------------------------------------


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    path = tmp_path / "demo.yaml"
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}}
    path.write_text(yaml.safe_dump_all([jobset(), config_map]))
    return path


def test_cli_ok(runner: CliRunner, manifest: Path) -> None:
    result = runner.invoke(cli, ["validate", str(manifest)])
    assert result.exit_code == 0, result.output
    assert result.stdout == "ok: 2 objects valid\n"


def test_cli_reads_stdin(runner: CliRunner, manifest: Path) -> None:
    result = runner.invoke(cli, ["validate", "-"], input=manifest.read_text())
    assert result.exit_code == 0, result.output
    assert result.stdout == "ok: 2 objects valid\n"


def test_cli_problems_exit_3(runner: CliRunner, tmp_path: Path) -> None:
    obj = jobset()
    main(obj)["restartPolicy"] = "Always"
    obj["spec"]["coordinator"]["replicatedJob"] = "head"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(obj))
    result = runner.invoke(cli, ["validate", str(path)])
    assert result.exit_code == 3
    assert result.stdout == ""
    assert result.stderr.startswith("error: 2 problem(s) in the manifests:\n")
    # each problem in the one text rendering of a finding: where, severity and the rule, what is wrong
    assert (
        f"  - {path}: JobSet/demo: {MAIN}.restartPolicy: error api-server: only initContainers may set restartPolicy"
    ) in result.stderr
    assert (
        f"  - {path}: JobSet/demo: spec.coordinator.replicatedJob: error jobset-webhook: 'head' is not a replicatedJob"
    ) in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_json_lists_the_findings_in_the_one_shape_exit_3(runner: CliRunner, tmp_path: Path) -> None:
    obj = jobset()
    obj["spec"]["coordinator"]["replicatedJob"] = "head"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump_all([obj, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}]))
    result = runner.invoke(cli, ["validate", str(path), "-o", "json"])
    assert result.exit_code == 3
    assert result.stderr == "error: 1 problem(s) in the manifests (above)\n"
    document = json.loads(result.stdout)
    assert document == {
        "objects": 2,
        "findings": [
            {
                "id": "jobset-webhook",
                "severity": "error",
                "where": f"{path}: JobSet/demo: spec.coordinator.replicatedJob",
                "message": "'head' is not a replicatedJob; valid: pathways-head, worker",
                "fix": None,
                "source": RULES["jobset-webhook"],
                "count": 1,
            }
        ],
    }
    path.write_text(yaml.safe_dump(jobset()))
    fine = runner.invoke(cli, ["validate", str(path), "-o", "yaml"])
    assert fine.exit_code == 0 and yaml.safe_load(fine.stdout) == {"objects": 1, "findings": []}


def test_each_family_of_rules_names_itself() -> None:
    """The rule a validation finding names is the part of the API server or JobSet that would refuse it."""
    obj = jobset()
    obj["spec"]["replicatedJobs"][0]["templat"] = {}  # the JobSet schema
    obj["spec"]["coordinator"]["replicatedJob"] = "head"  # the JobSet webhook
    main(obj)["imagePull"] = "x"  # the Kubernetes schema of a Job
    main(obj)["restartPolicy"] = "Always"  # the API server's pod rules
    found = {f.id: f for f in validate_objects([obj])}
    assert set(found) == {"jobset-schema", "jobset-webhook", "kubernetes-schema", "api-server"}, found
    assert found["jobset-schema"].where == "JobSet/demo: spec.replicatedJobs[0].templat"
    assert found["kubernetes-schema"].where.endswith(".containers[0].imagePull")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope.yaml"], "error: nope.yaml: no such file"),
        (["--kubernetes-version", "2.0", "{manifest}"], "error: --kubernetes-version: 2.0 is not supported"),
        (["{empty}"], "holds no Kubernetes objects"),
        ([], "Missing argument 'FILE...'"),
    ],
)
def test_cli_bad_input_exit_2(runner: CliRunner, manifest: Path, args: list[str], message: str) -> None:
    empty = manifest.parent / "empty.yaml"
    empty.write_text("---\n")
    argv = [a.format(manifest=manifest, empty=empty) for a in args]
    result = runner.invoke(cli, ["validate", *argv])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_jobset_schema_ships_with_the_package() -> None:
    """The schema file is package data: pyproject's package-data patterns must cover it, or wheels lack it."""
    import fnmatch
    import tomllib

    from tests.conftest import REPO

    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["pwdeploy"]
    data_files = [
        p.relative_to(REPO / "pwdeploy").as_posix() for p in (REPO / "pwdeploy" / "validation").glob("*.json")
    ]
    assert data_files, "no schema file found under pwdeploy/validation"
    for name in data_files:
        assert any(fnmatch.fnmatch(name, pattern) for pattern in patterns), f"{name} is not in package-data {patterns}"
