"""What JobSet does on each kind of failure, by its own rules over the JobSet pwdeploy renders (and, below, over
hand-written JobSets that reach the rules pwdeploy does not use). docs/restarts.md shows the same table."""

from __future__ import annotations

import re
import signal
from typing import Any, NamedTuple

import pytest

from pwdeploy import identifiers as ids
from pwdeploy import manifests
from pwdeploy.config import load_job
from pwdeploy.manifests.failure_policy import Action, PodFailure, backoff_limit, decide
from pwdeploy.manifests.lost_slice import replacement_delay_s
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"
HEAD, WORKER = ids.HEAD_JOB, ids.WORKER_JOB
DISRUPTED = ("DisruptionTarget",)


def rendered(**overrides: Any) -> dict[str, Any]:
    job = load_job(EXAMPLE, {"scheduling.max_restarts": 3, **overrides}, installed_jax=lambda: "0.10.2")
    obj: dict[str, Any] = manifests.build(job)[0]
    return obj


JOBSET = rendered()
WORKER_BACKOFF = backoff_limit(JOBSET, WORKER)


def main_exits(code: int) -> PodFailure:
    return PodFailure(HEAD, exit_code=code, container=ids.MAIN_CONTAINER)


def vm_lost(failed_before: int = 0) -> PodFailure:
    """A worker pod gone with its VM (spot reclaim, maintenance): no exit code, the pod marked DisruptionTarget."""
    return PodFailure(WORKER, conditions=DISRUPTED, failed_before=failed_before)


def worker_exits(failed_before: int = 0) -> PodFailure:
    """The worker container exits 1 and the kubelet restarts it in its pod (restartPolicy OnFailure)."""
    return PodFailure(WORKER, exit_code=1, container=ids.WORKER_CONTAINER, failed_before=failed_before)


def suspended(replicated_job: str, sig: int) -> PodFailure:
    """A pod the Job controller deleted because Kueue's eviction suspended its Job, ended by ``sig``."""
    container = ids.MAIN_CONTAINER if replicated_job == HEAD else ids.WORKER_CONTAINER
    return PodFailure(replicated_job, signal=sig, container=container, suspended=True)


class Scenario(NamedTuple):
    name: str
    failures: list[PodFailure]
    action: Action
    rule: str | None


