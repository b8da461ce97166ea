"""`pwdeploy drill` against DrillStub (a loopback stub, not an API server: the controllers' part is played by the
test, on the FakeClock's sleeps). What the real controllers do is proven by the control-plane tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pwdeploy import identifiers as ids
from pwdeploy import manifests
from pwdeploy.drill import plan as dr
from pwdeploy.drill.follow import parse_time, step_of
from tests.drill_stub import DrillStub, stamp
from tests.fake_clock import FakeClock
from tests.kube_objects import rendered_jobset, small_job

NAME = "dp-example"
NS = "default"


class World:
    """A running 2-slice job (2 hosts a slice on v5p-16) in the stub, and the controllers' moves."""

    def __init__(
        self, stub: DrillStub, *, slices: int = 2, tpu: str = "v5p-16", max_restarts: int = 3, elastic: int = 0
    ) -> None:
        self.stub, self.slices, self.attempt, self.uid = stub, slices, 0, 0
        if elastic:
            job = small_job({"tpu.type": tpu, "tpu.slices": slices, "tpu.elastic_slices": elastic}, name=NAME)
            (self.jobset,) = manifests.build(job)
        else:
            self.jobset = rendered_jobset(NAME, NS, tpu_type=tpu, slices=slices)
        self.jobset["spec"]["failurePolicy"]["maxRestarts"] = max_restarts  # scheduling.max_restarts
        self.hosts = dr.hosts_per_slice(self.jobset)
        self.set_status(0)
        stub.put("jobsets", self.jobset)
        self.pods_for_attempt()
        self.log_steps(1, 10, at=-10.0)  # before the drill starts (FakeClock's t = 1000 is 00:05:00)

    def set_status(self, restarts: int, *, failed: bool = False, message: str = "") -> None:
        status: dict[str, Any] = {
            "restarts": restarts,
            "restartsCountTowardsMax": restarts,
            "replicatedJobsStatus": [
                {"name": ids.HEAD_JOB, "ready": 1},
                {"name": ids.WORKER_JOB, "ready": self.slices},
            ],
        }
        if failed:
            reason = "ReachedMaxRestarts" if message else "FailedJobs"
            status["conditions"] = [{"type": "Failed", "status": "True", "reason": reason, "message": message}]
        self.jobset["status"] = status
        self.stub.objects[("jobsets", NS, NAME)] = self.jobset

    def pod(self, rj: str, index: int, host: int) -> dict[str, Any]:
        self.uid += 1
        containers = [ids.MAIN_CONTAINER] if rj == ids.HEAD_JOB else [ids.WORKER_CONTAINER]
        # the proxy and the resource manager are native sidecars: init containers that run beside main, whose
        # statuses the kubelet reports in initContainerStatuses (as pwdeploy renders the head)
        sidecars = [ids.PROXY_CONTAINER, ids.RM_CONTAINER] if rj == ids.HEAD_JOB else []
        name = f"{NAME}-{rj}-{index}-{host}-a{self.attempt}u{self.uid}"
        return {
            "metadata": {
                "name": name,
                "namespace": NS,
                "uid": f"uid-{self.uid}",
                "creationTimestamp": stamp(self.uid),
                "labels": {
                    ids.JOBSET_NAME_LABEL: NAME,
                    ids.REPLICATED_JOB_LABEL: rj,
                    ids.JOB_INDEX_LABEL: str(index),
                    ids.COMPLETION_INDEX_LABEL: str(host),
                    ids.RESTART_ATTEMPT_LABEL: str(self.attempt),
                },
            },
            "spec": {
                "initContainers": [{"name": c, "restartPolicy": "Always"} for c in sidecars],
                "containers": [{"name": c} for c in containers],
            },
            "status": {
                "phase": "Running",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "initContainerStatuses": [
                    {"name": c, "ready": True, "restartCount": 0, "started": True} for c in sidecars
                ],
                "containerStatuses": [{"name": c, "ready": True, "restartCount": 0} for c in containers],
            },
        }

    def add(self, pod: dict[str, Any]) -> None:
        self.stub.objects[("pods", NS, pod["metadata"]["name"])] = pod
        for c in [*pod["spec"]["initContainers"], *pod["spec"]["containers"]]:
            self.stub.timed_logs.setdefault((NS, pod["metadata"]["name"], c["name"]), [])

    def pods_for_attempt(self) -> None:
        for key in [k for k in self.stub.objects if k[0] == "pods"]:
            del self.stub.objects[key]
        self.add(self.pod(ids.HEAD_JOB, 0, 0))
        for s in range(self.slices):
            for h in range(self.hosts):
                self.add(self.pod(ids.WORKER_JOB, s, h))

    def pods(self, rj: str | None = None) -> list[dict[str, Any]]:
        found = [o for (p, _, _), o in self.stub.objects.items() if p == "pods"]
        return [p for p in found if rj is None or p["metadata"]["labels"][ids.REPLICATED_JOB_LABEL] == rj]

    def head(self) -> str:
        return str(self.pods(ids.HEAD_JOB)[0]["metadata"]["name"])

    def log_steps(self, first: int, last: int, *, at: float) -> None:
        lines = self.stub.timed_logs.setdefault((NS, self.head(), ids.MAIN_CONTAINER), [])
        for i, step in enumerate(range(first, last + 1)):
            lines.append((stamp(at + i * 0.25), f"step {step}: loss 0.{step:04d}"))

    def restart(self, clock: FakeClock, *, resume_from: int, failed_job: str | None = None) -> None:
        """What JobSet does on RestartJobSet: restarts + 1, its Warning event naming the first failed Job, every
        pod recreated as the next attempt."""
        if failed_job is not None:
            message = f"applying RestartJobSet failure policy action (first failed job: {failed_job})"
            self.stub.put("events", {
                "metadata": {"name": f"{NAME}.restart{self.attempt}", "namespace": NS},
                "involvedObject": {"kind": "JobSet", "name": NAME, "uid": self.jobset["metadata"]["uid"]},
                "reason": "RestartJobSetFailurePolicyAction", "type": "Warning", "message": message,
                "lastTimestamp": stamp(clock.t - 1000.0),
            })  # fmt: skip
        self.attempt += 1
        self.set_status(self.attempt)
        self.pods_for_attempt()
        self.log_steps(resume_from, resume_from + 3, at=clock.t - 1000.0 + 1)

    def replace_missing(self) -> None:
        """What the Job controller does for a deleted pod under its backoffLimit: a new pod in its slot."""
        have = {(p["metadata"]["labels"][ids.JOB_INDEX_LABEL], p["metadata"]["labels"][ids.COMPLETION_INDEX_LABEL])
                for p in self.pods(ids.WORKER_JOB)}  # fmt: skip
        for s in range(self.slices):
            for h in range(self.hosts):
                if (str(s), str(h)) not in have:
                    self.add(self.pod(ids.WORKER_JOB, s, h))


