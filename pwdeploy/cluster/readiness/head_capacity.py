"""``head-capacity``: Ready, schedulable nodes matching the rendered head pod's nodeSelector whose allocatable
cpu and memory hold the pod's requests."""

from __future__ import annotations

from pwdeploy.cluster.nodes import allocatable, node_selector, pod_requests, rendered_head_pod, schedulable
from pwdeploy.cluster.readiness.target import Check, Row, Target, cpu_text, memory_text, nodes_or_none
from pwdeploy.report import CheckResult, Status

FIELDS = ("head.node_pool",)


def _run(target: Target, row: Row) -> CheckResult:
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
    fit = [n for n in nodes if all(allocatable(n, r) >= need[r] for r in ("cpu", "memory"))]
    if fit:
        return row(
            Status.OK,
            f"{len(fit)} of {len(nodes)} Ready node(s) with {where} allocate the head pod's {asks}{besides}",
            None,
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


CHECK = Check("head-capacity", _run)
