"""TPU pods: a pod that selects a TPU slice's nodes requests every chip of its VM.

GKE places one TPU pod per VM of a slice, and the slice's topology (the node label) is what the TPU runtime
initialises: a pod that asks for fewer chips than its VM has (``google.com/tpu: 3`` on a 4-chip VM) either never
starts the runtime or never schedules (more than the VM has). Chips per VM come from pwdeploy.catalog.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pwdeploy import catalog
from pwdeploy.errors import ConfigError
from pwdeploy.identifiers import TPU_ACCELERATOR_LABEL, TPU_RESOURCE, TPU_TOPOLOGY_LABEL
from pwdeploy.validation.container_rules import quantity
from pwdeploy.validation.problems import Problem, items, mapping

_FAMILY_OF_ACCELERATOR = {family.accelerator: family.name for family in catalog.FAMILIES.values()}


def tpu_request_problems(pod: Mapping[str, Any], path: str) -> list[Problem]:
    """A problem for each container whose ``google.com/tpu`` is not the chips of the VM the pod selects; nothing
    for a pod that selects no known TPU slice."""
    selector = mapping(pod.get("nodeSelector"))
    family = _FAMILY_OF_ACCELERATOR.get(str(selector.get(TPU_ACCELERATOR_LABEL)))
    topology = selector.get(TPU_TOPOLOGY_LABEL)
    if family is None or not isinstance(topology, str):
        return []
    try:
        tpu_slice = catalog.from_topology(family, topology)
    except ConfigError:
        return []  # a topology pwdeploy does not know: nothing to compare with
    problems = []
    for index, container in items(pod.get("containers")):
        limits = mapping(mapping(container.get("resources")).get("limits"))
        chips = quantity(limits.get(TPU_RESOURCE)) if TPU_RESOURCE in limits else None
        whole = chips is not None and chips % 1 == 0  # a fraction is the resource rules' problem
        if whole and chips != tpu_slice.chips_per_vm:
            problems.append(
                Problem(
                    f"{path}.containers[{index}].resources.limits[{TPU_RESOURCE}]",
                    f"{limits[TPU_RESOURCE]!r} chips, but the VMs of a {family} {topology} slice have "
                    f"{tpu_slice.chips_per_vm} chips each and a TPU pod takes every chip of its VM: request "
                    f"{tpu_slice.chips_per_vm}",
                )
            )
    return problems
