"""preflight's mtc-version row against StubKubeApiServer (a loopback stub, not an API server), which can answer
what the real control plane of the tests cannot: a GKE control plane's version (tests/test_control_plane_mtc.py has
the rows the real one can hold). Versions as GKE's API server gives them (gitVersion ``v1.32.4-gke.1415000``)."""

from __future__ import annotations

import pytest

from pwdeploy.kube.seam import Kube
from pwdeploy.readiness import check_cluster
from pwdeploy.readiness.mtc_version import gke_version
from pwdeploy.report import Status
from tests.kube_objects import small_job
from tests.kube_stub import StubKubeApiServer

MTC = {"mtc.enabled": True, "sidecar.image": "us-docker.pkg.dev/p/r/sidecar:1"}


@pytest.mark.parametrize(
    ("git_version", "status"),
    [
        ("v1.32.4-gke.1415000", Status.OK),
        ("v1.33.1-gke.1107000", Status.OK),
        ("v1.32.4-gke.1414999", Status.FAILED),
        ("v1.32.3-gke.1785000", Status.FAILED),
        ("v1.31.4-gke.1256000", Status.FAILED),
        ("v1.35.4", Status.WARN),  # not GKE
    ],
)
def test_the_gke_version_row_against_the_stub(
    stub: StubKubeApiServer, kube: Kube, git_version: str, status: Status
) -> None:
    stub.version = {"major": "1", "minor": git_version.split(".")[1] + "+", "gitVersion": git_version}
    rows = {r.id: r for r in check_cluster(small_job(MTC), kube)}
    assert rows["mtc-version"].status is status, rows["mtc-version"]
    assert "Autopilot" in rows["mtc-version"].message


def test_without_mtc_there_are_no_mtc_rows_against_the_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    assert not [r for r in check_cluster(small_job(), kube) if r.id.startswith("mtc-")]


def test_gke_versions_parse() -> None:
    assert gke_version("v1.32.4-gke.1415000") == (1, 32, 4, 1415000)
    assert gke_version("v1.35.4") is None
