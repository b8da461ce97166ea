"""Cluster readiness: can this cluster run this job? Read-only checks through the Kubernetes API, one preflight
report row each, run concurrently.

``kubernetes-version`` is asked first, alone: it also tells whether the API server answers at all, so an
unreachable cluster costs one request (with its retries) instead of one per check. The other checks then run
side by side: ``jobset-api``, ``namespace``, ``queue``, ``tpu-capacity``, ``head-capacity``, ``permissions``
(SelfSubjectAccessReviews, the only POSTs: they change nothing) and one ``secret`` row per Secret that
``main.secret_env`` references. A check the API server will not answer for this identity is ``not verified``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pwdeploy.cluster import jobsets as js
from pwdeploy.cluster.api import (
    ACCESS_REVIEWS,
    CRDS,
    EVENTS,
    JOBSETS,
    NODES,
    POD_LOGS,
    PODS,
    SECRETS,
    Action,
    ApiError,
    Kube,
    Resource,
    rbac_hint,
)
from pwdeploy.cluster.jobsets import Object
from pwdeploy.config import JobConfig, SecretRef
from pwdeploy.errors import ConfigError
from pwdeploy.preflight.report import CheckResult, Status
from pwdeploy.quantity import parse_quantity

MIN_KUBERNETES = (1, 29)  # native sidecars (initContainers with restartPolicy Always) are on by default from 1.29
JOBSET_CRD = f"{JOBSETS.plural}.{JOBSETS.group}"
JOBSET_INSTALL = (
    "install the JobSet controller: kubectl apply --server-side -f "
    "https://github.com/kubernetes-sigs/jobset/releases/download/v0.10.1/manifests.yaml"
)
TPU_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
TPU_RESOURCE = "google.com/tpu"
PARTIAL_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"  # a Secret's metadata, no data
# What submit, status, logs and delete need, in the job's namespace.
NEEDED: tuple[tuple[str, Resource], ...] = (
    ("create", JOBSETS),
    ("patch", JOBSETS),
    ("get", JOBSETS),
    ("delete", JOBSETS),
    ("get", PODS),
    ("list", PODS),
    ("get", POD_LOGS),
    ("list", EVENTS),
)
CHECKS = ("jobset-api", "namespace", "queue", "tpu-capacity", "head-capacity", "permissions")


@dataclass(frozen=True)
class Target:
    """What the checks look at: the job, its rendered JobSet, where it would run and the connection."""

    job: JobConfig
    jobset: Object
    namespace: str
    kube: Kube

    @property
    def location(self) -> str:
        return self.kube.context or self.kube.host

    def row(
        self, check: str, status: Status, detail: str, fix: str | None = None, fields: tuple[str, ...] = ()
    ) -> CheckResult:
        return CheckResult(self.location, fields, check, status, detail, fix)


Check = Callable[[Target], CheckResult]


def check_cluster(job: JobConfig, kube: Kube, *, max_workers: int = 8) -> list[CheckResult]:
    """One row per readiness check, in a fixed order; ``max_workers`` requests are in flight at most."""
    from pwdeploy import manifests

    (jobset,) = [obj for obj in manifests.build(job) if obj.get("kind") == "JobSet"]
    target = Target(job, jobset, job.namespace or kube.namespace, kube)
    checks: list[tuple[str, Check]] = [
        ("jobset-api", check_jobset_api),
        ("namespace", check_namespace),
        ("queue", check_queue),
        ("tpu-capacity", check_tpu_capacity),
        ("head-capacity", check_head_capacity),
        ("permissions", functools.partial(check_permissions, max_workers=max_workers)),
        *(("secret", functools.partial(check_secret, secret=s)) for s in referenced_secrets(job)),
    ]
    try:
        version = kubernetes_version(kube)
    except ApiError as exc:
        if exc.status in (None, 401):  # no answer, or the credentials are refused: nothing else can be asked
            skipped = "not checked: the API server did not answer the version request"
            return [
                target.row("kubernetes-version", Status.FAILED, exc.message, exc.hint),
                *(target.row(name, Status.NOT_VERIFIED, skipped) for name, _ in checks),
            ]
        first = _not_verified(target, "kubernetes-version", exc)
    else:
        first = version_row(target, version)
    with ThreadPoolExecutor(max_workers=max_workers) as pool:
        rows = list(pool.map(lambda named: _guarded(target, *named), checks))
    return [first, *rows]


def _guarded(target: Target, name: str, check: Check) -> CheckResult:
    try:
        return check(target)
    except ApiError as exc:
        return _not_verified(target, name, exc)


def _not_verified(target: Target, name: str, exc: ApiError) -> CheckResult:
    return target.row(name, Status.NOT_VERIFIED, exc.message, exc.hint)


# ---------------------------------------------------------------------------------------------- version


def kubernetes_version(kube: Kube) -> tuple[int, int, str]:
    """(major, minor, gitVersion) from ``/version``; GKE's minor reads like ``31+``."""
    answer = kube.request(Action("get", None, name="/version"), "GET", "/version")
    major, minor = (int(re.sub(r"\D", "", str(answer.get(k) or "")) or 0) for k in ("major", "minor"))
    return major, minor, str(answer.get("gitVersion") or f"{major}.{minor}")


