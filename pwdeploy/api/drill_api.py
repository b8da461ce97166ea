"""A drill: one real fault injected into a running job, followed to its recovery and reported beside the
prediction of its failure policy (``drill``, `pwdeploy drill`; docs/drill.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pwdeploy.api.cluster_api import check_name, given_cluster
from pwdeploy.api.job_api import say_to

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TextIO

    from pwdeploy.api.cluster_api import Cluster
    from pwdeploy.drill.conduct import Drilled, DrillOptions


def drill(
    cluster: Cluster,
    name: str,
    options: DrillOptions,
    *,
    confirm: Callable[[str], bool] | None = None,
    progress: TextIO | None = None,
) -> Drilled:
    """Inject the fault ``options`` name (``lose_slice``, ``kill_worker`` with ``exit_code``, or ``evict_head``)
    into the running job once its moment comes (``after`` seconds, main's step ``after_step``, or now), follow
    the job until it recovers or ends (at most ``options.timeout`` seconds) and return the ``Drilled``: the
    fault, its plan and prediction, the ``report`` (docs/drill.md; None when nothing was injected: a
    ``dry_run``, or a stop before the moment) and how it ``stopped``. ``confirm`` is asked before the injection
    (default: not asked); ``progress`` hears the plan and what the controllers do. A fault the job cannot take,
    or a fatal one without ``allow_fatal``, is an ``ArgumentError``; a job that does not run is a
    ``ClusterError``. The fault is never undone."""
    from pwdeploy.arguments import a_kind
    from pwdeploy.drill.conduct import DrillOptions, run_drill
    from pwdeploy.errors import ArgumentError
    from pwdeploy.kube.seam import reading_answers

    check_name(name)
    kube, namespace = given_cluster(cluster)
    if not isinstance(options, DrillOptions):
        raise ArgumentError("options", f"must be a DrillOptions, not {a_kind(options)}")
    with reading_answers(kube):
        return run_drill(kube, namespace, name, options, say=say_to(progress), confirm=confirm or _yes)


def _yes(_question: str) -> bool:
    return True
