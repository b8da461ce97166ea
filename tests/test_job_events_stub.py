"""The events of a job for `status` and `diagnose` (pwdeploy.cluster.job_events), against StubKubeApiServer (a
loopback stub, not an API server): read by the uids of the job's objects in trouble, a bounded number of lists
whatever the job's size and the namespace's events, and an events list that cannot be read is a note."""

from __future__ import annotations

import re
from typing import Any

from pwdeploy.cluster.diagnose import diagnose
from pwdeploy.cluster.job_events import MAX_OBJECTS
from tests.conftest import ClusterCli
from tests.diagnose_cases import load, serve
from tests.kube_stub import Injected, StubKubeApiServer


def event_lists(stub: StubKubeApiServer, since: int) -> list[str]:
    return [r.q("fieldSelector") or "" for r in stub.requests[since:] if r.path.endswith("/events")]


def test_the_events_of_a_big_job_cost_a_bounded_number_of_lists_whatever_the_namespace_holds(
    stub: StubKubeApiServer, kube: Any
) -> None:
    """Every worker pod unscheduled, at 32 and at 64 slices, in a namespace that holds 2,000 other events: the same
    number of event lists, each one object's by its uid; the finding still counts every pod (the scheduler's
    message is in each pod's own condition), and a note says how many objects' events were read."""
    for n in range(2000):
        stub.put("events", {"metadata": {"name": f"other.{n}"}, "type": "Warning", "reason": "FailedScheduling",
                            "involvedObject": {"kind": "Pod", "name": f"other-{n}", "uid": f"other-{n}"}})  # fmt: skip
    lists = []
    for slices, job in ((32, "some"), (64, "many")):
        serve(stub, load("tpu-capacity"), job=job, slices=slices)
        before = len(stub.requests)
        found = diagnose(kube, "default", job)
        sent = event_lists(stub, before)
        assert all(re.fullmatch(r"involvedObject\.uid=[-0-9a-f]+", s) for s in sent), sent
        lists.append(len(sent))
        (finding,) = [f for f in found.findings if f.id == "tpu-capacity"]
        assert finding.where.startswith(f"{slices} of {slices} worker pods: "), finding.where
        (note,) = found.notes
        assert f"the events of {MAX_OBJECTS} of the {slices + 1} objects that may have some were read" in note
    assert lists == [MAX_OBJECTS, MAX_OBJECTS]


def test_a_job_in_trouble_in_few_places_reads_only_those(stub: StubKubeApiServer, kube: Any) -> None:
    """A healthy job: the JobSet's events only; one pod that cannot pull its image: that pod's too."""
    serve(stub, load("healthy-running"))
    before = len(stub.requests)
    assert diagnose(kube, "default", "dp-example").notes == ()
    jobset = stub.get("jobsets", "default", "dp-example")
    assert jobset is not None
    assert event_lists(stub, before) == [f"involvedObject.uid={jobset['metadata']['uid']}"]


def test_throttled_events_are_a_note_and_the_rest_of_the_answer_stands(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    """API Priority and Fairness answers the events lists 429 every time: status and diagnose still answer (not
    exit 4) with what the pods show, and a note says the events could not be read."""
    import json

    serve(stub, load("tpu-capacity"))
    stub.injected.append(Injected("GET", re.compile(r"/events$"), 429, times=10_000, headers={"Retry-After": "0"}))
    shown = cluster_cli(["status", "dp-example", *kc])
    assert shown.exit_code == 0, shown.output
    assert "note: the job's events could not be read (throttled by the API server (429 after the retries)" in (
        shown.stdout
    ), shown.stdout
    assert "2 of 2 worker pods: dp-example-worker-0-0-x7k2p, dp-example-worker-1-0-x7k2p: error tpu-capacity: " in (
        shown.stdout
    ), shown.stdout
    diagnosed = cluster_cli(["diagnose", "dp-example", *kc, "-o", "json"])
    assert diagnosed.exit_code == 10, diagnosed.output  # the error finding, not a failed command
    report = json.loads(diagnosed.stdout)
    assert [f["cause"] for f in report["findings"]] == ["tpu-capacity"]
    assert any("429 after the retries" in note for note in report["notes"]), report["notes"]