def version_row(target: Target, version: tuple[int, int, str]) -> CheckResult:
    major, minor, text = version
    if (major, minor) >= MIN_KUBERNETES:
        return target.row("kubernetes-version", Status.OK, f"{text}: native sidecars are on")
    needed = ".".join(map(str, MIN_KUBERNETES))
    return target.row(
        "kubernetes-version",
        Status.FAILED,
        f"{text}: the head's proxy and resource manager run as native sidecars, on by default from {needed}",
        f"upgrade the control plane and nodes to {needed} or later "
        "(gcloud container clusters upgrade CLUSTER --master --cluster-version VERSION)",
    )


# ---------------------------------------------------------------------------------------------- jobset-api


def check_jobset_api(target: Target) -> CheckResult:
    """The JobSet CRD serves v1alpha2 and its schema knows every field (and enum value) pwdeploy renders."""
    kube = target.kube
    try:
        crd: Object = kube.request(Action("get", CRDS, name=JOBSET_CRD), "GET", CRDS.path(name=JOBSET_CRD))
    except ApiError as exc:
        if exc.status == 404:
            return _jobset_missing(target)
        if exc.status != 403:
            raise
        if not js.serves_jobsets(kube):
            return _jobset_missing(target)
        return target.row(
            "jobset-api",
            Status.NOT_VERIFIED,
            f"{JOBSETS.group_version} is served; whether it knows every rendered field is not verified: this "
            f"identity may not read the CustomResourceDefinition {JOBSET_CRD}",
            rbac_hint(Action("get", CRDS, name=JOBSET_CRD)),
        )
    served = [v for v in crd.get("spec", {}).get("versions") or [] if v.get("served")]
    version = next((v for v in served if v.get("name") == JOBSETS.version), None)
    if version is None:
        names = ", ".join(str(v.get("name")) for v in served) or "none"
        return target.row(
            "jobset-api",
            Status.FAILED,
            f"the JobSet CRD serves {names}, not {JOBSETS.version}",
            f"upgrade JobSet; {JOBSET_INSTALL}",
        )
    schema = (version.get("schema") or {}).get("openAPIV3Schema")
    if not isinstance(schema, dict):
        return target.row(
            "jobset-api",
            Status.NOT_VERIFIED,
            f"the JobSet CRD serves {JOBSETS.version} but publishes no schema to check fields against",
        )
    unknown = list(unknown_fields(target.jobset, schema))
    if unknown:
        shown = "; ".join(unknown[:5]) + (f" (and {len(unknown) - 5} more)" if len(unknown) > 5 else "")
        return target.row(
            "jobset-api",
            Status.FAILED,
            f"the installed JobSet CRD does not know what pwdeploy renders: {shown}",
            f"upgrade JobSet; {JOBSET_INSTALL}",
        )
    return target.row(
        "jobset-api", Status.OK, f"{JOBSETS.group_version} served; its schema knows every field of the rendered JobSet"
    )


def _jobset_missing(target: Target) -> CheckResult:
    return target.row(
        "jobset-api", Status.FAILED, f"the JobSet API ({JOBSETS.group_version}) is not installed", JOBSET_INSTALL
    )


