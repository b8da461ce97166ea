"""``tpu-capacity``: node pools that can each hold a slice, judged by the rendered worker pod and what other pods
hold on the nodes.

The workers' exclusive topology is the node pool, so every slice needs a pool of its own with VMs-per-slice
Ready, schedulable nodes that carry every label of the worker pod's nodeSelector, whose taints the worker pod
tolerates, and which allocate the chips a worker container asks for, less the chips other pods request there, with
none of the workers' host ports taken (the workers use hostNetwork: the scheduler's NodePorts filter refuses a node
whose ports another job's workers hold, before it counts chips). Other pods are read in one list of the cluster's
active pods; the job's own pods (a resubmit) are not counted. Without that exclusive topology (dynamic slicing: GKE
forms a slice from several sub-block pools) the free nodes of all pools count together. Selector, tolerations,
chips, VMs per slice, slices and the exclusive topology are all read from the rendered JobSet, so a capacity mode
(spot, a reservation, ...) is counted as rendered.
"""

from __future__ import annotations

from pwdeploy import identifiers as ids
from pwdeploy.cluster.jobsets import Object
from pwdeploy.cluster.nodes import (
    allocatable,
    container_request,
    free,
    host_ports,
    node_selector,
    pool_sizes,
    port_conflicts,
    rendered_pod_spec,
    replicated_job,
    schedulable,
    tolerates,
)
from pwdeploy.config.capacity_modes import capacity_mode
from pwdeploy.readiness.target import Check, Row, Target, count, held_or_note, nodes_or_none
from pwdeploy.report import PreflightRow, Status

# What this check's verdict rests on (its rows' ``source``).
SOURCE = (
    "kubernetes/kubernetes: pkg/scheduler/framework/plugins (nodeports, noderesources/fit.go, tainttoleration); "
    "kubernetes-sigs/jobset: the exclusive-topology annotation (one slice per node pool)"
)

TPU_RESOURCE = ids.TPU_RESOURCE
TPU_ACCELERATOR_LABEL, TPU_TOPOLOGY_LABEL = ids.TPU_ACCELERATOR_LABEL, ids.TPU_TOPOLOGY_LABEL
FIELDS = ("tpu",)
SCALES_FROM_ZERO = (
    "flex-start and queued-provisioning node pools scale from zero and cannot be seen through the Kubernetes API "
    "until they do; check them with: gcloud container node-pools list --cluster CLUSTER --location LOCATION"
)


class WorkerAsk:
    """What the rendered worker replicatedJob asks of the cluster."""

    def __init__(self, jobset: Object) -> None:
        worker = replicated_job(jobset, ids.WORKER_JOB)
        self.spec: Object = rendered_pod_spec(jobset, ids.WORKER_JOB)
        self.selector = node_selector(self.spec)
        self.tolerations: list[Object] = list(self.spec.get("tolerations") or [])
        self.chips = container_request(self.spec, ids.WORKER_CONTAINER, TPU_RESOURCE)
        self.vms = int(worker["template"]["spec"]["completions"])
        self.slices = int(worker.get("replicas", 1))
        annotations = (worker["template"].get("metadata") or {}).get("annotations") or {}
        self.pool_per_slice = annotations.get(ids.EXCLUSIVE_TOPOLOGY_ANNOTATION) == ids.NODE_POOL_LABEL

    @property
    def shape(self) -> str:
        """``tpu-v5p-slice 2x2x1``; the accelerator alone where the workers select no topology (dynamic slicing)."""
        accelerator, topology = self.selector.get(TPU_ACCELERATOR_LABEL, "?"), self.selector.get(TPU_TOPOLOGY_LABEL)
        return accelerator if topology is None and not self.pool_per_slice else f"{accelerator} {topology or '?'}"

    @property
    def capacity_labels(self) -> str:
        """The selector's labels besides the TPU shape (capacity mode, user selectors), as k=v."""
        extra = {k: v for k, v in self.selector.items() if k not in (TPU_ACCELERATOR_LABEL, TPU_TOPOLOGY_LABEL)}
        return ",".join(f"{k}={v}" for k, v in extra.items())