SCENARIOS = [
    Scenario("program bug: main exits 1", [main_exits(1)], Action.FAIL, "user_program_failed"),
    Scenario(
        "program killed by the kernel's OOM killer (SIGKILL, 137)",
        [PodFailure(HEAD, signal=signal.SIGKILL)],
        Action.FAIL,
        "user_program_failed",
    ),
    Scenario(
        "slice lost, the program dies first with an unhandled error (exit 1)",
        [vm_lost(), main_exits(1)],
        Action.FAIL,
        "user_program_failed",
    ),
    Scenario(
        "slice lost, the program dies first through retry_on_slice_loss (exit 75)",
        [vm_lost(), main_exits(ids.RETRY_EXIT_CODE)],
        Action.RESTART,
        "retry_exit_code",
    ),
    Scenario(
        "a worker host exhausts its pod retries (backoffLimitPerIndex)",
        [vm_lost(failed_before=WORKER_BACKOFF)],
        Action.RESTART,
        "slice_lost",
    ),
    Scenario(
        "a lost VM uses up its host's retries and main exits 1, both Jobs failed when JobSet looks",
        [vm_lost(failed_before=WORKER_BACKOFF), main_exits(1)],
        Action.RESTART,
        "slice_lost",
    ),
    Scenario(
        "a worker container's restarts use up its Job's retries (backoffLimit)",
        [worker_exits(failed_before=WORKER_BACKOFF)],
        Action.RESTART,
        "slice_lost",
    ),
    Scenario(
        "a worker container's restarts use up its Job's retries and main exits 1 at the same time",
        [worker_exits(failed_before=WORKER_BACKOFF), main_exits(1)],
        Action.FAIL,
        "user_program_failed",
    ),
    Scenario("one worker pod lost, retries left", [vm_lost()], Action.NOTHING, None),
    Scenario(
        "SIGTERM from a preemption notice to a worker pod (143)",
        [PodFailure(WORKER, signal=signal.SIGTERM, conditions=DISRUPTED)],
        Action.NOTHING,
        None,
    ),
    Scenario(
        "SIGTERM from a preemption notice to the head pod (143, DisruptionTarget)",
        [PodFailure(HEAD, signal=signal.SIGTERM, conditions=DISRUPTED)],
        Action.NOTHING,
        None,
    ),
    Scenario(
        "a person deletes the head pod: SIGTERM, main stops (143, no DisruptionTarget)",
        [PodFailure(HEAD, signal=signal.SIGTERM)],
        Action.RESTART,
        "retry_exit_code",
    ),
    Scenario(
        "a person deletes the head pod; main, PID 1 without a SIGTERM handler, is killed after the grace period (137)",
        [PodFailure(HEAD, signal=signal.SIGKILL)],
        Action.FAIL,
        "user_program_failed",
    ),
    Scenario(
        "Kueue evicts the job (its Jobs suspended, their pods deleted): main stops on SIGTERM (143)",
        [suspended(HEAD, signal.SIGTERM), suspended(WORKER, signal.SIGTERM)],
        Action.REQUEUE,
        None,
    ),
    Scenario(
        "Kueue evicts the job; main, PID 1 without a SIGTERM handler, is killed after the grace period (137)",
        [suspended(HEAD, signal.SIGKILL), suspended(WORKER, signal.SIGKILL)],
        Action.FAIL,
        "user_program_failed",
    ),
    Scenario("main exits with the retry code 75", [main_exits(ids.RETRY_EXIT_CODE)], Action.RESTART, "retry_exit_code"),
    Scenario("main exits 76, not in scheduling.retry_exit_codes", [main_exits(76)], Action.FAIL, "user_program_failed"),
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_each_scenario_ends_as_jobset_decides(scenario: Scenario) -> None:
    decision = decide(JOBSET, scenario.failures)
    assert (decision.action, decision.rule) == (scenario.action, scenario.rule), decision.why


def scenario_table() -> str:
    rows = ["| failure | JobSet does | rule |", "|---|---|---|"]
    for s in SCENARIOS:
        does = {
            Action.FAIL: "fails",
            Action.RESTART: "restarts (counted)",
            Action.NOTHING: "runs on",
            Action.REQUEUE: "waits suspended; Kueue requeues it",
        }[s.action]
        none = "none (the Jobs failed nothing)" if s.action is Action.REQUEUE else "none (the Job replaces the pod)"
        rows.append(f"| {s.name} | {does} | {f'`{s.rule}`' if s.rule else none} |")
    return "\n".join(rows) + "\n"


def test_the_docs_show_this_table() -> None:
    docs = (REPO / "docs" / "restarts.md").read_text(encoding="utf-8")
    assert scenario_table() in docs, "docs/restarts.md's scenario table is stale; paste scenario_table() into it"


def test_the_users_own_retry_code_restarts_once_configured() -> None:
    own = rendered(**{"scheduling.retry_exit_codes": [76]})
    assert decide(own, [main_exits(76)]).rule == "retry_exit_code"
    assert decide(own, [main_exits(ids.RETRY_EXIT_CODE)]).rule == "retry_exit_code"  # 75 stays one
    assert decide(own, [main_exits(77)]).action is Action.FAIL


def test_restarts_count_until_max_restarts_then_the_jobset_fails() -> None:
    assert decide(JOBSET, [main_exits(ids.RETRY_EXIT_CODE)], restarts=2).action is Action.RESTART
    last = decide(JOBSET, [main_exits(ids.RETRY_EXIT_CODE)], restarts=3)
    assert last.action is Action.FAIL and last.rule == "retry_exit_code"
    assert "ReachedMaxRestarts" in last.why


def test_the_why_names_the_rule_the_job_and_the_pod_rule() -> None:
    why = decide(JOBSET, [main_exits(1)]).why
    assert why == (
        "rule user_program_failed (FailJobSet): Job dp-example-pathways-head-0 failed with PodFailurePolicy "
        "(main exited 1: podFailurePolicy rule 2 (FailJob on exit codes of main NotIn [0, 75, 143]))"
    )


def test_a_headless_jobset_restarts_on_any_failed_job_by_default() -> None:
    headless = rendered(headless=True)
    decision = decide(headless, [PodFailure(HEAD, exit_code=1)])
    assert decision.action is Action.RESTART and decision.rule is None
    assert decision.why.startswith("no rule matched, JobSet's default (RestartJobSet, restart 1 of 3)")


# Hand-written JobSets for the rules pwdeploy does not render.


def jobset(policy: dict[str, Any] | None, *, head: dict[str, Any] | None = None) -> dict[str, Any]:
    job: dict[str, Any] = {"template": {"spec": {"containers": [{"name": "c"}]}}, **(head or {})}
    spec: dict[str, Any] = {
        "replicatedJobs": [{"name": "a", "template": {"spec": job}}, {"name": "b", "template": {"spec": {}}}]
    }
    if policy is not None:
        spec["failurePolicy"] = policy
    return {"metadata": {"name": "js"}, "spec": spec}


def test_without_a_failure_policy_a_failed_job_fails_the_jobset() -> None:
    decision = decide(jobset(None, head={"backoffLimit": 0}), [PodFailure("a", exit_code=1)])
    assert decision.action is Action.FAIL and decision.why.startswith("no failurePolicy: Job js-a-0 failed")


def test_the_job_backoff_limit_defaults_to_6() -> None:
    policy = jobset({"maxRestarts": 1})
    assert decide(policy, [PodFailure("a", exit_code=1, failed_before=5)]).action is Action.NOTHING
    assert decide(policy, [PodFailure("a", exit_code=1, failed_before=6)]).action is Action.RESTART


def test_ignore_max_restarts_restarts_without_counting() -> None:
    policy = jobset({"maxRestarts": 0, "rules": [{"name": "r", "action": "RestartJobSetAndIgnoreMaxRestarts"}]})
    decision = decide(policy, [PodFailure("b", exit_code=1, failed_before=6)], restarts=5)
    assert decision.action is Action.RESTART_UNCOUNTED and decision.restarts


def test_the_first_rule_matching_any_failed_job_wins_and_reasons_and_targets_must_all_hold() -> None:
    rules = [
        {"name": "only_b_deadline", "action": "FailJobSet", "onJobFailureReasons": ["DeadlineExceeded"]},
        {"name": "b", "action": "FailJobSet", "targetReplicatedJobs": ["b"]},
        {"name": "any", "action": "RestartJobSet"},
    ]
    policy = jobset({"maxRestarts": 2, "rules": rules}, head={"backoffLimit": 0})
    assert decide(policy, [PodFailure("a", exit_code=1)]).rule == "any"
    both = [PodFailure("a", exit_code=1), PodFailure("b", exit_code=1, failed_before=6)]
    assert decide(policy, both).rule == "b"


def test_the_job_that_failed_first_is_the_one_a_rule_matches() -> None:
    """b's first pod failure comes before a fails, but b fails after a: a rule matching both sees a first."""
    policy = jobset({"maxRestarts": 1, "rules": [{"name": "any", "action": "FailJobSet"}]}, head={"backoffLimit": 0})
    failures = [PodFailure("b", exit_code=1, failed_before=5), PodFailure("a", exit_code=1),
                PodFailure("b", exit_code=1)]  # fmt: skip
    decision = decide(policy, failures)
    assert [job.name for job in decision.jobs] == ["js-a-0", "js-b-0"]
    assert decision.why.startswith("rule any (FailJobSet): Job js-a-0 failed with BackoffLimitExceeded")


def test_message_patterns_search_the_job_controllers_message() -> None:
    pod_policy = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [3]}}]}
    rule = {"name": "exit3", "action": "RestartJobSet", "onJobFailureMessagePatterns": [r"exit code 3\b"]}
    policy = jobset({"maxRestarts": 1, "rules": [rule, {"name": "other", "action": "FailJobSet"}]},
                    head={"podFailurePolicy": pod_policy, "backoffLimit": 0})  # fmt: skip
    assert decide(policy, [PodFailure("a", exit_code=3)]).rule == "exit3"
    assert decide(policy, [PodFailure("a", exit_code=4)]).rule == "other"  # counted: BackoffLimitExceeded
    assert decide(policy, [PodFailure("a", exit_code=4)]).jobs[0].reason == "BackoffLimitExceeded"


