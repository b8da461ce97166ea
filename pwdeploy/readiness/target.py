"""What every readiness check shares: the target it looks at (the job, its rendered JobSet, the connection, the
node lists), the ``Check`` that pairs a check's name with its function, and the row builder bound to that name,
so a check's name is written once, where the check is declared."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import NamedTuple

from pwdeploy.cluster.jobsets import Object
from pwdeploy.cluster.nodes import Held, NodeLists, held_by_node, list_active_pods
from pwdeploy.config import JobConfig
from pwdeploy.kube.seam import NODES, Action, ApiError, Kube, rbac_hint, reading_answers
from pwdeploy.report import PreflightRow, Status


@dataclass(frozen=True)
class Target:
    """What the checks look at: the job, its rendered JobSet, where it would run and the connection."""

    job: JobConfig
    jobset: Object
    namespace: str
    kube: Kube
    nodes: NodeLists = field(init=False)
    _pods: list[Object | ApiError] = field(init=False, default_factory=list)  # the active pods, read once
    _pods_lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", NodeLists(self.kube))

    def active_pods(self) -> list[Object]:
        """Every pod of the cluster that has not ended, asked once however many checks read it."""
        with self._pods_lock:
            if not self._pods:
                try:
                    self._pods.append({"items": list_active_pods(self.kube)})
                except ApiError as exc:
                    self._pods.append(exc)
        found = self._pods[0]
        if isinstance(found, ApiError):
            raise found
        return list(found["items"])

    @property
    def location(self) -> str:
        return self.kube.context or self.kube.host


@dataclass(frozen=True)
class Row:
    """Builds the rows of one check: its name, its source and the target's location are filled in."""

    target: Target
    check: str
    source: str

    def __call__(
        self, status: Status, detail: str, fix: str | None = None, fields: tuple[str, ...] = ()
    ) -> PreflightRow:
        return PreflightRow(self.check, status, self.target.location, detail, fix, self.source, fields)

    def not_verified(self, exc: ApiError) -> PreflightRow:
        return self(Status.NOT_VERIFIED, exc.message, exc.hint)

    def nodes_forbidden(self, fields: tuple[str, ...]) -> PreflightRow:
        return self(Status.NOT_VERIFIED, "this identity may not list nodes", rbac_hint(Action("list", NODES)), fields)


class Check(NamedTuple):
    """One readiness check: the name its rows carry, what it does, and the public page or code its verdict rests
    on (every row names it)."""

    name: str
    run: Callable[[Target, Row], PreflightRow]
    source: str

    def __call__(self, target: Target) -> PreflightRow:
        row = Row(target, self.name, self.source)
        try:
            with reading_answers(target.kube):  # an answer of the wrong shape is an ApiError, not a crash
                return self.run(target, row)
        except ApiError as exc:
            return row.not_verified(exc)


def nodes_or_none(target: Target, selector: dict[str, str]) -> list[Object] | None:
    """The nodes with every label of ``selector``; None when this identity may not list nodes."""
    try:
        return target.nodes.get(selector)
    except ApiError as exc:
        if exc.status == 403:
            return None
        raise


def held_or_note(target: Target, resources: tuple[str, ...]) -> tuple[dict[str, Held], str]:
    """(node -> what other pods hold there, a note when that could not be read: then nothing is counted as held)."""
    try:
        pods = target.active_pods()
    except ApiError as exc:
        if exc.status != 403:
            raise
        return {}, "; what other pods hold is not counted (this identity may not list pods in all namespaces)"
    return held_by_node(pods, resources, besides_jobset=str(target.jobset["metadata"]["name"])), ""


def count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def cpu_text(value: Decimal) -> str:
    return f"{value.normalize():f}"


def memory_text(value: Decimal) -> str:
    return f"{(value / 2**30).quantize(Decimal('0.1')).normalize():f}Gi"
