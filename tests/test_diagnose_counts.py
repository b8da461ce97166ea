"""diagnose's counts on a 256-slice job of v5p-32 (1,024 worker pods): the one bad pod among them is named and
counted as one, and when all fail alike the finding counts all of them, though diagnose read one log of that kind.
The rules run on a snapshot as diagnose reads it (on the real control plane: tests/test_control_plane_scale.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pwdeploy import identifiers as ids
from pwdeploy.cluster.diagnose import from_snapshot
from pwdeploy.cluster.diagnose.containers import wanted_logs
from pwdeploy.cluster.diagnose.read import LogTail, Snapshot
from tests.kube_objects import rendered_jobset

NAME, SLICES, HOSTS = "big", 256, 4
NOW = datetime(2026, 1, 1, tzinfo=UTC)
MISSING = "E1101 04:50:42.1 1 gcs_cache.cc:88] Permanent error: The specified bucket does not exist."


def worker(index: int, host: int, exit_code: int | None) -> dict[str, Any]:
    state: dict[str, Any] = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    if exit_code is not None:
        state = {"terminated": {"exitCode": exit_code, "reason": "Error"}}
    labels = {
        ids.JOBSET_NAME_LABEL: NAME,
        ids.REPLICATED_JOB_LABEL: ids.WORKER_JOB,
        ids.JOB_INDEX_LABEL: str(index),
        ids.COMPLETION_INDEX_LABEL: str(host),
    }
    statuses = [{"name": ids.WORKER_CONTAINER, "state": state, "restartCount": 0}]
    return {
        "metadata": {"name": f"{NAME}-worker-{index}-{host}-abcde", "labels": labels},
        "spec": {"containers": [{"name": ids.WORKER_CONTAINER}]},
        "status": {"phase": "Failed" if exit_code else "Running", "containerStatuses": statuses},
    }


def snapshot(failed: set[tuple[int, int]]) -> Snapshot:
    pods = [worker(i, h, 1 if (i, h) in failed else None) for i in range(SLICES) for h in range(HOSTS)]
    return Snapshot(NAME, "default", rendered_jobset(NAME, tpu_type="v5p-32", slices=SLICES), pods, [], NOW, [])


def test_the_one_bad_pod_among_1024_is_named_and_counted_as_one() -> None:
    snap = snapshot({(137, 2)})
    assert wanted_logs(snap)[0] == (f"{NAME}-worker-137-2-abcde", ids.WORKER_CONTAINER, False)
    snap.logs = [LogTail(f"{NAME}-worker-137-2-abcde", ids.WORKER_CONTAINER, False, ["Traceback", "ValueError: x"])]
    (crash,) = [f for f in from_snapshot(snap).findings if f.id == "crash"]
    assert crash.where == f"1 of 1,024 worker pods: {NAME}-worker-137-2-abcde", crash.where


def test_all_1024_failing_alike_count_all_though_one_log_was_read() -> None:
    snap = snapshot({(i, h) for i in range(SLICES) for h in range(HOSTS)})
    wanted = wanted_logs(snap)
    assert len(wanted) == 1  # one log stands for its kind
    snap.logs = [LogTail(wanted[0][0], ids.WORKER_CONTAINER, False, [MISSING])]
    (found,) = from_snapshot(snap).findings
    assert found.id == "scratch-bucket-missing" and found.count == 1024
    assert (
        found.where.startswith("1,024 of 1,024 worker pods: big-worker-0-0-abcde, ") and "(+1,021 more)" in found.where
    )
    assert f"(the log of {wanted[0][0]}; 1,023 more ended alike, their logs not read)" in found.message


def test_a_log_of_a_running_container_stands_for_itself_only() -> None:
    snap = snapshot(set())
    snap.logs = [LogTail(f"{NAME}-worker-3-1-abcde", ids.WORKER_CONTAINER, False, ["Megascale detects a hang"])]
    (found,) = from_snapshot(snap).findings
    assert found.count == 1 and found.where == f"1 of 1,024 worker pods: {NAME}-worker-3-1-abcde"
