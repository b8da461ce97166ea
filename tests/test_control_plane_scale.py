"""A 32-slice job of v5p-32 (128 worker pods and the head) on the real control plane, as the namespace-scoped user
runs it: what each command costs the API server, counted by the server (its audit log), held to a budget that does
not grow with the job or with the time a wait takes; and diagnose's counts there. Times are the benchmark's
(benchmarks/bench_scale.py), never asserted here."""

from __future__ import annotations

import json
import secrets

import pytest

from pwdeploy import identifiers as ids
from tests.control_plane import ControlPlane
from tests.control_plane.commands import JOB_TESTS
from tests.control_plane.scale import HOSTS, job_flags, pools, run, serve_logs, stand_up, take_down

pytestmark = [*JOB_TESTS[:2], pytest.mark.timeout(900), JOB_TESTS[3]]
SLICES = 32
PODS = 1 + HOSTS * SLICES
CONTAINERS = 3 + HOSTS * SLICES  # the head's main, proxy and resource manager; a worker's pathways-worker


def test_a_32_slice_job_costs_watches_not_lists_and_diagnose_counts_right(control_plane: ControlPlane) -> None:
    plane, ns = control_plane, control_plane.user_namespace
    name = f"sc-{secrets.token_hex(3)}"
    try:
        stand_up(plane, pools(SLICES))
        serve_logs(plane, ns, [f"line {i} of every container" for i in range(5)])
        submitted = run(plane, ["pwdeploy", "submit", *job_flags(name, ns, SLICES), "--skip-preflight", "--wait"])
        assert submitted.returncode == 0, submitted.stderr
        # A get (is it there?), the apply, then a list and a watch each of the JobSet and its pods, whatever the
        # number of pods and however long they take to run (each watch lasts 5 to 10 minutes).
        assert submitted.requests == {"get": 1, "patch": 1, "list": 2, "watch": 2}, submitted.requests

        status = run(plane, ["pwdeploy", "status", name, "-n", ns, "-o", "json"])
        assert status.returncode == 0, status.stderr
        assert sum(g["running"] for g in json.loads(status.stdout)["groups"]) == PODS
        assert status.sent <= 4 and "watch" not in status.requests, status.requests  # one read of each

        logs = run(plane, ["pwdeploy", "logs", name, "-n", ns, "--all"])
        assert logs.returncode == 0, logs.stderr
        assert logs.stdout.count("line 4 of every container") == CONTAINERS
        # the JobSet, then a log a container (16 at a time); the pods in two pages (32 first, to start the reads
        # sooner), the Jobs and the events once
        assert logs.requests == {"get": CONTAINERS + 1, "list": 4}, logs.requests

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