@pytest.fixture
def run(drill_stub: DrillStub, tmp_path: Path) -> Callable[..., Any]:
    from click.testing import CliRunner

    from pwdeploy.cli import cli
    from pwdeploy.cli.seams import Seams

    kubeconfig = drill_stub.write_kubeconfig(tmp_path / "kc", {"stub": ("stub-token", None)}, current="stub")

    def invoke(args: list[str], clock: FakeClock, input: str | None = None) -> Any:
        seams = Seams(installed_jax=lambda: "0.10.2", clock=clock)
        return CliRunner().invoke(cli, [*args, "--kubeconfig", str(kubeconfig)], input=input, obj=seams)

    return invoke


def test_lose_slice_restarts_the_jobset_and_the_report_measures_it(
    drill_stub: DrillStub, run: Callable[..., Any]
) -> None:
    world: World

    def controllers(sleeps: int) -> None:
        if sleeps == 2 and drill_stub.evicted:  # the JobSet controller restarts the job, resuming from step 6
            world.restart(clock, resume_from=6, failed_job=f"{NAME}-{ids.WORKER_JOB}-1")

    clock = FakeClock(controllers)
    world = World(drill_stub)
    result = run(["drill", NAME, "--lose-slice", "1", "-y", "-o", "json"], clock)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert not any("-worker-1-" in p["metadata"]["name"] and p["metadata"]["labels"][ids.RESTART_ATTEMPT_LABEL] == "0"
                   for p in world.pods())  # fmt: skip
    assert sorted(drill_stub.evicted) == doc["fault"]["pods"]
    assert len(drill_stub.evicted) == world.hosts and all("-worker-1-" in p for p in drill_stub.evicted)
    assert doc["predicted"]["outcome"] == "jobset_restart" and doc["predicted"]["rule"] == "slice_lost"
    assert doc["rule_fired"] == "jobset_restart" and doc["first_failed_job"] == f"{NAME}-{ids.WORKER_JOB}-1"
    assert doc["seconds_to_detection"] == 4.0  # two polls of 2 s after the fault
    assert doc["seconds_to_all_running"] == 4.0
    assert doc["first_step_after"] == 6 and doc["last_step_before"] == 10 and doc["steps_lost"] == 5
    assert doc["restarts_consumed"] == 1 and doc["max_restarts"] == world.jobset["spec"]["failurePolicy"]["maxRestarts"]
    assert doc["stopped"] == "recovered" and doc["findings"] == []
    evictions = drill_stub.sent("POST", "/eviction")
    assert [r.body["kind"] for r in evictions] == ["Eviction"] * world.hosts
    assert "pwdeploy: context stub" in result.stderr  # the context and server come first