def test_exit_code_0_and_other_containers_never_match_an_exit_code_rule() -> None:
    pod_policy = {"rules": [{"action": "FailJob", "onExitCodes": {"containerName": "c", "operator": "NotIn",
                                                                   "values": [1]}}]}  # fmt: skip
    policy = jobset({"maxRestarts": 1}, head={"podFailurePolicy": pod_policy, "backoffLimit": 2})
    assert decide(policy, [PodFailure("a", exit_code=0)]).action is Action.NOTHING
    assert decide(policy, [PodFailure("a", exit_code=9, container="sidecar")]).action is Action.NOTHING
    assert decide(policy, [PodFailure("a", exit_code=9)]).jobs[0].reason == "PodFailurePolicy"


def test_what_is_not_modelled_says_so() -> None:
    with pytest.raises(ValueError, match="'nope' is not a replicatedJob; valid: a, b"):
        decide(jobset({}), [PodFailure("nope", exit_code=1)])
    restart_job = jobset({"rules": [{"name": "r", "action": "RestartJob"}]}, head={"backoffLimit": 0})
    with pytest.raises(ValueError, match="'RestartJob' is not modelled"):
        decide(restart_job, [PodFailure("a", exit_code=1)])


def test_failure_messages_name_the_container_and_rule_index() -> None:
    pod_policy = {"rules": [{"action": "FailJob", "onPodConditions": [{"type": "ConfigIssue"}]}]}
    policy = jobset({"maxRestarts": 1}, head={"podFailurePolicy": pod_policy})
    job = decide(policy, [PodFailure("a", conditions=("ConfigIssue",))]).jobs[0]
    assert re.fullmatch(r"Pod <pod> has condition ConfigIssue matching FailJob rule at index 0", job.message)