def unknown_fields(value: Any, schema: dict[str, Any], path: str = "") -> Iterator[str]:
    """Paths in ``value`` that ``schema`` (an openAPIV3Schema) does not declare, and values outside its enums."""
    if isinstance(value, dict):
        properties = schema.get("properties")
        if properties is None:
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                for key, item in value.items():
                    yield from unknown_fields(item, extra, f"{path}.{key}".lstrip("."))
            return
        for key, item in value.items():
            if key in properties:
                yield from unknown_fields(item, properties[key], f"{path}.{key}".lstrip("."))
            elif not schema.get("x-kubernetes-preserve-unknown-fields"):
                yield f"{path}.{key}".lstrip(".")
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for index, item in enumerate(value):
                label = item.get("name", index) if isinstance(item, dict) else index
                yield from unknown_fields(item, items, f"{path}[{label}]")
    elif schema.get("enum") and value not in schema["enum"]:
        yield f"{path}: {value} (known: {', '.join(map(str, schema['enum']))})"


# ---------------------------------------------------------------------------------------------- namespace, queue


def check_namespace(target: Target) -> CheckResult:
    ns = target.namespace
    known = js.namespace_exists(target.kube, ns)
    if known is None:
        return target.row(
            "namespace", Status.NOT_VERIFIED, f"this identity may not read namespace {ns!r}", fields=("namespace",)
        )
    if not known:
        return target.row(
            "namespace",
            Status.FAILED,
            f"namespace {ns!r} does not exist",
            f"kubectl create namespace {ns}, or set `namespace` in the job",
            ("namespace",),
        )
    return target.row("namespace", Status.OK, f"namespace {ns!r} exists", fields=("namespace",))


def check_queue(target: Target) -> CheckResult:
    """The Kueue LocalQueue of ``scheduling.queue`` exists in the job's namespace."""
    queue, ns, kube = target.job.scheduling.queue, target.namespace, target.kube
    fields = ("scheduling.queue",)
    if not queue:
        return target.row(
            "queue", Status.OK, "scheduling.queue is not set: Kueue does not queue this job", None, fields
        )
    resource = js.kueue_localqueues(kube)
    if resource is None:
        return target.row(
            "queue",
            Status.FAILED,
            f"scheduling.queue is {queue!r} but Kueue (kueue.x-k8s.io) is not installed",
            "install Kueue or remove scheduling.queue",
            fields,
        )
    if js.localqueue_exists(kube, resource, ns, queue):
        return target.row("queue", Status.OK, f"LocalQueue {queue!r} exists in namespace {ns!r}", None, fields)
    names = js.localqueue_names(kube, resource, ns)
    available = f"available: {', '.join(names)}" if names else "there are none in this namespace"
    return target.row(
        "queue",
        Status.FAILED,
        f"LocalQueue {queue!r} does not exist in namespace {ns!r}; {available}",
        "set scheduling.queue (--queue) to one of them, or create it",
        fields,
    )


# ---------------------------------------------------------------------------------------------- capacity


def list_nodes(kube: Kube, selector: dict[str, str]) -> list[Object]:
    query = [("labelSelector", ",".join(f"{k}={v}" for k, v in selector.items()))]
    answer = kube.request(Action("list", NODES), "GET", NODES.path(), query=query)
    return list(answer.get("items") or [])


def schedulable(node: Object) -> bool:
    """Ready and not cordoned."""
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return ready and not (node.get("spec") or {}).get("unschedulable")


def allocatable(node: Object, resource: str) -> Decimal:
    value = ((node.get("status") or {}).get("allocatable") or {}).get(resource)
    try:
        return parse_quantity(value, resource, allow_zero=True) if value is not None else Decimal(0)
    except ConfigError:
        return Decimal(0)


def check_tpu_capacity(target: Target) -> CheckResult:
    """Ready TPU nodes of the job's accelerator and topology, with the chips a worker pod asks for."""
    tpu = target.job.tpu
    shape = tpu.slice
    selector = {TPU_ACCELERATOR_LABEL: shape.accelerator, TPU_TOPOLOGY_LABEL: shape.topology}
    nodes = _nodes_or_none(target, selector)
    if nodes is None:
        return _nodes_forbidden(target, "tpu-capacity", ("tpu",))
    usable = sum(schedulable(n) and allocatable(n, TPU_RESOURCE) >= shape.chips_per_vm for n in nodes)
    needed = tpu.slices * shape.vms
    what = (
        f"{usable} Ready node(s) of {shape.accelerator} {shape.topology} with {shape.chips_per_vm} "
        f"{TPU_RESOURCE} allocatable; the job needs {needed} ({tpu.slices} slice(s) x {shape.vms} VM(s))"
    )
    if usable >= needed:
        return target.row("tpu-capacity", Status.OK, what, fields=("tpu",))
    return target.row(
        "tpu-capacity",
        Status.WARN,
        f"{what}: the workers wait unless node pools autoscale from zero or use queued provisioning",
        f"create TPU node pools of {shape.accelerator} with topology {shape.topology} ({shape.vms} node(s) per "
        "slice), or check that autoscaling or queued provisioning covers them",
        ("tpu",),
    )