def test_a_difference_from_local_runs_prediction_is_a_finding(drill_stub: DrillStub, run: Callable[..., Any]) -> None:
    world: World

    def controllers(sleeps: int) -> None:
        if sleeps == 1 and drill_stub.evicted:
            world.replace_missing()  # the Job controller replaced the pods and nothing else happened
            world.log_steps(11, 14, at=clock.t - 1000.0 + 1)

    clock = FakeClock(controllers)
    world = World(drill_stub)
    result = run(["drill", NAME, "--lose-slice", "0", "-y", "-o", "json"], clock)
    doc = json.loads(result.stdout)
    assert doc["rule_fired"] == "pod_replaced" and doc["restarts_consumed"] == 0
    assert doc["steps_lost"] == 0 and doc["first_step_after"] == 11
    assert any(f.startswith("local run predicts jobset_restart") for f in doc["findings"]), doc["findings"]


def test_text_report_and_timeout(drill_stub: DrillStub, run: Callable[..., Any]) -> None:
    clock = FakeClock()
    World(drill_stub)
    result = run(["drill", NAME, "--evict-head", "-y", "--timeout", "10"], clock)
    assert result.exit_code == 4, result.output
    assert "rule that fired:      none" in result.stdout
    assert "finding: no controller reacted to the fault before following stopped (timeout)" in result.stdout
    assert "did not recover within --timeout 10 s" in result.stderr


def test_dry_run_says_what_and_which_rule_and_does_nothing(drill_stub: DrillStub, run: Callable[..., Any]) -> None:
    World(drill_stub)
    result = run(["drill", NAME, "--lose-slice", "1", "--dry-run"], FakeClock())
    assert result.exit_code == 0, result.output
    assert "would lose slice 1" in result.stderr and "rule slice_lost (RestartJobSet, restart 1 of" in result.stderr
    assert "dry run: nothing was done" in result.stderr
    assert drill_stub.writes() == [] and drill_stub.sent("POST") == []


def test_asks_and_without_a_terminal_exits_2(drill_stub: DrillStub, run: Callable[..., Any]) -> None:
    World(drill_stub)
    result = run(["drill", NAME, "--lose-slice", "1"], FakeClock())
    assert result.exit_code == 2 and "pass -y to answer yes" in result.stderr
    assert drill_stub.sent("POST") == []
    piped = run(["drill", NAME, "--lose-slice", "1"], FakeClock(), input="y\n")  # a `while read` loop's next line
    assert piped.exit_code == 2 and "only a person at one may answer" in piped.stderr, piped.output
    assert drill_stub.sent("POST") == []


def test_refuses_a_fatal_fault_unless_allowed(drill_stub: DrillStub, run: Callable[..., Any]) -> None:
    world = World(drill_stub)
    limit = world.jobset["spec"]["failurePolicy"]["maxRestarts"]
    world.set_status(limit)  # every restart used: losing a slice now ends the job
    result = run(["drill", NAME, "--lose-slice", "1", "-y"], FakeClock())
    assert result.exit_code == 2 and "--allow-fatal" in result.stderr and "ReachedMaxRestarts" in result.stderr
    dry = run(["drill", NAME, "--lose-slice", "1", "--dry-run"], FakeClock())
    assert dry.exit_code == 0 and "fatal: rule slice_lost" in dry.stderr and "(needs --allow-fatal)" in dry.stderr
    assert drill_stub.sent("POST") == []


def test_refuses_a_job_that_is_not_running(drill_stub: DrillStub, run: Callable[..., Any]) -> None:
    World(drill_stub).set_status(0, failed=True)
    result = run(["drill", NAME, "--evict-head", "-y"], FakeClock())
    assert result.exit_code == 4 and "is Failed, not running" in result.stderr