def test_a_suspended_jobs_pods_are_never_counted_but_failjob_still_fails_it() -> None:
    """kubernetes pkg/controller/job/job_controller.go: deleteJobPods takes the tracking finalizer off a suspended
    Job's pods before deleting them, so counting (which reads only pods holding it) skips them, while
    getFailJobMessage reads every failed pod the Job lists."""
    requeued = decide(JOBSET, [suspended(HEAD, signal.SIGTERM)])
    assert requeued.action is Action.REQUEUE and requeued.runs_again and not requeued.restarts
    assert "not counted, its Job is suspended" in requeued.why
    assert "waits suspended until Kueue admits it" in requeued.why
    failed = decide(JOBSET, [suspended(HEAD, signal.SIGKILL)])
    assert failed.action is Action.FAIL
    assert "killed by SIGKILL (exit code 137) as its suspended Job's pod was deleted" in failed.why
    assert "podFailurePolicy rule 2 (FailJob" in failed.why


# Per-host counting (backoffLimitPerIndex), as pwdeploy renders the worker Jobs, and the wait before a replacement.

V5P_32 = rendered(**{"tpu.type": "v5p-32"})


def test_a_lost_multi_host_slice_is_one_failure_per_host_and_the_pods_are_replaced() -> None:
    """Four hosts lost at once (a v5p-32 slice whose node pool GKE recreates): each host counts one failure of its
    own backoffLimitPerIndex; nothing fails."""
    lost = [PodFailure(WORKER, conditions=DISRUPTED, host=h) for h in range(4)]
    decision = decide(V5P_32, lost)
    assert decision.action is Action.NOTHING
    assert "failure 1 of index 3 of backoffLimitPerIndex 4, the pod is replaced" in decision.jobs[0].why