def check_head_capacity(target: Target) -> CheckResult:
    """Nodes matching the head pod's nodeSelector whose allocatable cpu and memory hold the head pod."""
    spec = head_pod_spec(target.jobset)
    selector = {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()}
    where = ",".join(f"{k}={v}" for k, v in selector.items())
    need = pod_requests(spec)
    asks = f"{_cpu(need['cpu'])} CPU and {_memory(need['memory'])} memory"
    fields = ("head.node_pool",)
    nodes = _nodes_or_none(target, selector)
    if nodes is None:
        return _nodes_forbidden(target, "head-capacity", fields)
    if not nodes:
        return target.row(
            "head-capacity",
            Status.WARN,
            f"no node matches the head pod's nodeSelector {where}: the head waits unless that node pool "
            "autoscales from zero",
            f"create a CPU node pool {target.job.head.node_pool} whose machines allocate at least {asks}, "
            "or set head.node_pool (--head-node-pool)",
            fields,
        )
    fit = [n for n in nodes if all(allocatable(n, r) >= need[r] for r in ("cpu", "memory"))]
    if fit:
        return target.row(
            "head-capacity",
            Status.OK,
            f"{len(fit)} of {len(nodes)} node(s) with {where} allocate the head pod's {asks}",
            None,
            fields,
        )
    most_cpu = max(allocatable(n, "cpu") for n in nodes)
    most_memory = max(allocatable(n, "memory") for n in nodes)
    return target.row(
        "head-capacity",
        Status.FAILED,
        f"the head pod requests {asks}; the {len(nodes)} node(s) with {where} allocate at most "
        f"{_cpu(most_cpu)} CPU and {_memory(most_memory)} memory",
        "use a larger machine type for that node pool, or lower main.cpu/main.memory, head.proxy_cpu/proxy_memory "
        "and head.rm_cpu/rm_memory",
        fields,
    )


def head_pod_spec(jobset: Object) -> Object:
    coordinator = (jobset["spec"].get("coordinator") or {}).get("replicatedJob")
    (head,) = [rj for rj in jobset["spec"]["replicatedJobs"] if rj["name"] == coordinator]
    spec: Object = head["template"]["spec"]["template"]["spec"]
    return spec


def pod_requests(spec: Object) -> dict[str, Decimal]:
    """The pod's cpu and memory requests as the scheduler sums them: native sidecars (restartPolicy Always) add
    to the containers; other init containers run alone, beside the sidecars started before them."""
    totals = {}
    for resource in ("cpu", "memory"):
        sidecars = init_peak = Decimal(0)
        for container in spec.get("initContainers") or []:
            if container.get("restartPolicy") == "Always":
                sidecars += _request(container, resource)
                init_peak = max(init_peak, sidecars)
            else:
                init_peak = max(init_peak, sidecars + _request(container, resource))
        regular = sum((_request(c, resource) for c in spec.get("containers") or []), Decimal(0))
        totals[resource] = max(init_peak, sidecars + regular)
    return totals


def _request(container: Object, resource: str) -> Decimal:
    res = container.get("resources") or {}
    value = (res.get("requests") or {}).get(resource, (res.get("limits") or {}).get(resource))
    return parse_quantity(value, resource, allow_zero=True) if value is not None else Decimal(0)


def _nodes_or_none(target: Target, selector: dict[str, str]) -> list[Object] | None:
    try:
        return list_nodes(target.kube, selector)
    except ApiError as exc:
        if exc.status == 403:
            return None
        raise


def _nodes_forbidden(target: Target, check: str, fields: tuple[str, ...]) -> CheckResult:
    return target.row(
        check, Status.NOT_VERIFIED, "this identity may not list nodes", rbac_hint(Action("list", NODES)), fields
    )


def _cpu(value: Decimal) -> str:
    return f"{value.normalize():f}"


def _memory(value: Decimal) -> str:
    return f"{(value / 2**30).quantize(Decimal('0.1')).normalize():f}Gi"