def test_a_job_whose_every_pod_runs_is_drilled_while_the_jobsets_status_lags(
    drill_stub: DrillStub, run: Callable[..., Any]
) -> None:
    """`submit --wait` says Running once every pod runs; the JobSet controller counts its Jobs ready a reconcile
    later. A drill right after it takes the job as running, as the wait did; a pod not yet running is Starting."""
    world = World(drill_stub)
    world.jobset["status"]["replicatedJobsStatus"] = [{"name": ids.HEAD_JOB, "ready": 1}, {"name": ids.WORKER_JOB}]
    result = run(["drill", NAME, "--lose-slice", "1", "-y", "-o", "json", "--timeout", "4"], FakeClock())
    assert "not running" not in result.stderr and len(drill_stub.evicted) == world.hosts, result.output

    late = World(drill_stub)
    late.jobset["status"]["replicatedJobsStatus"] = [{"name": ids.HEAD_JOB, "ready": 1}, {"name": ids.WORKER_JOB}]
    late.pods(ids.WORKER_JOB)[0]["status"]["phase"] = "Pending"
    refused = run(["drill", NAME, "--lose-slice", "0", "-y"], FakeClock())
    assert refused.exit_code == 4 and "is Starting, not running" in refused.stderr, refused.output
    assert len(drill_stub.evicted) == world.hosts  # nothing more was evicted


def test_flag_errors_exit_2_and_name_the_flag(drill_stub: DrillStub, run: Callable[..., Any]) -> None:
    World(drill_stub)
    cases = {
        ("--lose-slice", "5"): "has no slice 5: it has 2 (slices 0 to 1)",
        ("--kill-worker", "0/7", "--exit-code", "143"): "has no host 7: it has 2",
        ("--kill-worker", "0/1", "--exit-code", "3"): "no Kubernetes API sets a container's exit code",
        ("--kill-worker", "zero", "--exit-code", "143"): "is not SLICE/HOST",
        ("--evict-head", "--lose-slice", "1"): "give exactly one fault",
        ("--evict-head", "--after", "soon"): "--after",
        ("--evict-head", "--exit-code", "143"): "--exit-code",
    }
    for args, said in cases.items():
        result = run(["drill", NAME, *args, "-y"], FakeClock())
        assert result.exit_code == 2, (args, result.output)
        assert said in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.output
    assert drill_stub.sent("POST") == []


def test_refused_eviction_names_the_rbac_rules(drill_stub: DrillStub, run: Callable[..., Any]) -> None:
    World(drill_stub)
    drill_stub.forbid("create", "pods/eviction")
    result = run(["drill", NAME, "--evict-head", "-y"], FakeClock())
    assert result.exit_code == 4, result.output
    assert "resources: [pods/eviction], verbs: [create]" in result.stderr
    assert "resources: [pods/log], verbs: [get]" in result.stderr


def test_after_step_waits_for_the_step_report(drill_stub: DrillStub, run: Callable[..., Any]) -> None:
    world: World

    def program(sleeps: int) -> None:
        if sleeps == 3:
            world.log_steps(11, 20, at=5.0)

    clock = FakeClock(program)
    world = World(drill_stub)
    result = run(["drill", NAME, "--evict-head", "--after-step", "15", "-y", "--timeout", "10"], clock)
    assert "main reported step 20: injecting" in result.stderr
    assert len(drill_stub.evicted) == 1 and clock.sleeps[:3] == [2.0, 2.0, 2.0]


def test_prediction_uses_the_same_evaluator_as_local_run() -> None:
    jobset = rendered_jobset(NAME, NS, tpu_type="v5p-16", slices=2)
    jobset["status"] = {"restarts": 0}
    assert dr.predict(dr.Fault("lose_slice", slice_index=1), jobset).fatal  # maxRestarts 0, the default
    jobset["spec"]["failurePolicy"]["maxRestarts"] = 2
    lose = dr.predict(dr.Fault("lose_slice", slice_index=1), jobset)
    assert lose.outcome == "jobset_restart" and lose.decision is not None and lose.decision.rule == "slice_lost"
    head = dr.predict(dr.Fault("evict_head"), jobset)
    assert head.outcome == "pod_replaced" and "Ignore on DisruptionTarget" in head.why
    kill = dr.predict(dr.Fault("kill_worker", slice_index=0, host=0, exit_code=137), jobset)
    assert kill.outcome == "pod_replaced" and "restart 1 of backoffLimit 8, restarted in its pod" in kill.why


