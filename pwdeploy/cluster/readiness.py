"""Cluster readiness: can this cluster run this job? Read-only checks through the Kubernetes API, one preflight
report row each, run concurrently.

The control plane's version is asked first, alone: it also tells whether the API server answers at all, so an
unreachable cluster costs one request (with its retries) instead of one per check. The checks then run side by
side: ``kubernetes-version`` (the control plane, and the kubelets of the nodes that would run pods with native
sidecars), ``jobset-api``, ``namespace``, ``queue``, ``tpu-capacity``, ``head-capacity``, ``permissions``
(SelfSubjectAccessReviews, the only POSTs: they change nothing) and one ``secret`` row per Secret that
``main.secret_env`` references. Each node list is asked once however many checks read it. A check the API
server will not answer for this identity is ``not verified``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
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
    reading_answers,
)
from pwdeploy.cluster.jobsets import Object
from pwdeploy.cluster.nodes import (
    NODE_POOL_LABEL,
    NodeLists,
    allocatable,
    head_pod_spec,
    kubelet_version,
    native_sidecar_pods,
    node_selector,
    pod_requests,
    pool_sizes,
    schedulable,
)
from pwdeploy.config import JobConfig, SecretRef
from pwdeploy.report import CheckResult, Status

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
PLACEHOLDER_TAG = "unpushed"  # renders a job whose pushed image is missing: the image rows report it


@dataclass(frozen=True)
class Target:
    """What the checks look at: the job, its rendered JobSet, where it would run and the connection."""

    job: JobConfig
    jobset: Object
    namespace: str
    kube: Kube
    nodes: NodeLists = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", NodeLists(self.kube))

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

    (jobset,) = [obj for obj in manifests.build(renderable(job)) if obj.get("kind") == "JobSet"]
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
        error = exc
        checks.insert(0, ("kubernetes-version", lambda t: _not_verified(t, "kubernetes-version", error)))
    else:
        checks.insert(0, ("kubernetes-version", functools.partial(check_kubernetes_version, version=version)))
    with ThreadPoolExecutor(max_workers=max_workers) as pool:
        return list(pool.map(lambda named: _guarded(target, *named), checks))


def renderable(job: JobConfig) -> JobConfig:
    """``job`` with a placeholder for a pushed image it lacks (``image.repository`` or ``sidecar.repository`` set,
    nothing pushed matches): what the cluster is asked does not depend on the image, and the image rows of
    preflight name the missing one with its fix."""
    if not job.headless and job.main.image is None and job.image.repository:
        job = job._replace(main=job.main._replace(image=f"{job.image.repository}:{PLACEHOLDER_TAG}"))
    if job.sidecar.image is None and job.sidecar.repository:
        job = job._replace(sidecar=job.sidecar._replace(image=f"{job.sidecar.repository}:{PLACEHOLDER_TAG}"))
    return job


def _guarded(target: Target, name: str, check: Check) -> CheckResult:
    try:
        with reading_answers(target.kube):
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
    """The control plane alone."""
    major, minor, text = version
    if (major, minor) >= MIN_KUBERNETES:
        return target.row("kubernetes-version", Status.OK, f"{text}: native sidecars are on")
    return target.row(
        "kubernetes-version",
        Status.FAILED,
        f"{text}: the head's proxy and resource manager run as native sidecars, on by default from {_MIN}",
        f"upgrade the control plane and nodes to {_MIN} or later "
        "(gcloud container clusters upgrade CLUSTER --master --cluster-version VERSION)",
    )


_MIN = ".".join(map(str, MIN_KUBERNETES))


def check_kubernetes_version(target: Target, *, version: tuple[int, int, str]) -> CheckResult:
    """The control plane, then the kubelets of the nodes that would run a pod with native sidecars (node pools
    can lag the control plane; an older kubelet runs them as init containers that never finish)."""
    row = version_row(target, version)
    notes: list[str] = []
    worst = row.status
    fixes = [row.fix] if row.fix else []
    for role, spec in native_sidecar_pods(target.jobset):
        try:
            nodes = [n for n in target.nodes.get(node_selector(spec)) if schedulable(n)]
        except ApiError as exc:
            notes.append(f"kubelets of the {role} nodes not checked: {exc.message}")
            continue
        status, note, fix = kubelet_lag(role, nodes)
        if note:
            notes.append(note)
        if fix:
            fixes.append(fix)
        if status is Status.FAILED or (status is Status.WARN and worst is Status.OK):
            worst = status
    detail = "; ".join([row.detail, *notes])
    return target.row("kubernetes-version", worst, detail, "; ".join(fixes) or None)


def kubelet_lag(role: str, nodes: list[Object]) -> tuple[Status, str | None, str | None]:
    """(status, note, fix) for the kubelets of ``nodes``: failed when every one is older than 1.29, a warning
    when some are (the scheduler may pick one); no note without versions to read."""
    versions = {n["metadata"]["name"]: kubelet_version(n) for n in nodes}
    known = {name: v for name, v in versions.items() if v is not None}
    if not known:
        return Status.OK, None, None
    old = [n for n in nodes if (v := known.get(n["metadata"]["name"])) is not None and v[:2] < MIN_KUBERNETES]
    texts = sorted({v[2] for v in known.values()})
    if not old:
        return Status.OK, f"{role} node kubelets {', '.join(texts)}", None
    pools = sorted({str((n["metadata"].get("labels") or {}).get(NODE_POOL_LABEL, "POOL")) for n in old})
    old_texts = sorted({v[2] for n in old if (v := known[n["metadata"]["name"]])})
    note = (
        f"kubelet {', '.join(old_texts)} on {len(old)} of {len(known)} {role} node(s) (node pool "
        f"{', '.join(pools)}): before {_MIN} it runs native sidecars as init containers that never finish, so the "
        f"{role} pods stay in Init"
    )
    fix = "; ".join(f"upgrade the node pool: gcloud container node-pools upgrade {p} --cluster CLUSTER" for p in pools)
    return (Status.FAILED if len(old) == len(known) else Status.WARN), note, fix


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


def check_tpu_capacity(target: Target) -> CheckResult:
    """Node pools that can each hold a slice: the workers' exclusive topology is the node pool, so every slice
    needs a pool of its own with VMs-per-slice Ready, schedulable nodes of the job's accelerator and topology,
    each with the chips a worker pod asks for."""
    tpu = target.job.tpu
    shape = tpu.slice
    selector = {TPU_ACCELERATOR_LABEL: shape.accelerator, TPU_TOPOLOGY_LABEL: shape.topology}
    nodes = _nodes_or_none(target, selector)
    if nodes is None:
        return _nodes_forbidden(target, "tpu-capacity", ("tpu",))
    sizes = pool_sizes(n for n in nodes if schedulable(n) and allocatable(n, TPU_RESOURCE) >= shape.chips_per_vm)
    holding = sum(size >= shape.vms for size in sizes.values())
    what = (
        f"{_pools(sizes)} x {shape.accelerator} {shape.topology} nodes (Ready, schedulable, {shape.chips_per_vm} "
        f"{TPU_RESOURCE} each); the job needs {_count(tpu.slices, 'pool')} (one per slice) of "
        f"{_count(shape.vms, 'node')}"
    )
    if holding >= tpu.slices:
        return target.row("tpu-capacity", Status.OK, what, fields=("tpu",))
    short = f", and {holding} of them hold(s) a slice" if holding != len(sizes) else ""
    return target.row(
        "tpu-capacity",
        Status.WARN,
        f"{what}{short}: the workers wait unless node pools autoscale from zero or use queued provisioning",
        f"create TPU node pools of {shape.accelerator} with topology {shape.topology}, one per slice with "
        f"{_count(shape.vms, 'node')}, or check that autoscaling or queued provisioning covers them",
        ("tpu",),
    )


def _pools(sizes: dict[str, int]) -> str:
    """``1 node pool of 2``, ``2 node pools of 1``, ``1 node pool of 4, 2 of 1``; ``0 node pools of``."""
    if not sizes:
        return "0 node pools of"
    by_size: dict[int, int] = {}
    for size in sorted(sizes.values(), reverse=True):
        by_size[size] = by_size.get(size, 0) + 1
    parts = [f"{pools} of {size}" for size, pools in by_size.items()]
    first_pools = next(iter(by_size.values()))
    parts[0] = f"{_count(first_pools, 'node pool')} of {next(iter(by_size))}"
    return ", ".join(parts)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def check_head_capacity(target: Target) -> CheckResult:
    """Ready, schedulable nodes matching the head pod's nodeSelector whose allocatable cpu and memory hold it."""
    spec = head_pod_spec(target.jobset)
    selector = node_selector(spec)
    where = ",".join(f"{k}={v}" for k, v in selector.items())
    need = pod_requests(spec)
    asks = f"{_cpu(need['cpu'])} CPU and {_memory(need['memory'])} memory"
    fields = ("head.node_pool",)
    matching = _nodes_or_none(target, selector)
    if matching is None:
        return _nodes_forbidden(target, "head-capacity", fields)
    nodes = [n for n in matching if schedulable(n)]
    down = len(matching) - len(nodes)
    besides = f" ({down} more NotReady or cordoned)" if down else ""
    if not nodes and down:
        return target.row(
            "head-capacity",
            Status.WARN,
            f"none of the {down} node(s) with {where} is Ready and schedulable (NotReady or cordoned): the head "
            "waits until one is, or the node pool adds one",
            f"kubectl get nodes -l {where}; uncordon them (kubectl uncordon NODE) or repair the node pool",
            fields,
        )
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
            f"{len(fit)} of {len(nodes)} Ready node(s) with {where} allocate the head pod's {asks}{besides}",
            None,
            fields,
        )
    most_cpu = max(allocatable(n, "cpu") for n in nodes)
    most_memory = max(allocatable(n, "memory") for n in nodes)
    return target.row(
        "head-capacity",
        Status.FAILED,
        f"the head pod requests {asks}; the {len(nodes)} Ready node(s) with {where} allocate at most "
        f"{_cpu(most_cpu)} CPU and {_memory(most_memory)} memory{besides}",
        "use a larger machine type for that node pool, or lower main.cpu/main.memory, head.proxy_cpu/proxy_memory "
        "and head.rm_cpu/rm_memory",
        fields,
    )


def _nodes_or_none(target: Target, selector: dict[str, str]) -> list[Object] | None:
    try:
        return target.nodes.get(selector)
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
    attributes = {"namespace": namespace, "verb": verb, "group": resource.group, "resource": resource.plural}
    if resource.subresource:
        attributes["subresource"] = resource.subresource
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
        f'apiGroups: ["{r.group}"], resources: [{r.rbac_resource}], verbs: [{", ".join(verbs)}]'
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
