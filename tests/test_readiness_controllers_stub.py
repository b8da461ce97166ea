"""preflight's controllers row: the installed JobSet and Kueue versions (their Deployments' image tags), the known
defects of those versions (a table with sources), and Kueue's WaitForPodsReady against the job's likely start,
against StubKubeApiServer (a loopback stub, not an API server)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from pwdeploy.readiness.controllers import DEFECTS, duration_s
from pwdeploy.report import Status
from tests.kube_objects import small_job
from tests.kube_stub import StubKubeApiServer
from tests.test_readiness_stub import controller_deployment, ready, rows

QUEUED_JOB = {"scheduling.queue": "tpu"}


def kueue(stub: StubKubeApiServer, version: str, wait_for_pods_ready: dict[str, Any] | None = None) -> None:
    stub.put("deployments", controller_deployment("kueue-system", "kueue", version))
    config: dict[str, Any] = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration"}
    if wait_for_pods_ready is not None:
        config["waitForPodsReady"] = wait_for_pods_ready
    stub.put(
        "configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
            "data": {"controller_manager_config.yaml": yaml.safe_dump(config)},
        },
    )


def test_the_jobset_release_is_named_with_its_known_defect_for_a_multi_host_job_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    ready(stub)
    single = rows(small_job(), kube)["controllers"]  # v5p-8: one VM per slice, no follower pods to refuse
    assert single.status is Status.OK and single.message == "JobSet v0.12.0: no known defect that touches this job"
    row = rows(small_job({"tpu.type": "v5p-16"}), kube)["controllers"]  # 2 VMs per slice
    assert row.status is Status.WARN
    assert row.message.startswith("JobSet v0.12.0: its pod webhook refuses") and "jobset#1276" in row.message
    assert "after v0.12.0" in (row.fix or "")


def test_kueue_0_19_evicts_a_flex_start_job_before_it_likely_starts_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    kueue(ready(stub), "v0.19.1")
    row = rows(small_job({**QUEUED_JOB, "tpu.capacity": "flex-start"}), kube)["controllers"]
    assert row.status is Status.WARN
    assert (
        "WaitForPodsReady is on by default since Kueue v0.19.0: timeout 30 min, recoveryTimeout 30 min" in row.message
    )
    assert "likely needs 60 min or more" in row.message and "PodsReadyTimeout" in row.message
    assert "waitForPodsReady.timeout and recoveryTimeout" in (row.fix or "")


def test_kueue_0_19_with_on_demand_capacity_is_only_said_against_the_stub(stub: StubKubeApiServer, kube: Any) -> None:
    kueue(ready(stub), "v0.19.1")
    row = rows(small_job(QUEUED_JOB), kube)["controllers"]
    assert "Kueue v0.19.1: no known defect" in row.message and "timeout 30 min" in row.message
    assert "PodsReadyTimeout" not in row.message


def test_a_short_configured_timeout_is_a_warning_and_an_old_kueue_is_off_by_default_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    kueue(ready(stub), "v0.18.2", {"enable": True, "timeout": "5m"})
    row = rows(small_job(QUEUED_JOB), kube)["controllers"]
    assert "WaitForPodsReady is configured: timeout 5 min, recoveryTimeout 5 min" in row.message
    assert "likely needs 10 min or more" in row.message
    kueue(stub, "v0.18.2")  # not configured: off before v0.19.0
    assert "Kueue's WaitForPodsReady is off" in rows(small_job(QUEUED_JOB), kube)["controllers"].message


def test_an_old_kueue_names_its_defect_and_its_fixed_releases_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    kueue(ready(stub), "v0.16.3")
    row = rows(small_job(QUEUED_JOB), kube)["controllers"]
    assert "Kueue v0.16.3: a JobSet deleted with foreground propagation" in row.message
    assert "#10855" in row.message and "v0.16.8" in (row.fix or "")


def test_versions_that_cannot_be_read_are_said_not_guessed_against_the_stub(stub: StubKubeApiServer, kube: Any) -> None:
    ready(stub).forbid("get", "deployments")
    row = rows(small_job(), kube)["controllers"]
    assert row.status is Status.NOT_VERIFIED
    assert (
        "JobSet version not read (this identity may not read deployment jobset-system/jobset-controller-manager)"
        in (row.message)
    )


@pytest.mark.parametrize(
    ("version", "affected"),
    [
        ((0, 16, 7), True),
        ((0, 16, 8), False),
        ((0, 17, 1), True),
        ((0, 17, 2), False),
        ((0, 18, 0), False),
        ((0, 15, 9), False),
        ((0, 19, 1), False),
    ],
)
def test_a_defect_affects_the_releases_before_each_minor_lines_fix(
    version: tuple[int, int, int], affected: bool
) -> None:
    (foreground,) = [d for d in DEFECTS if "#10855" in d.source]
    assert foreground.affects(version) is affected


def test_go_durations() -> None:
    assert [duration_s(v) for v in ("30m", "1h30m", "90s", "", "soon", None)] == [1800, 5400, 90, None, None, None]