def test_a_deleted_head_is_predicted_from_how_the_live_head_pod_stops_main() -> None:
    """--delete-head: no DisruptionTarget. Under the shared process namespace pwdeploy renders, SIGTERM ends a
    handler-less main (143): counted, the JobSet restarts; as PID 1 of its container (a JobSet rendered before),
    main ends in the SIGKILL (137), which the FailJob rule fails the JobSet on: fatal."""
    jobset = rendered_jobset(NAME, NS, tpu_type="v5p-16", slices=2)
    jobset["status"] = {"restarts": 0}
    jobset["spec"]["failurePolicy"]["maxRestarts"] = 2
    shared = dr.predict(dr.Fault("delete_head"), jobset)
    assert shared.outcome == "jobset_restart" and not shared.fatal
    assert "main killed by SIGTERM (exit code 143)" in shared.why and "retry_exit_code" in shared.why
    head = next(rj for rj in jobset["spec"]["replicatedJobs"] if rj["name"] == ids.HEAD_JOB)
    del head["template"]["spec"]["template"]["spec"]["shareProcessNamespace"]
    pid_1 = dr.predict(dr.Fault("delete_head"), jobset)
    assert pid_1.outcome == "job_ends" and pid_1.fatal
    assert "main killed by SIGKILL (exit code 137)" in pid_1.why and "user_program_failed" in pid_1.why


def test_delete_head_deletes_the_head_pod_and_names_its_rbac(drill_stub: DrillStub, run: Callable[..., Any]) -> None:
    World(drill_stub)
    result = run(["drill", NAME, "--delete-head", "--dry-run"], FakeClock())
    assert result.exit_code == 0, result.output
    assert "delete the head pod (no DisruptionTarget" in result.stderr
    from pwdeploy.drill.inject import rbac_rules

    assert 'apiGroups: [""], resources: [pods], verbs: [delete]' in rbac_rules(dr.Fault("delete_head"))


def test_step_lines_and_timestamps() -> None:
    assert step_of("step 12: loss 0.1") == 12 and step_of("stepping 12") is None and step_of("x step 1") is None
    at = parse_time("2026-01-01T00:05:01.250000000Z")
    assert at is not None and at.microsecond == 250000
    assert parse_time("yesterday") is None


def test_kill_worker_signals_the_container_through_exec(drill_stub: DrillStub, run: Callable[..., Any]) -> None:
    world: World

    def program(sleeps: int) -> None:
        if sleeps == 1:
            world.log_steps(11, 12, at=clock.t - 1000.0)

    clock = FakeClock(program)
    world = World(drill_stub)
    result = run(["drill", NAME, "--kill-worker", "1/0", "--exit-code", "143", "-y", "-o", "json"], clock)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    (pod,) = [p["metadata"]["name"] for p in world.pods(ids.WORKER_JOB) if "-worker-1-0-" in p["metadata"]["name"]]
    assert drill_stub.signalled == [(pod, ids.WORKER_CONTAINER, "TERM")]
    assert doc["fault"] == {
        "kind": "kill_worker", "slice": 1, "host": 0, "exit_code": 143, "pods": [pod], "injection": "confirmed",
        "injection_detail": "", "not_hit": [],
    }  # fmt: skip
    assert doc["rule_fired"] == "container_restarted" and doc["predicted"]["outcome"] == "pod_replaced"
    assert doc["findings"] == [] and doc["seconds_to_detection"] == 0.0 and doc["steps_lost"] == 0
    (execed,) = drill_stub.sent("GET", "/exec")
    assert execed.query["command"] == ["kill", "-s", "TERM", "1"] and execed.q("container") == ids.WORKER_CONTAINER


def test_a_signal_pid_1_ignores_is_reported_not_hidden(drill_stub: DrillStub, run: Callable[..., Any]) -> None:
    World(drill_stub)
    result = run(["drill", NAME, "--kill-worker", "0/1", "--exit-code", "137", "-y", "--timeout", "6"], FakeClock())
    assert result.exit_code == 4
    assert [s for _, _, s in drill_stub.signalled] == ["KILL"]
    assert "finding: no controller reacted" in result.stdout


def test_ctrl_c_stops_following_and_never_undoes_the_fault(drill_stub: DrillStub, run: Callable[..., Any]) -> None:
    def interrupt(sleeps: int) -> None:
        if sleeps == 2:
            raise KeyboardInterrupt

    World(drill_stub)
    result = run(["drill", NAME, "--lose-slice", "1", "-y"], FakeClock(interrupt))
    assert result.exit_code == 130, result.output
    assert "stopped: interrupted" in result.stdout
    assert "Stopped following; the fault is not undone (2 pods hit: " in result.stderr
    assert len(drill_stub.evicted) == 2 and [r.method for r in drill_stub.writes()] == ["POST", "POST"]


def test_ctrl_c_before_the_fault_injects_nothing(drill_stub: DrillStub, run: Callable[..., Any]) -> None:
    def interrupt(sleeps: int) -> None:
        raise KeyboardInterrupt

    World(drill_stub)
    result = run(["drill", NAME, "--lose-slice", "1", "--after", "5m", "-y"], FakeClock(interrupt))
    assert result.exit_code == 130 and "no fault was injected" in result.stderr
    assert drill_stub.evicted == []


