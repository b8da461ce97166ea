"""diagnose on what multi-tier checkpointing and Kueue 0.20's waits for pods look like: the fixtures' findings say
which wait ran out, and what the MTC driver's failures need."""

from __future__ import annotations

import json
from typing import Any

from tests.conftest import ClusterCli
from tests.diagnose_cases import load, serve
from tests.kube_stub import StubKubeApiServer


def findings(stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str], case: str) -> list[dict[str, Any]]:
    serve(stub, load(case))
    result = cluster_cli(["diagnose", "dp-example", *kc, "-o", "json"])
    found: list[dict[str, Any]] = json.loads(result.stdout)["findings"]
    return found


def test_a_pods_ready_timeout_says_which_wait_ran_out_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    (timeout, *_) = findings(stub, cluster_cli, kc, "pods-ready-timeout-unscheduled")
    assert "PodsReady=False reason WaitForScheduling" in timeout["evidence"]
    assert "waitForPodsReady.unscheduledTimeout" in timeout["fix"]
    (plain, *_) = findings(stub, cluster_cli, kc, "pods-ready-timeout")
    assert "WaitFor" not in plain["evidence"] and "waitForPodsReady.timeout" in plain["fix"]


def test_an_mtc_volume_no_node_can_mount_names_the_machine_types_configuration_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    (volume, *_) = findings(stub, cluster_cli, kc, "mtc-volume")
    assert volume["cause"] == "mtc-volume" and "not found in the list of registered CSI drivers" in volume["evidence"]
    assert "CheckpointConfiguration" in volume["fix"] and "docs/checkpoints.md" in volume["fix"]


def test_a_refusing_driver_is_not_a_node_service_account_problem_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    causes = [f["cause"] for f in findings(stub, cluster_cli, kc, "mtc-replicator-failed")]
    assert causes[0] == "mtc-replicator-failed" and "gcs-permission" not in causes
