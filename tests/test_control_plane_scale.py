"""A 32-slice job of v5p-32 (128 worker pods and the head) on the real control plane, as the namespace-scoped user
runs it: what each command costs the API server, counted by the server (its audit log), held to a budget that does
not grow with the job or with the time a wait takes; and diagnose's counts there. Times are the benchmark's
(benchmarks/bench_scale.py), never asserted here."""

from __future__ import annotations

import json
import secrets
from collections import Counter

import pytest

from pwdeploy import api
from pwdeploy import identifiers as ids
from pwdeploy.cluster import pod_rows
from pwdeploy.cluster.status import status_document
from pwdeploy.kube.seam import LIST_PAGE
from tests.control_plane import ControlPlane
from tests.control_plane.commands import JOB_TESTS
from tests.control_plane.scale import HOSTS, job_flags, pools, run, serve_logs, stand_up, take_down

pytestmark = [*JOB_TESTS[:2], pytest.mark.timeout(900), JOB_TESTS[3]]
SLICES = 32
PODS = 1 + HOSTS * SLICES
CONTAINERS = 3 + HOSTS * SLICES  # the head's main, proxy and resource manager; a worker's pathways-worker


def test_a_32_slice_job_costs_watches_not_lists_and_diagnose_counts_right(
    control_plane: ControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    plane, ns = control_plane, control_plane.user_namespace
    name = f"sc-{secrets.token_hex(3)}"
    try:
        stand_up(plane, pools(SLICES))
        serve_logs(plane, ns, [f"line {i} of every container" for i in range(5)])
        # A grace period of 5 s, not Kubernetes' 30: KWOK ends a deleted pod at the end of it (a program without a
        # SIGTERM handler), and delete --wait's requests, held here, do not depend on how long it waits.
        flags = [*job_flags(name, ns, SLICES), "--termination-grace-seconds", "5"]
        submitted = run(plane, ["pwdeploy", "submit", *flags, "--skip-preflight", "--wait"])
        assert submitted.returncode == 0, submitted.stderr
        # A get (is it there?), the apply, then a list and a watch each of the JobSet and its pods, whatever the
        # number of pods and however long they take to run (each watch lasts 5 to 10 minutes).
        assert submitted.requests == {"get": 1, "patch": 1, "list": 2, "watch": 2}, submitted.requests

        # The running job's pods as the API server prints them (one page of rows), the head and one worker read
        # whole, the resource manager's log: what status shows of it is what it shows reading every pod whole.
        status = run(plane, ["pwdeploy", "status", name, "-n", ns, "-o", "json"])
        assert status.returncode == 0, status.stderr
        assert sum(g["running"] for g in json.loads(status.stdout)["groups"]) == PODS
        assert status.counted() == {("get", "jobsets", ""): 1, ("list", "pods", "first"): 3,
                                    ("get", "pods/log", ""): 1}, status.counted()  # fmt: skip
        monkeypatch.setattr(pod_rows, "ROWS_FROM", 10**9)
        whole = status_document(api.status(api.cluster(plane.user_kubeconfig, namespace=ns), name))
        assert json.loads(status.stdout) == json.loads(json.dumps(whole))

        events_before = len(plane.api.get(f"/api/v1/namespaces/{ns}/events")["items"])
        logs = run(plane, ["pwdeploy", "logs", name, "-n", ns, "--all"])
        assert logs.returncode == 0, logs.stderr
        assert logs.stdout.count("line 4 of every container") == CONTAINERS
        # The JobSet, then a log a container (16 at a time); one list each of the pods (a first page of 32, so
        # that the reads start sooner, then the rest), the Jobs and the namespace's events. The events come
        # LIST_PAGE an answer, as many answers as the namespace holds events (whatever else ran there within the
        # hour events live): counted on the server before and after, the one count here the product does not decide.
        events_after = len(plane.api.get(f"/api/v1/namespaces/{ns}/events")["items"])
        counted = logs.counted()
        pages = {-(-n // LIST_PAGE) or 1 for n in (events_before, events_after)}
        assert counted[("list", "events", "next")] + 1 in pages, (pages, logs.counted())
        del counted[("list", "events", "next")]
        assert counted == {
            ("get", "jobsets", ""): 1,
            ("get", "pods/log", ""): CONTAINERS,
            ("list", "pods", "first"): 1,
            ("list", "pods", "next"): 1,
            ("list", "jobs", "first"): 1,
            ("list", "events", "first"): 1,
        }, logs.counted()

        follow = run(plane, ["pwdeploy", "logs", name, "-n", ns, "--all", "-f"], interrupt_after=6)
        assert follow.returncode == 130 and "instead" not in follow.stderr, follow.stderr  # no poll for want of watch
        counted = follow.counted()
        # one list of each (the discovery's, the JobSet's) and a watch each of the JobSet, its Jobs, its pods and
        # the events, however long it follows; logs past the 16 streams are polled, at most 10 reads a second
        assert Counter({k: n for k, n in counted.items() if k[0] != "get"}) == Counter(
            {
                ("list", "jobsets", "first"): 1,
                ("list", "pods", "first"): 1,
                ("list", "pods", "next"): 1,
                ("list", "jobs", "first"): 1,
                ("list", "events", "first"): 1,
                ("list", "events", "next"): counted[("list", "events", "next")],  # the namespace's, as above
                ("watch", "jobsets", ""): 1,
                ("watch", "jobs", ""): 1,
                ("watch", "pods", ""): 1,
                ("watch", "events", ""): 1,
            }
        ), counted

        worker = plane.pods(ns, f"{ids.JOBSET_NAME_LABEL}%3D{name},{ids.REPLICATED_JOB_LABEL}%3D{ids.WORKER_JOB}")
        bad = sorted(p["metadata"]["name"] for p in worker)[77]
        plane.restart_container(ns, bad, ids.WORKER_CONTAINER, 1)  # one worker crashed, the kubelet restarted it
        diagnosed = run(plane, ["pwdeploy", "diagnose", name, "-n", ns, "-o", "json"])
        assert diagnosed.returncode in (0, 10), diagnosed.stderr
        crash = [f for f in json.loads(diagnosed.stdout)["findings"] if f["cause"] == "crash"]
        assert [f["where"] for f in crash] == [f"1 of {HOSTS * SLICES} worker pods: {bad}"], crash
        assert diagnosed.sent <= 10, diagnosed.requests  # lists of the job's objects and events, a log of each kind

        deleted = run(plane, ["pwdeploy", "delete", name, "-n", ns, "--yes", "--wait"])
        assert deleted.returncode == 0, deleted.stderr
        # is it pwdeploy's, the delete, then a list and a watch each of the JobSet and its pods
        assert deleted.requests == {"get": 1, "delete": 1, "list": 2, "watch": 2}, deleted.requests
    finally:
        take_down(plane, pools(SLICES))
