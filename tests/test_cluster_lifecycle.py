"""Following a job after submit: progress summaries (pure), the wait loop and its display, and the list,
status, logs and delete commands against StubKubeApiServer (a loopback stub, not an API server)."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import Any

from pwdeploy import identifiers as ids
from pwdeploy.cluster import jobsets as js
from pwdeploy.cluster.progress import GroupProgress, JobState, age, job_state, progress, progress_line
from pwdeploy.cluster.wait import Display
from pwdeploy.kube.seam import POD_LOGS, Action, Kube
from tests.conftest import REPO, ClusterCli
from tests.fake_clock import FakeClock
from tests.kube_objects import rendered_jobset
from tests.kube_stub import StubKubeApiServer

EXAMPLE = str(REPO / "examples" / "data_parallel" / "job.yaml")  # dp-example: 2 slices of v5p-8 (1 VM each)


def jobset(name: str = "dp-example", namespace: str = "default", slices: int = 2, **status: Any) -> dict[str, Any]:
    """The rendered JobSet of a job with ``slices`` slices of v5p-16 (2 VMs, so 2 worker pods, per slice)."""
    return rendered_jobset(name, namespace, tpu_type="v5p-16", slices=slices, status=status)


def pod(
    rj: str,
    index: int = 0,
    host: int = 0,
    phase: str = "Running",
    *,
    containers: tuple[str, ...] = (),
    scheduled: bool = True,
    job: str = "dp-example",
    **status: Any,
) -> dict[str, Any]:
    defaults = (ids.MAIN_CONTAINER,) if rj == ids.HEAD_JOB else (ids.WORKER_CONTAINER,)
    init = (ids.PROXY_CONTAINER, ids.RM_CONTAINER) if rj == ids.HEAD_JOB else ()
    return {
        "metadata": {
            "name": f"{job}-{rj}-{index}-{host}-x7k2p",
            "namespace": "default",
            "labels": {
                ids.JOBSET_NAME_LABEL: job,
                ids.REPLICATED_JOB_LABEL: rj,
                ids.JOB_INDEX_LABEL: str(index),
                ids.COMPLETION_INDEX_LABEL: str(host),
            },
        },
        "spec": {
            "nodeName": "node-1" if scheduled else None,
            "initContainers": [{"name": c} for c in init],
            "containers": [{"name": c} for c in containers or defaults],
        },
        "status": {"phase": phase, **status},
    }


# ---------------------------------------------------------------------------------------------- pure summaries


def test_the_jobset_is_read_through_one_module() -> None:
    """cluster.jobsets reads the rendered JobSet: head and worker replicatedJobs, pods per Job, status fields."""
    obj = jobset(slices=3, restarts=2, replicatedJobsStatus=[{"name": ids.WORKER_JOB, "ready": 1}])
    obj["metadata"]["annotations"] = {"a": "1"}
    assert js.replicated_jobs(obj) == [
        js.ReplicatedJob(ids.HEAD_JOB, 1, 1),
        js.ReplicatedJob(ids.WORKER_JOB, 3, 2),  # v5p-16: 2 VMs, so 2 worker pods per slice
    ]
    assert (js.name_of(obj), js.namespace_of(obj), js.annotation(obj, "a"), js.annotation(obj, "b")) == (
        "dp-example",
        "default",
        "1",
        None,
    )
    assert js.restarts(obj) == 2 and js.ready_jobs(obj) == {ids.WORKER_JOB: 1} and js.has_status(obj)
    assert not js.being_deleted(obj) and js.created_at(obj) is None and js.conditions(obj) == []
    assert js.is_managed(obj)


def test_job_state_from_conditions_and_ready_counts() -> None:
    assert job_state(jobset()).phase == "Pending"
    ready = [{"name": ids.HEAD_JOB, "ready": 1}, {"name": ids.WORKER_JOB, "ready": 2}]
    assert job_state(jobset(replicatedJobsStatus=ready)).phase == "Running"
    assert job_state(jobset(replicatedJobsStatus=ready[:1], restarts=2)) == JobState("Starting", restarts=2)
    failed = [{"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "head failed"}]
    assert job_state(jobset(conditions=failed)) == JobState("Failed", "FailedJobs", "head failed")
    done = [{"type": "Completed", "status": "True"}, {"type": "Failed", "status": "False"}]
    assert job_state(jobset(conditions=done)).phase == "Completed"


def test_progress_counts_pods_per_component_and_slice() -> None:
    pods = [
        pod(ids.HEAD_JOB),
        pod(ids.WORKER_JOB, 0, 0),
        pod(ids.WORKER_JOB, 0, 1, "Pending"),
        pod(ids.WORKER_JOB, 1, 0, "Pending", scheduled=False),
    ]
    groups = progress(jobset(), pods)
    assert groups == [
        GroupProgress("head", 1, scheduled=1, running=1),
        GroupProgress("slice 0", 2, scheduled=2, running=1),
        GroupProgress("slice 1", 2, scheduled=0),
    ]
    line = progress_line(JobState("Starting"), groups)
    assert line == "Starting: head 1/1 running; slice 0 1/2 running (1 scheduled); slice 1 0/2 running"


def test_progress_line_sums_many_slices() -> None:
    groups = [GroupProgress("head", 1, 1, 1)] + [GroupProgress(f"slice {i}", 4, 4, 4 if i else 2) for i in range(8)]
    line = progress_line(JobState("Starting", restarts=1), groups)
    assert line == "Starting (restarts 1): head 1/1 running; slices 7/8 ready (30/32 worker pods running)"


def test_age() -> None:
    now = datetime(2026, 1, 2, 3, 0, tzinfo=UTC)
    assert [age(t, now) for t in ("2026-01-02T02:59:30Z", "2026-01-02T02:00:00Z", "2025-12-30T00:00:00Z", None)] == [
        "30s",
        "1h",
        "3d",
        "-",
    ]


def test_display_rewrites_one_line_on_a_terminal_and_prints_changes_otherwise() -> None:
    tty, plain = io.StringIO(), io.StringIO()
    for stream, is_tty in ((tty, True), (plain, False)):
        display = Display(stream, tty=is_tty)
        for line in ("Pending: a", "Pending: a", "Running: b"):
            display.update(line)
        display.close()
    assert tty.getvalue() == "\r\x1b[KPending: a\r\x1b[KRunning: b\n"
    assert plain.getvalue() == "Pending: a\nRunning: b\n"


# ---------------------------------------------------------------------------------------------- submit --wait


WATCH_REFUSED = (  # the stub refuses a watch as a Role without the verb does: the waits list at each look
    "this identity's Role does not grant `watch` on jobsets.jobset.x-k8s.io, pods in namespace default: listing them "
    "every 2 s instead (the Role of docs/cluster.md grants it)"
)


def test_wait_shows_progress_until_running_listing_where_watching_is_forbidden_against_stub(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer, clock: FakeClock
) -> None:
    def world(polls: int) -> None:  # what the controllers would do between two polls
        obj = stub.get("jobsets", "default", "dp-example")
        assert obj is not None
        if polls == 1:
            stub.put("pods", pod(ids.HEAD_JOB, phase="Pending"))
            stub.put("pods", pod(ids.WORKER_JOB, 0, phase="Pending", scheduled=False))
        if polls == 2:
            for p in (pod(ids.HEAD_JOB), pod(ids.WORKER_JOB, 0), pod(ids.WORKER_JOB, 1)):
                stub.put("pods", p)
            obj["status"] = {
                "replicatedJobsStatus": [{"name": ids.HEAD_JOB, "ready": 1}, {"name": ids.WORKER_JOB, "ready": 2}]
            }

    clock.on_sleep = world
    result = cluster_cli(["submit", "-f", EXAMPLE, *kc, "--skip-preflight", "--wait"])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        f"pwdeploy: context stub, server {stub.url}",
        WATCH_REFUSED,
        "Pending: head 0/1 running; slice 0 0/1 running; slice 1 0/1 running",
        "Pending: head 0/1 running (1 scheduled); slice 0 0/1 running; slice 1 0/1 running",
        "Running: head 1/1 running; slice 0 1/1 running; slice 1 1/1 running",
    ]
    assert "job dp-example is Running" in result.stdout and clock.sleeps == [2.0, 2.0]


def test_wait_says_running_once_every_pod_runs_while_the_jobsets_status_lags(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer, clock: FakeClock
) -> None:
    """The wait ends when every pod runs; the JobSet controller counts its Jobs ready a reconcile later, so its
    status still says Starting: submit says the job runs, not "job is Starting"."""

    def world(polls: int) -> None:
        obj = stub.get("jobsets", "default", "dp-example")
        assert obj is not None
        obj["status"] = {"replicatedJobsStatus": [{"name": ids.HEAD_JOB, "ready": 0}, {"name": ids.WORKER_JOB}]}
        for p in (pod(ids.HEAD_JOB), pod(ids.WORKER_JOB, 0), pod(ids.WORKER_JOB, 1)):
            stub.put("pods", p)

    clock.on_sleep = world
    result = cluster_cli(["submit", "-f", EXAMPLE, *kc, "--skip-preflight", "--wait"])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[-1] == "Running: head 1/1 running; slice 0 1/1 running; slice 1 1/1 running"
    assert "job dp-example is Running" in result.stdout and "Starting" not in result.stdout


def test_ctrl_c_while_waiting_leaves_the_job_running(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer, clock: FakeClock
) -> None:
    def interrupt(polls: int) -> None:
        raise KeyboardInterrupt

    clock.on_sleep = interrupt
    result = cluster_cli(["submit", "-f", EXAMPLE, *kc, "--skip-preflight", "--wait=done"])
    assert result.exit_code == 130
    assert "Stopped waiting; job dp-example keeps running." in result.stderr
    assert "pwdeploy logs dp-example -n default -f" in result.stderr
    assert "pwdeploy delete dp-example -n default" in result.stderr
    assert [w.method for w in stub.writes()] == ["PATCH"] and stub.get("jobsets", "default", "dp-example")


def test_wait_done_reports_a_failed_job(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer, clock: FakeClock
) -> None:
    def fail(polls: int) -> None:
        obj = stub.get("jobsets", "default", "dp-example")
        assert obj is not None
        obj["status"] = {
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "FailedJobs",
                    "message": "jobset failed due to one or more job failures",
                }
            ]
        }

    clock.on_sleep = fail
    result = cluster_cli(["submit", "-f", EXAMPLE, *kc, "--skip-preflight", "--wait=done"])
    assert result.exit_code == 4
    assert "error: job dp-example failed: FailedJobs: jobset failed due to one or more job failures" in result.stderr
    assert "pwdeploy status dp-example -n default" in result.stderr


def test_wait_timeout(cluster_cli: ClusterCli, kc: list[str], clock: FakeClock) -> None:
    result = cluster_cli(["submit", "-f", EXAMPLE, *kc, "--skip-preflight", "--wait", "--timeout", "5"])
    assert result.exit_code == 4 and "is not running after 5 s (it keeps going: Pending)" in result.stderr
    assert clock.sleeps == [2.0, 2.0, 1.0]  # lists every 2 s (watching refused), and ends at the deadline


# ---------------------------------------------------------------------------------------------- list / status


def test_list_shows_managed_jobsets(cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer) -> None:
    stub.put(
        "jobsets",
        jobset("alpha", replicatedJobsStatus=[{"name": "pathways-head", "ready": 1}, {"name": "worker", "ready": 2}]),
    )
    stub.put("jobsets", jobset("beta", "team", slices=4))
    foreign = jobset("gamma")
    foreign["metadata"]["labels"] = {}
    stub.put("jobsets", foreign)
    result = cluster_cli(["list", *kc])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["NAME   STATE    SLICES  AGE", "alpha  Running  2/2     5m"]
    assert stub.requests[-1].q("labelSelector") == "app.kubernetes.io/managed-by=pwdeploy"
    everywhere = cluster_cli(["list", "-A", *kc])
    assert [line.split()[:3] for line in everywhere.stdout.splitlines()[1:]] == [
        ["default", "alpha", "Running"],
        ["team", "beta", "Pending"],
    ]
    assert stub.requests[-1].path == "/apis/jobset.x-k8s.io/v1alpha2/jobsets"
    empty = cluster_cli(["list", "-n", "ghost", *kc])
    assert empty.exit_code == 0 and "no pwdeploy jobs in namespace ghost" in empty.stderr


def test_status_shows_pods_per_slice_and_warning_events(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer
) -> None:
    stub.put(
        "jobsets",
        jobset(
            slices=1,
            conditions=[
                {
                    "type": "StartupPolicyInProgress",
                    "status": "True",
                    "reason": "InOrderStartupPolicyInProgress",
                    "message": "in order startup policy is in progress",
                }
            ],
        ),
    )
    stub.put(
        "pods",
        pod(
            ids.HEAD_JOB,
            initContainerStatuses=[
                {"name": ids.PROXY_CONTAINER, "ready": True, "restartCount": 1},
                {"name": ids.RM_CONTAINER, "ready": True, "restartCount": 0},
            ],
            containerStatuses=[{"name": ids.MAIN_CONTAINER, "ready": True, "restartCount": 0}],
        ),
    )
    stub.put(
        "pods",
        pod(
            ids.WORKER_JOB,
            0,
            0,
            containerStatuses=[
                {
                    "name": ids.WORKER_CONTAINER,
                    "ready": False,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "ImagePullBackOff"}},
                }
            ],
        ),
    )
    stub.put(
        "pods",
        pod(
            ids.WORKER_JOB,
            0,
            1,
            "Pending",
            scheduled=False,
            conditions=[
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "message": "0/3 nodes are available: Insufficient google.com/tpu",
                }
            ],
        ),
    )
    # the pod's own event, and one about a pod of another JobSet whose name starts the same (JobSet
    # "dp-example-worker-0" has pods dp-example-worker-0-...): only the uid tells them apart
    pending = stub.get("pods", "default", "dp-example-worker-0-1-x7k2p")
    assert pending is not None
    for i, (who, uid) in enumerate(
        (("dp-example-worker-0-1-x7k2p", pending["metadata"]["uid"]), ("dp-example-worker-0-worker-0-0-a", "other"))
    ):
        stub.put(
            "events",
            {
                "metadata": {"name": f"e{i}", "namespace": "default"},
                "type": "Warning",
                "reason": "FailedScheduling",
                "message": f"no TPU for {who}",
                "involvedObject": {"kind": "Pod", "name": who, "uid": uid},
            },
        )
    result = cluster_cli(["status", "dp-example", *kc])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.splitlines()[1] == "Starting: head 1/1 running; slice 0 1/2 running"
    assert "StartupPolicyInProgress  True    InOrderStartupPolicyInProgress" in out
    rows = {line.split("  ")[0]: " ".join(line.split()) for line in out.splitlines() if "x7k2p" in line}
    assert rows["head"].endswith("Running 3/3 1")
    assert "ImagePullBackOff 0/1 0" in rows["slice 0 host 0"]
    assert "Unschedulable: 0/3 nodes are available: Insufficient google.com/tpu" in rows["slice 0 host 1"]
    assert "dp-example-worker-0-1-x7k2p: FailedScheduling: no TPU" in out and "worker-0-worker" not in out
    selectors = {r.q("fieldSelector") for r in stub.sent("GET", "/events")}
    assert selectors == {f"involvedObject.uid={pending['metadata']['uid']}"} | {
        f"involvedObject.uid={stub.get(plural, 'default', name)['metadata']['uid']}"  # type: ignore[index]
        for plural, name in (("jobsets", "dp-example"), ("pods", "dp-example-worker-0-0-x7k2p"))
    }


def test_status_of_a_missing_job(cluster_cli: ClusterCli, kc: list[str]) -> None:
    result = cluster_cli(["status", "nope", *kc, "-n", "team"])
    assert result.exit_code == 4 and "jobset nope not found in namespace team" in result.stderr


# ---------------------------------------------------------------------------------------------- logs


def test_logs_of_a_worker_host_with_tail(cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer) -> None:
    stub.put("jobsets", jobset())
    stub.put("pods", pod("worker", 1, 1))
    stub.logs[("default", "dp-example-worker-1-1-x7k2p", "pathways-worker")] = "boot\nready\nstep 1\n"
    result = cluster_cli(
        ["logs", "dp-example", "--component", "worker", "--slice", "1", "--host", "1", "--tail", "2", *kc]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == "ready\nstep 1\n"
    listing, read = stub.requests[-2:]
    assert listing.q("labelSelector") == (
        f"{ids.JOBSET_NAME_LABEL}=dp-example,{ids.REPLICATED_JOB_LABEL}={ids.WORKER_JOB},"
        f"{ids.JOB_INDEX_LABEL}=1,{ids.COMPLETION_INDEX_LABEL}=1"
    )
    assert read.path == f"/api/v1/namespaces/default/pods/dp-example-{ids.WORKER_JOB}-1-1-x7k2p/log"
    assert read.query == {"container": [ids.WORKER_CONTAINER], "tailLines": ["2"]}


def test_logs_follow_of_the_proxy(cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer) -> None:
    stub.put("pods", pod("pathways-head"))
    stub.logs[("default", "dp-example-pathways-head-0-0-x7k2p", "pathways-proxy")] = "listening on 29000"
    result = cluster_cli(["logs", "dp-example", "--component", "proxy", "-f", *kc])
    assert result.exit_code == 0 and result.stdout == "listening on 29000"  # byte-exact: no newline added
    assert stub.requests[-1].query == {"container": [ids.PROXY_CONTAINER], "follow": ["true"]}


def test_logs_explain_headless_and_bad_flags(cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer) -> None:
    stub.put("pods", pod("pathways-head", containers=("pathways-proxy", "pathways-rm")))
    headless = cluster_cli(["logs", "dp-example", *kc])
    assert headless.exit_code == 4 and "runs headless: it has no main container" in headless.stderr
    assert "--component proxy" in headless.stderr
    bad = cluster_cli(["logs", "dp-example", "--slice", "1", *kc])
    assert bad.exit_code == 2 and "--slice: applies to --component worker or sidecar, not main" in bad.stderr
    none_yet = cluster_cli(["logs", "dp-example", "--component", "worker", *kc])
    assert none_yet.exit_code == 4 and "jobset dp-example not found" in none_yet.stderr


# ---------------------------------------------------------------------------------------------- delete


def test_delete_asks_then_deletes_in_the_foreground(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer
) -> None:
    stub.put("jobsets", jobset())
    declined = cluster_cli(["delete", "dp-example", *kc], input="n\n")
    assert declined.exit_code == 1 and stub.writes() == []
    stub.linger_after_delete = 1
    result = cluster_cli(["delete", "dp-example", "--yes", "--wait", *kc])
    assert result.exit_code == 0 and "jobset dp-example deleted" in result.stdout
    (delete,) = stub.writes()
    assert delete.path.endswith("/namespaces/default/jobsets/dp-example")
    assert delete.q("propagationPolicy") == "Foreground"
    assert stub.get("jobsets", "default", "dp-example") is None


def test_delete_wait_says_which_pods_still_terminate_against_the_stub(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer
) -> None:
    stub.put("jobsets", jobset())
    stuck = pod(ids.WORKER_JOB, phase="Running")
    stuck["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    stub.put("pods", stuck)
    stub.linger_after_delete = 2
    result = cluster_cli(["delete", "dp-example", "--yes", "--wait", *kc])
    assert result.exit_code == 0, result.output
    assert "waiting for 1 pod(s) to terminate: dp-example-worker-0-0-x7k2p" in result.stderr
    assert result.stderr.count("waiting for") == 1  # said when it changes, not at every poll


def test_a_terminating_pod_is_terminating_in_the_status_table_as_kubectl_says() -> None:
    from pwdeploy.cluster.progress import pod_row

    running = pod(ids.WORKER_JOB, containerStatuses=[{"name": ids.WORKER_CONTAINER, "ready": True}])
    assert pod_row(running)[2:4] == ("Running", "1/1")
    running["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert pod_row(running)[2] == "Terminating"


def test_delete_refuses_jobsets_pwdeploy_did_not_make(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer
) -> None:
    foreign = jobset()
    foreign["metadata"]["labels"] = {}
    stub.put("jobsets", foreign)
    result = cluster_cli(["delete", "dp-example", "--yes", *kc])
    assert result.exit_code == 4 and "is not managed by pwdeploy" in result.stderr and stub.writes() == []
    missing = cluster_cli(["delete", "nope", "--yes", *kc])
    assert missing.exit_code == 4 and "jobset nope not found in namespace default" in missing.stderr


def test_a_long_scheduler_message_is_cut_in_the_status_table() -> None:
    from pwdeploy.cluster.progress import SCHEDULER_MESSAGE_WIDTH, pod_row

    message = "0/600 nodes are available: " + ", ".join(
        f"{n} node(s) had untolerated taint {{t{n}: x}}" for n in range(9)
    )
    pod = {
        "metadata": {"name": "p", "labels": {}},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "message": message}]},
    }
    state = pod_row(pod)[2]
    assert state.startswith("Unschedulable: 0/600 nodes are available: ") and state.endswith("...")
    assert len(state) == len("Unschedulable: ") + SCHEDULER_MESSAGE_WIDTH


def test_logs_are_byte_exact_invalid_utf8_and_carriage_returns_included(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer
) -> None:
    """As kubectl: the program's own output, not rewritten (no U+FFFD for invalid UTF-8, no newline added)."""
    stub.put("pods", pod("pathways-head"))
    planted = b"step 1\n\xff\xfe not utf-8\n" + b"".join(b"\r%d%%" % i for i in range(100_000)) + b"\x1b[2J"
    stub.logs[("default", "dp-example-pathways-head-0-0-x7k2p", "main")] = planted
    result = cluster_cli(["logs", "dp-example", *kc])
    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == planted


def test_lines_longer_than_a_chunk_are_whole_against_the_stub(kube: Kube, stub: StubKubeApiServer) -> None:
    """stream_lines (diagnose's log tails) joins a line across chunk boundaries (benchmarks/bench_logs.py measures
    that its cost grows with the line's size, not its square)."""

    stub.put("pods", pod("pathways-head"))
    line = b"x" * (3 * 65536 + 7)
    stub.logs[("default", "dp-example-pathways-head-0-0-x7k2p", "main")] = b"a\n" + line + b"\nb\r\xff"
    path = POD_LOGS.path("default", "dp-example-pathways-head-0-0-x7k2p")
    got = list(kube.stream_lines(Action("get", POD_LOGS, "default", "p"), path, [("container", "main")]))
    assert got == ["a", line.decode(), "b\r\ufffd"]
