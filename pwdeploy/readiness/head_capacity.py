"""``head-capacity``: Ready, schedulable nodes matching the rendered head pod's nodeSelector whose allocatable
cpu and memory, less what other pods request there, hold the pod's requests, with none of its host ports taken
(the head uses hostNetwork: another job's head on the node holds them)."""

from __future__ import annotations

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


def _run(target: Target, row: Row) -> PreflightRow:
    spec = rendered_head_pod(target.jobset)
    selector = node_selector(spec)
    where = ",".join(f"{k}={v}" for k, v in selector.items())
    need = pod_requests(spec)
    asks = f"{cpu_text(need['cpu'])} CPU and {memory_text(need['memory'])} memory"
    matching = nodes_or_none(target, selector)
    if matching is None:
        return row.nodes_forbidden(FIELDS)
    nodes = [n for n in matching if schedulable(n)]
    down = len(matching) - len(nodes)
    besides = f" ({down} more NotReady or cordoned)" if down else ""
    if not nodes and down:
        return row(
            Status.WARN,
            f"none of the {down} node(s) with {where} is Ready and schedulable (NotReady or cordoned): the head "
            "waits until one is, or the node pool adds one",
            f"kubectl get nodes -l {where}; uncordon them (kubectl uncordon NODE) or repair the node pool",
            FIELDS,
        )
    if not nodes:
        return row(
            Status.WARN,
            f"no node matches the head pod's nodeSelector {where}: the head waits unless that node pool "
            "autoscales from zero",
            f"create a CPU node pool {target.job.head.node_pool} whose machines allocate at least {asks}, "
            "or set head.node_pool (--head-node-pool)",
            FIELDS,
        )
    big = [n for n in nodes if all(allocatable(n, r) >= need[r] for r in ("cpu", "memory"))]
    held, unread = held_or_note(target, ("cpu", "memory")) if big else ({}, "")
    ports = host_ports(spec)
    fit = [n for n in big if all(free(n, r, held) >= need[r] for r in ("cpu", "memory"))]
    open_ports = [n for n in fit if not port_conflicts(n, ports, held)]
    if open_ports:
        taken = len(big) - len(open_ports)
        others = f"; {taken} more held by other pods (requests or host ports)" if taken else ""
        return row(
            Status.OK,
            f"{len(open_ports)} of {len(nodes)} Ready node(s) with {where} have the head pod's {asks} free"
            f"{others}{besides}{unread}",
            None,
            FIELDS,
        )
    if big:
        clash = sorted({p for n in big for p in port_conflicts(n, ports, held)})
        reasons = [f"other pods hold the head's host ports {', '.join(map(str, clash))} (another job's head)"] * bool(
            clash
        )
        reasons += ["other pods' requests leave too little cpu or memory free"] * (len(fit) < len(big))
        why = " and ".join(reasons)
        return row(
            Status.WARN,
            f"{len(big)} Ready node(s) with {where} allocate the head pod's {asks}, but {why}: the head waits "
            f"until they end{besides}",
            "wait for the other job (kubectl get pods -A -o wide --field-selector spec.nodeName=NODE shows who "
            "holds a node), or add a node to that node pool",
            FIELDS,
        )
    most_cpu = max(allocatable(n, "cpu") for n in nodes)
    most_memory = max(allocatable(n, "memory") for n in nodes)
    return row(
        Status.FAILED,
        f"the head pod requests {asks}; the {len(nodes)} Ready node(s) with {where} allocate at most "
        f"{cpu_text(most_cpu)} CPU and {memory_text(most_memory)} memory{besides}",
        "use a larger machine type for that node pool, or lower main.cpu/main.memory, head.proxy_cpu/proxy_memory "
        "and head.rm_cpu/rm_memory",
        FIELDS,
    )


CHECK = Check("head-capacity", _run, SOURCE)
