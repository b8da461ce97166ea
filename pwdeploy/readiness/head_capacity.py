"""``head-capacity``: Ready, schedulable nodes matching the rendered head pod's nodeSelector whose allocatable
cpu and memory, less what other pods request there, hold the pod's requests, with none of its host ports taken
(the head uses hostNetwork: another job's head on the node holds them)."""

from __future__ import annotations

from decimal import Decimal
from typing import NamedTuple

from pwdeploy.cluster.jobsets import Object
from pwdeploy.cluster.nodes import (
    allocatable,
    free,
    host_ports,
    node_selector,
    pod_requests,
    port_conflicts,
    rendered_head_pod,
    schedulable,
)
from pwdeploy.readiness.target import Check, Row, Target, cpu_text, held_or_note, memory_text, nodes_or_none
from pwdeploy.report import PreflightRow, Status

# What this check's verdict rests on (its rows' ``source``).
SOURCE = "kubernetes/kubernetes: pkg/scheduler/framework/plugins (nodeports, noderesources/fit.go)"

FIELDS = ("head.node_pool",)
RESOURCES = ("cpu", "memory")


class Asked(NamedTuple):
    """What the head pod asks of a node, and the Ready, schedulable nodes its nodeSelector matches."""

    where: str  # the nodeSelector, as label=value pairs
    need: dict[str, Decimal]  # its requests
    asks: str  # them, as said
    nodes: list[Object]  # Ready and schedulable
    down: int  # matching nodes NotReady or cordoned

    @property
    def besides(self) -> str:
        return f" ({self.down} more NotReady or cordoned)" if self.down else ""


def _run(target: Target, row: Row) -> PreflightRow:
    spec = rendered_head_pod(target.jobset)
    selector = node_selector(spec)
    matching = nodes_or_none(target, selector)
    if matching is None:
        return row.nodes_forbidden(FIELDS)
    need = pod_requests(spec)
    nodes = [n for n in matching if schedulable(n)]
    asked = Asked(
        ",".join(f"{k}={v}" for k, v in selector.items()),
        need,
        f"{cpu_text(need['cpu'])} CPU and {memory_text(need['memory'])} memory",
        nodes,
        len(matching) - len(nodes),
    )
    if not nodes:
        return _none_usable(target, row, asked)
    big = [n for n in nodes if all(allocatable(n, r) >= need[r] for r in RESOURCES)]
    if not big:
        return _too_small(row, asked)
    return _free_or_held(target, row, asked, big, host_ports(spec))


def _none_usable(target: Target, row: Row, asked: Asked) -> PreflightRow:
    """No Ready, schedulable node: the matching ones are down, or none matches."""
    if asked.down:
        return row(
            Status.WARN,
            f"none of the {asked.down} node(s) with {asked.where} is Ready and schedulable (NotReady or cordoned): "
            "the head waits until one is, or the node pool adds one",
            f"kubectl get nodes -l {asked.where}; uncordon them (kubectl uncordon NODE) or repair the node pool",
            FIELDS,
        )
    return row(
        Status.WARN,
        f"no node matches the head pod's nodeSelector {asked.where}: the head waits unless that node pool "
        "autoscales from zero",
        f"create a CPU node pool {target.job.head.node_pool} whose machines allocate at least {asked.asks}, "
        "or set head.node_pool (--head-node-pool)",
        FIELDS,
    )


def _free_or_held(
    target: Target, row: Row, asked: Asked, big: list[Object], ports: frozenset[tuple[int, str]]
) -> PreflightRow:
    """Nodes large enough: ok when one has the requests and the host ports free; else who holds them."""
    held, unread = held_or_note(target, RESOURCES)
    fit = [n for n in big if all(free(n, r, held) >= asked.need[r] for r in RESOURCES)]
    open_ports = [n for n in fit if not port_conflicts(n, ports, held)]
    if open_ports:
        taken = len(big) - len(open_ports)
        others = f"; {taken} more held by other pods (requests or host ports)" if taken else ""
        return row(
            Status.OK,
            f"{len(open_ports)} of {len(asked.nodes)} Ready node(s) with {asked.where} have the head pod's "
            f"{asked.asks} free{others}{asked.besides}{unread}",
            None,
            FIELDS,
        )
    clash = sorted({p for n in big for p in port_conflicts(n, ports, held)})
    reasons = [f"other pods hold the head's host ports {', '.join(map(str, clash))} (another job's head)"] * bool(clash)
    reasons += ["other pods' requests leave too little cpu or memory free"] * (len(fit) < len(big))
    return row(
        Status.WARN,
        f"{len(big)} Ready node(s) with {asked.where} allocate the head pod's {asked.asks}, but "
        f"{' and '.join(reasons)}: the head waits until they end{asked.besides}",
        "wait for the other job (kubectl get pods -A -o wide --field-selector spec.nodeName=NODE shows who "
        "holds a node), or add a node to that node pool",
        FIELDS,
    )


def _too_small(row: Row, asked: Asked) -> PreflightRow:
    most_cpu = max(allocatable(n, "cpu") for n in asked.nodes)
    most_memory = max(allocatable(n, "memory") for n in asked.nodes)
    return row(
        Status.FAILED,
        f"the head pod requests {asked.asks}; the {len(asked.nodes)} Ready node(s) with {asked.where} allocate at "
        f"most {cpu_text(most_cpu)} CPU and {memory_text(most_memory)} memory{asked.besides}",
        "use a larger machine type for that node pool, or lower main.cpu/main.memory, head.proxy_cpu/proxy_memory "
        "and head.rm_cpu/rm_memory",
        FIELDS,
    )


CHECK = Check("head-capacity", _run, SOURCE)