def test_after_step_is_bounded_by_the_timeout(drill_stub: DrillStub, run: Callable[..., Any]) -> None:
    World(drill_stub)
    result = run(["drill", NAME, "--evict-head", "--after-step", "500", "-y", "--timeout", "10"], FakeClock())
    assert result.exit_code == 4 and "did not report step 500 within --timeout 10 s (last: 10)" in result.stderr
    assert drill_stub.evicted == []


def test_after_step_on_a_headless_job_is_refused(drill_stub: DrillStub, run: Callable[..., Any]) -> None:
    world = World(drill_stub)
    head = next(rj for rj in world.jobset["spec"]["replicatedJobs"] if rj["name"] == ids.HEAD_JOB)
    pod = head["template"]["spec"]["template"]["spec"]
    pod["containers"] = [c for c in pod["containers"] if c["name"] != ids.MAIN_CONTAINER]
    result = run(["drill", NAME, "--evict-head", "--after-step", "5", "-y"], FakeClock())
    assert result.exit_code == 2 and "--after-step: job dp-example is headless" in result.stderr


def test_an_image_without_kill_is_a_clear_error_and_nothing_is_injected(
    drill_stub: DrillStub, run: Callable[..., Any]
) -> None:
    World(drill_stub)
    drill_stub.image_has_kill = False
    result = run(["drill", NAME, "--kill-worker", "0/0", "--exit-code", "143", "-y"], FakeClock())
    assert result.exit_code == 4, result.output
    assert '"kill": executable file not found' in result.stderr and "no fault was injected" in result.stderr
    assert "needs a `kill` command" in result.stderr and "drill report" not in result.stdout


def test_an_elastic_job_recovers_in_process(drill_stub: DrillStub, run: Callable[..., Any]) -> None:
    world: World

    def controllers(sleeps: int) -> None:
        if sleeps == 1:
            world.log_steps(11, 13, at=clock.t - 1000.0 + 0.5)  # training goes on with one slice
        if sleeps == 2:
            world.replace_missing()  # the Job controller brings the slice's pods back
            world.log_steps(14, 15, at=clock.t - 1000.0 + 0.5)

    clock = FakeClock(controllers)
    world = World(drill_stub, elastic=1)
    assert dr.is_elastic(world.jobset)
    result = run(["drill", NAME, "--lose-slice", "1", "-y", "-o", "json"], clock)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["predicted"]["outcome"] == "elastic_recovery" and doc["rule_fired"] == "elastic_recovery"
    assert doc["restarts_consumed"] == 0 and doc["findings"] == []
    assert doc["last_step_before"] == 13 and doc["first_step_after"] == 14 and doc["steps_lost"] == 0


def test_allow_fatal_injects_and_reports_the_end(drill_stub: DrillStub, run: Callable[..., Any]) -> None:
    world: World

    def controllers(sleeps: int) -> None:
        if sleeps == 1 and drill_stub.evicted:
            failed = f"{NAME}-{ids.WORKER_JOB}-0"
            world.set_status(0, failed=True, message=f"reached max restarts (first failed job: {failed})")

    clock = FakeClock(controllers)
    world = World(drill_stub, max_restarts=0)
    result = run(["drill", NAME, "--lose-slice", "0", "--allow-fatal", "-y", "-o", "json"], clock)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["predicted"]["outcome"] == "job_ends" and doc["rule_fired"] == "job_ended"
    assert doc["first_failed_job"] == f"{NAME}-{ids.WORKER_JOB}-0" and doc["stopped"] == "job_ended"
    assert doc["findings"] == [] and "ReachedMaxRestarts" in doc["rule_detail"]


# ---------------------------------------------------------------------------------------------- what is confirmed


def test_a_jobset_pwdeploy_did_not_create_is_refused_as_delete_refuses_it(
    drill_stub: DrillStub, run: Callable[..., Any]
) -> None:
    """A JobSet labelled `managed-by: xpk` was drilled on a prediction of pwdeploy's rendering."""
    world = World(drill_stub)
    world.jobset["metadata"]["labels"][ids.MANAGED_BY_LABEL] = "xpk"
    for extra in (["-y"], ["--dry-run"]):
        result = run(["drill", NAME, "--lose-slice", "1", *extra], FakeClock())
        assert result.exit_code == 4, result.output
        assert "is not managed by pwdeploy (app.kubernetes.io/managed-by: xpk): not drilling it" in result.stderr
    assert drill_stub.sent("POST") == [] and drill_stub.sent("GET", "/exec") == []