# ---------------------------------------------------------------------------------------------- permissions


def check_permissions(target: Target, *, max_workers: int = 8) -> CheckResult:
    """SelfSubjectAccessReviews for what submit, status, logs and delete do in the job's namespace."""
    ns = target.namespace
    with ThreadPoolExecutor(max_workers=min(max_workers, len(NEEDED))) as pool:
        allowed = list(pool.map(lambda need: can_i(target.kube, ns, *need), NEEDED))
    denied = [Action(verb, resource, ns) for (verb, resource), ok in zip(NEEDED, allowed, strict=True) if not ok]
    if not denied:
        return target.row("permissions", Status.OK, f"allowed in namespace {ns!r}: {_verbs(NEEDED)}")
    return target.row(
        "permissions",
        Status.FAILED,
        f"denied in namespace {ns!r}: " + "; ".join(f"{a.verb} {a.resource.display}" for a in denied if a.resource),
        rbac_hint(denied[0]) if len(denied) == 1 else _rules(denied, ns),
    )


def can_i(kube: Kube, namespace: str, verb: str, resource: Resource) -> bool:
    plural, _, sub = resource.plural.partition("/")
    attributes = {"namespace": namespace, "verb": verb, "group": resource.group, "resource": plural}
    if sub:
        attributes["subresource"] = sub
    body = {
        "apiVersion": ACCESS_REVIEWS.group_version,
        "kind": ACCESS_REVIEWS.kind,
        "spec": {"resourceAttributes": attributes},
    }
    answer = kube.request(Action("create", ACCESS_REVIEWS), "POST", ACCESS_REVIEWS.path(), body=body)
    return bool((answer.get("status") or {}).get("allowed"))


def _verbs(needs: Sequence[tuple[str, Resource]]) -> str:
    grouped: dict[str, list[str]] = {}
    for verb, resource in needs:
        grouped.setdefault(resource.display, []).append(verb)
    return "; ".join(f"{', '.join(verbs)} {display}" for display, verbs in grouped.items())


def _rules(denied: list[Action], namespace: str) -> str:
    grouped: dict[Resource, list[str]] = {}
    for action in denied:
        assert action.resource is not None
        grouped.setdefault(action.resource, []).append(action.verb)
    rules = "; ".join(
        f'apiGroups: ["{r.group}"], resources: [{r.plural}], verbs: [{", ".join(verbs)}]'
        for r, verbs in grouped.items()
    )
    return f"bind this identity to a Role in namespace {namespace} with the rules {rules}; check: kubectl auth can-i"


# ---------------------------------------------------------------------------------------------- secrets


def referenced_secrets(job: JobConfig) -> list[tuple[str, tuple[SecretRef, ...]]]:
    """(Secret name, its references), in the order main.secret_env first names them."""
    grouped: dict[str, list[SecretRef]] = {}
    for ref in job.main.secret_env:
        grouped.setdefault(ref.secret, []).append(ref)
    return [(name, tuple(refs)) for name, refs in grouped.items()]


def check_secret(target: Target, *, secret: tuple[str, tuple[SecretRef, ...]]) -> CheckResult:
    """The Secret exists (its metadata only is read: values never leave the cluster)."""
    name, refs = secret
    ns = target.namespace
    envs = ", ".join(r.env for r in refs)
    fields = tuple(f"main.secret_env.{r.env}" for r in refs)
    try:
        target.kube.request(Action("get", SECRETS, ns, name), "GET", SECRETS.path(ns, name), accept=PARTIAL_METADATA)
    except ApiError as exc:
        if exc.status == 403:
            return target.row(
                "secret",
                Status.NOT_VERIFIED,
                f"Secret {name!r} (for {envs}): this identity may not read Secrets in namespace {ns!r}",
                None,
                fields,
            )
        if exc.status != 404:
            raise
        literals = " ".join(f"--from-literal={key}=..." for key in dict.fromkeys(r.key for r in refs))
        return target.row(
            "secret",
            Status.FAILED,
            f"Secret {name!r} (for {envs}) does not exist in namespace {ns!r}",
            f"kubectl create secret generic {name} -n {ns} {literals}",
            fields,
        )
    keys = ", ".join(dict.fromkeys(r.key for r in refs))
    return target.row(
        "secret", Status.OK, f"Secret {name!r} exists in namespace {ns!r} (keys {keys} not read)", None, fields
    )