def _run(target: Target, row: Row) -> PreflightRow:
    ask = WorkerAsk(target.jobset)
    nodes = nodes_or_none(target, ask.selector)
    if nodes is None:
        return row.nodes_forbidden(FIELDS)
    ready = [n for n in nodes if schedulable(n) and allocatable(n, TPU_RESOURCE) >= ask.chips]
    usable = [n for n in ready if tolerates(n, ask.tolerations)]
    held, unread = held_or_note(target, (TPU_RESOURCE,)) if usable else ({}, "")
    ports = host_ports(ask.spec)
    free_nodes = [n for n in usable if free(n, TPU_RESOURCE, held) >= ask.chips and not port_conflicts(n, ports, held)]
    busy = len(usable) - len(free_nodes)
    labelled = f" labelled {ask.capacity_labels}" if ask.capacity_labels else ""
    tainted = len(ready) - len(usable)
    untolerated = f"; {tainted} more with taints the workers do not tolerate" if tainted else ""
    taken = f"; {busy} more held by other pods (their TPU chips or the workers' host ports)" if busy else ""
    sizes = pool_sizes(free_nodes)
    if not ask.pool_per_slice:
        return _shared_pools(row, ask, sizes, len(free_nodes), f"{labelled}{untolerated}{taken}{unread}")
    what = (
        f"{_pools(sizes, ask.shape)}{labelled} (Ready, schedulable, {ask.chips} {TPU_RESOURCE} free each"
        f"{untolerated}{taken}{unread}); the job needs {count(ask.slices, 'pool')} (one per slice) of "
        f"{count(ask.vms, 'node')}"
    )
    held_now = busy > 0 and sum(size >= ask.vms for size in pool_sizes(usable).values()) >= ask.slices
    return _pool_per_slice(target, row, ask, sizes, what, held_now)


def _pool_per_slice(
    target: Target, row: Row, ask: WorkerAsk, sizes: dict[str, int], what: str, held_now: bool
) -> PreflightRow:
    """Each slice needs a node pool of its own (the exclusive topology): enough pools, pools other pods hold
    now (``held_now``), pools that scale from zero, or too few."""
    holding = sum(size >= ask.vms for size in sizes.values())
    if holding >= ask.slices:
        return row(Status.OK, what, fields=FIELDS)
    if held_now:
        return row(
            Status.WARN,
            f"{what}: other pods hold the TPU nodes now, so the workers wait until they end",
            "wait for the other jobs (kubectl get pods -A -o wide --field-selector spec.nodeName=NODE shows who "
            "holds a node), lower tpu.slices, or add node pools",
            FIELDS,
        )
    if capacity_mode(target.job.tpu.capacity).scales_from_zero:
        return row(Status.OK, f"{what}: {SCALES_FROM_ZERO}", fields=FIELDS)
    short = f", and {holding} of them hold(s) a slice" if holding != len(sizes) else ""
    return row(
        Status.WARN,
        f"{what}{short}: the workers wait unless node pools autoscale from zero or use queued provisioning",
        f"create TPU node pools of {ask.shape.replace(' ', ' with topology ')}, one per slice with "
        f"{count(ask.vms, 'node')}, or check that autoscaling or queued provisioning covers them",
        FIELDS,
    )


def _shared_pools(row: Row, ask: WorkerAsk, sizes: dict[str, int], nodes: int, notes: str) -> PreflightRow:
    """A slice may span pools (no exclusive topology): the usable nodes of all pools together."""
    needed = ask.slices * ask.vms
    what = (
        f"{_pools(sizes, ask.shape)}{notes} (Ready, schedulable, {ask.chips} {TPU_RESOURCE} free each): "
        f"{count(nodes, 'node')} in all; the job needs {count(needed, 'node')} ({ask.slices} x {ask.vms}), from "
        "any of these pools"
    )
    if nodes >= needed:
        return row(Status.OK, what, fields=FIELDS)
    return row(
        Status.WARN,
        f"{what}: the workers wait for more",
        f"add sub-block node pools of {ask.shape} until {count(needed, 'node')} are Ready",
        FIELDS,
    )


def _pools(sizes: dict[str, int], shape: str) -> str:
    """``1 node pool of 2 x SHAPE nodes``, ``2 node pools of 1 x ...``, ``1 node pool of 4, 2 of 1 x ...``; ``no
    SHAPE nodes``."""
    if not sizes:
        return f"no {shape} nodes"
    by_size: dict[int, int] = {}
    for size in sorted(sizes.values(), reverse=True):
        by_size[size] = by_size.get(size, 0) + 1
    parts = [f"{pools} of {size}" for size, pools in by_size.items()]
    first_pools = next(iter(by_size.values()))
    parts[0] = f"{count(first_pools, 'node pool')} of {next(iter(by_size))}"
    return f"{', '.join(parts)} x {shape} nodes"


CHECK = Check("tpu-capacity", _run, SOURCE)