def _frame(first: int, length_bytes: bytes, payload: bytes = b"") -> bytes:
    return bytes((first,)) + length_bytes + payload


HOSTILE_EXEC = {
    "silent": lambda stream: None,
    "closed without a status": lambda stream: stream.send(0x8, b"\x03\xe8"),
    "RSV1 set": lambda stream: stream.client.sendall(_frame(0xC2, b"\x05", b"\x03{}xx")),
    "a 1 MiB ping": lambda stream: stream.client.sendall(_frame(0x89, b"\x7f" + (1 << 20).to_bytes(8, "big"))),
    "a frame of 2^62 bytes": lambda stream: stream.client.sendall(_frame(0x82, b"\x7f" + (1 << 62).to_bytes(8, "big"))),
    "the Status on stderr": lambda stream: (
        stream.send_channel(2, json.dumps({"metadata": {}, "status": "Success"}).encode()),
        stream.send(0x8, b"\x03\xe8"),
    ),
    "a Status nested 100,000 deep": lambda stream: (
        stream.send_channel(3, b"[" * 100_000 + b"]" * 100_000),
        stream.send(0x8, b"\x03\xe8"),
    ),
}


@pytest.mark.parametrize("answer", list(HOSTILE_EXEC), ids=list(HOSTILE_EXEC))
def test_a_signal_the_exec_never_confirmed_is_reported_as_unconfirmed_not_as_sent(
    drill_stub: DrillStub, run: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, answer: str
) -> None:
    """The drill said the signal was sent and then found "no controller reacted": the exec's answer was silence, a
    close without a Status, a broken frame, or a Status where none belongs."""
    monkeypatch.setattr("pwdeploy.drill.inject.EXEC_TIMEOUT_S", 1.0)  # the silent stream: a second, not twenty
    World(drill_stub)
    drill_stub.exec_answer = HOSTILE_EXEC[answer]
    args = ["drill", NAME, "--kill-worker", "0/1", "--exit-code", "143", "-y", "-o", "json", "--timeout", "4"]
    result = run(args, FakeClock())
    assert result.exit_code == 4, result.output
    doc = json.loads(result.stdout)
    assert doc["fault"]["injection"] == "unconfirmed" and doc["rule_fired"] == "none"
    assert any(f.startswith("the signal was not confirmed (") for f in doc["findings"]), doc["findings"]
    assert not any(f.startswith("no controller reacted") for f in doc["findings"])
    assert "kill succeeded" not in result.stderr and ": not confirmed: the exec" in result.stderr
    assert "the fault's injection was not confirmed and nothing reacted" in result.stderr
    assert "internal error" not in result.stderr


def test_a_disruption_budget_that_blocks_the_first_eviction_is_named_and_not_retried(
    drill_stub: DrillStub, run: Callable[..., Any]
) -> None:
    """A PodDisruptionBudget's 429 got 4 tries in 4 s and the hint that the control plane was overloaded."""
    world = World(drill_stub)
    for pod in world.pods(ids.HEAD_JOB):
        drill_stub.budgets[pod["metadata"]["name"]] = "head-budget"
    result = run(["drill", NAME, "--evict-head", "-y"], FakeClock())
    assert result.exit_code == 4, result.output
    assert "a PodDisruptionBudget refused to create pods/eviction" in result.stderr, result.stderr
    assert "The disruption budget head-budget needs 1 healthy pods and has 1 currently" in result.stderr
    assert "kubectl get pdb" in result.stderr and "overloaded" not in result.stderr
    assert len(drill_stub.sent("POST", "/eviction")) == 1 and drill_stub.evicted == []


def test_a_fault_injected_in_part_says_which_pods_and_what_stopped_it(
    drill_stub: DrillStub, run: Callable[..., Any]
) -> None:
    """The second eviction of a lost slice refused (a budget): the report said the slice was lost; the first pod's
    eviction stays, so the job is followed, and the report and the exit say it was in part."""
    world = World(drill_stub)
    second = sorted(p["metadata"]["name"] for p in world.pods(ids.WORKER_JOB) if "-worker-1-" in p["metadata"]["name"])
    drill_stub.budgets[second[1]] = "slice-budget"
    result = run(["drill", NAME, "--lose-slice", "1", "-y", "-o", "json", "--timeout", "4"], FakeClock())
    assert result.exit_code == 4, result.output
    doc = json.loads(result.stdout)
    assert doc["fault"]["pods"] == [second[0]] and doc["fault"]["injection"] == "partial"
    assert [n["pod"] for n in doc["fault"]["not_hit"]] == [second[1]]
    assert "slice-budget" in doc["fault"]["not_hit"][0]["why"]
    assert doc["findings"][0].startswith("the fault was injected in part: 1 of 2 pods hit; not hit: ")
    assert drill_stub.evicted == [second[0]] and "RBAC" not in result.stderr and "Aborted" not in result.stderr