def test_one_host_over_its_limit_fails_its_slice_and_the_jobset_restarts() -> None:
    fifth = PodFailure(WORKER, conditions=DISRUPTED, host=2, failed_before=4)
    decision = decide(V5P_32, [fifth])
    assert decision.action is Action.RESTART and decision.rule == "slice_lost"
    assert decision.jobs[0].reason == "MaxFailedIndexesExceeded"
    assert "failure 5 of index 2 counted, over backoffLimitPerIndex 4; 1 failed index(es), over maxFailedIndexes 0" in (
        decision.jobs[0].why
    )


def test_without_max_failed_indexes_a_failed_index_leaves_the_job_running() -> None:
    policy = jobset({"maxRestarts": 1}, head={"backoffLimitPerIndex": 0, "completionMode": "Indexed"})
    decision = decide(policy, [PodFailure("a", exit_code=1)])
    assert decision.action is Action.NOTHING and "fails (FailedIndexes) after" in decision.jobs[0].why
    fail_index = {"rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [3]}}]}
    limits = {"backoffLimitPerIndex": 5, "maxFailedIndexes": 0, "podFailurePolicy": fail_index}
    decision = decide(jobset({"maxRestarts": 1}, head=limits), [PodFailure("a", exit_code=3)])
    assert decision.action is Action.RESTART and decision.jobs[0].reason == "MaxFailedIndexesExceeded"


def test_backoff_limit_defaults_to_the_largest_int32_beside_backoff_limit_per_index() -> None:
    policy = jobset({"maxRestarts": 1}, head={"backoffLimitPerIndex": 10**6})
    assert decide(policy, [PodFailure("a", exit_code=1, failed_before=10**5)]).action is Action.NOTHING


def test_container_restarts_fail_the_job_once_they_reach_backoff_limit() -> None:
    """pastBackoffLimitOnFailure: restarts >= backoffLimit (a Job of backoffLimit 4 fails at its 4th restart)."""
    on_failure = {"template": {"spec": {"restartPolicy": "OnFailure", "containers": [{"name": "c"}]}}}
    policy = jobset({"maxRestarts": 1}, head={"backoffLimit": 4, **on_failure})
    assert decide(policy, [PodFailure("a", exit_code=1, failed_before=2)]).action is Action.NOTHING
    fourth = decide(policy, [PodFailure("a", exit_code=1, failed_before=3)])
    assert fourth.action is Action.RESTART and fourth.jobs[0].stops_pods_first
    zero = jobset({"maxRestarts": 1}, head={"backoffLimit": 0, **on_failure})
    assert decide(zero, [PodFailure("a", exit_code=1)]).action is Action.RESTART


def test_a_lost_slice_waits_10_s_for_its_replacements_not_10_s_per_host_doubled() -> None:
    """The Job controller's backoff: per Job, 10 s x 2^(failures - 1), every failed pod counted, so a lost 4-host
    slice waited 80 s (5 hosts 160 s, the 10-minute cap from 7); per host with backoffLimitPerIndex: 10 s."""
    assert replacement_delay_s(V5P_32, WORKER, hosts=4) == 10.0
    assert replacement_delay_s(V5P_32, WORKER, hosts=4, failed_before=1) == 20.0
    per_job = {"spec": {"replicatedJobs": [{"name": WORKER, "template": {"spec": {"backoffLimit": 16}}}]}}
    assert [replacement_delay_s(per_job, WORKER, hosts=n) for n in (1, 4, 5, 7, 16)] == [10, 80, 160, 600, 600]
