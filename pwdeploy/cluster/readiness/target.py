"""What every readiness check shares: the target it looks at (the job, its rendered JobSet, the connection, the
node lists), the ``Check`` that pairs a check's name with its function, and the row builder bound to that name,
so a check's name is written once, where the check is declared."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import NamedTuple

from pwdeploy.cluster.jobsets import Object
from pwdeploy.cluster.nodes import NodeLists
from pwdeploy.config import JobConfig
from pwdeploy.kube.api import NODES, Action, ApiError, Kube, rbac_hint, reading_answers
from pwdeploy.report import CheckResult, Status


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


@dataclass(frozen=True)
class Row:
    """Builds the rows of one check: its name and the target's location are filled in."""

    target: Target
    check: str

    def __call__(
        self, status: Status, detail: str, fix: str | None = None, fields: tuple[str, ...] = ()
    ) -> CheckResult:
        return CheckResult(self.target.location, fields, self.check, status, detail, fix)

    def not_verified(self, exc: ApiError) -> CheckResult:
        return self(Status.NOT_VERIFIED, exc.message, exc.hint)

    def nodes_forbidden(self, fields: tuple[str, ...]) -> CheckResult:
        return self(Status.NOT_VERIFIED, "this identity may not list nodes", rbac_hint(Action("list", NODES)), fields)


class Check(NamedTuple):
    """One readiness check: the name its rows carry, and what it does."""

    name: str
    run: Callable[[Target, Row], CheckResult]

    def __call__(self, target: Target) -> CheckResult:
        row = Row(target, self.name)
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


def count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def cpu_text(value: Decimal) -> str:
    return f"{value.normalize():f}"


def memory_text(value: Decimal) -> str:
    return f"{(value / 2**30).quantize(Decimal('0.1')).normalize():f}Gi"