def test_ctrl_c_between_two_evictions_reports_what_was_hit_and_what_is_left(
    drill_stub: DrillStub, run: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pwdeploy.drill import inject

    sent = inject.evict

    def second_interrupted(kube: Any, namespace: str, pod: str) -> bool:
        if drill_stub.evicted:  # Ctrl-C while the second eviction is on its way
            raise KeyboardInterrupt
        return sent(kube, namespace, pod)

    monkeypatch.setattr(inject, "evict", second_interrupted)
    World(drill_stub)
    result = run(["drill", NAME, "--lose-slice", "1", "-y", "-o", "json"], FakeClock())
    assert result.exit_code == 130, result.output
    doc = json.loads(result.stdout)
    assert doc["fault"]["injection"] == "interrupted" and doc["stopped"] == "interrupted"
    assert doc["fault"]["pods"] == drill_stub.evicted and len(doc["fault"]["not_hit"]) == 1
    assert "not evicted: interrupted (Ctrl-C)" in doc["fault"]["not_hit"][0]["why"]
    assert "Stopped injecting; the fault is not undone (1 pod hit: " in result.stderr
    assert "Aborted" not in result.stderr and "Interrupted." not in result.stderr


def test_an_api_error_while_following_keeps_the_report_of_what_was_injected_and_measured(
    drill_stub: DrillStub, run: Callable[..., Any]
) -> None:
    def controllers(sleeps: int) -> None:
        if sleeps == 1:
            world.replace_missing()  # detected at the next look
        if sleeps == 2:
            drill_stub.fail("GET", r"/jobsets", 403, times=10)  # then the JobSet may no longer be read (nor listed)

    clock = FakeClock(controllers)
    world = World(drill_stub)
    result = run(["drill", NAME, "--lose-slice", "0", "-y", "-o", "json"], clock)
    assert result.exit_code == 4, result.output
    doc = json.loads(result.stdout)
    assert doc["stopped"] == "api_error" and doc["rule_fired"] == "pod_replaced"
    assert doc["seconds_to_detection"] == 2.0 and len(doc["fault"]["pods"]) == world.hosts
    assert any(f.startswith("following stopped on an error") for f in doc["findings"]), doc["findings"]
    assert "following job dp-example stopped on an error (the report above says" in result.stderr


def test_flags_a_drill_cannot_honour_are_refused_before_the_question(
    drill_stub: DrillStub, run: Callable[..., Any]
) -> None:
    World(drill_stub)
    cases = {
        ("--evict-head", "--after", "9999999h"): "is not a wait a drill makes (0 to 7 days: 168h)",
        ("--kill-worker", "0/0", "--exit-code", "147"): "147 is 128 + SIGSTOP, which does not end a process",
        ("--kill-worker", "0/0", "--exit-code", "146"): "146 is 128 + SIGCONT",
    }
    for args, said in cases.items():
        result = run(["drill", NAME, *args], FakeClock())  # no -y: refused before asking
        assert result.exit_code == 2, (args, result.output)
        assert said in result.stderr and "Inject" not in result.stderr, (args, result.stderr)
    assert drill_stub.sent("POST") == []


def test_at_a_terminal_the_question_is_asked_and_no_injects_nothing(drill_stub: DrillStub, tmp_path: Path) -> None:
    """The one answer a drill takes is a person's at a terminal (a pseudo-terminal here, the installed command)."""
    import os
    import subprocess
    import sys

    World(drill_stub)
    kubeconfig = drill_stub.write_kubeconfig(tmp_path / "kc", {"stub": ("stub-token", None)}, current="stub")
    primary, secondary = os.openpty()
    command = [str(Path(sys.executable).with_name("pwdeploy")), "drill", NAME, "--lose-slice", "1", "--kubeconfig",
               str(kubeconfig)]  # fmt: skip
    with subprocess.Popen(command, stdin=secondary, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as drill:
        os.close(secondary)
        os.write(primary, b"n\n")
        _, err = drill.communicate(timeout=60)
    os.close(primary)
    assert drill.returncode == 1, err
    assert "Inject --lose-slice 1 into job dp-example in namespace default?" in err and "no fault injected" in err
    assert drill_stub.sent("POST") == []
