"""preflight's capacity rows count what other pods hold on the nodes (their requests and host ports), against
StubKubeApiServer (a loopback stub, not an API server) holding the pods another pwdeploy job runs."""

from __future__ import annotations

from typing import Any

from pwdeploy import identifiers as ids
from pwdeploy.report import Status
from tests.kube_objects import rendered_jobset, small_job
from tests.kube_stub import StubKubeApiServer
from tests.test_readiness_stub import ready, rows


def other_jobs_pods(stub: StubKubeApiServer, *, job: str = "other", phase: str = "Running") -> None:
    """Another job's head on cpu-0 and its workers on tpu-0 and tpu-1 (namespace team), as the scheduler bound
    them: the rendered pod specs, hostNetwork and all."""
    jobset = rendered_jobset(job, "team")
    for rj in jobset["spec"]["replicatedJobs"]:
        spec = rj["template"]["spec"]["template"]["spec"]
        nodes = ["cpu-0"] if rj["name"] == ids.HEAD_JOB else ["tpu-0", "tpu-1"]
        for index, node_name in enumerate(nodes):
            pod: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{job}-{rj['name']}-{index}-0-abcde",
                    "namespace": "team",
                    "labels": {ids.JOBSET_NAME_LABEL: job, ids.REPLICATED_JOB_LABEL: rj["name"]},
                },
                "spec": {**spec, "nodeName": node_name},
                "status": {"phase": phase},
            }
            stub.put("pods", pod)


def test_nodes_another_job_holds_are_not_free_for_this_one_against_the_stub(stub: StubKubeApiServer, kube: Any) -> None:
    other_jobs_pods(ready(stub))
    found = rows(small_job(), kube)
    tpu, head = found["tpu-capacity"], found["head-capacity"]
    assert tpu.status is Status.WARN and "2 more held by other pods" in tpu.message
    assert "other pods hold the TPU nodes now" in tpu.message and "spec.nodeName=NODE" in (tpu.fix or "")
    assert head.status is Status.WARN and "other pods hold the head's host ports" in head.message
    assert "29000" in head.message  # the proxy's port, which both heads listen on with hostNetwork


def test_pods_that_ended_and_this_jobs_own_pods_hold_nothing_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    other_jobs_pods(ready(stub), phase="Succeeded")
    other_jobs_pods(stub, job="dp-example")  # the job itself, submitted before: a resubmit replaces its pods
    found = rows(small_job(), kube)
    assert found["tpu-capacity"].status is Status.OK and "held by other pods" not in found["tpu-capacity"].message
    assert found["head-capacity"].status is Status.OK, found["head-capacity"].message


def test_without_leave_to_list_pods_the_rows_say_what_they_did_not_count_against_the_stub(
    stub: StubKubeApiServer, kube: Any
) -> None:
    other_jobs_pods(ready(stub))
    stub.forbid("list", "pods")
    found = rows(small_job(), kube)
    for check in ("tpu-capacity", "head-capacity"):
        assert found[check].status is Status.OK
        assert "what other pods hold is not counted" in found[check].message
