"""The report of `pwdeploy drill`: what ``drill.follow`` saw beside what `local run` predicts
(``drill.predict``), as data (``report_document``, the ``-o json`` shape of docs/drill.md) and as text
(``report_lines``). A difference between the two is a finding."""

from __future__ import annotations

from typing import Any

from pwdeploy.drill.follow import Before, Observed
from pwdeploy.drill.inject import Injected
from pwdeploy.drill.plan import Fault, Prediction
from pwdeploy.text import printable

MATCHES = {
    "jobset_restart": {"jobset_restart"},
    "job_ends": {"job_ended"},
    "pod_replaced": {"pod_replaced", "container_restarted"},
    "elastic_recovery": {"elastic_recovery"},
}


def steps_lost(seen: Observed) -> int | None:
    if seen.first_step is None or seen.last_step is None:
        return None
    return max(0, seen.last_step - seen.first_step + 1)


def findings(prediction: Prediction, seen: Observed, was: Before, injected: Injected) -> list[str]:
    """Where the cluster did not do what `local run` predicts, what of the fault was not confirmed, and other
    things worth a look."""
    found = [f"the fault was injected in part: {injected.detail()}"] if injected.missed else []
    if seen.outcome != "none" and seen.outcome not in MATCHES[prediction.outcome]:
        found.append(
            f"local run predicts {prediction.outcome} ({prediction.why}); the cluster did {seen.outcome} "
            f"({seen.detail})"
        )
    if seen.outcome == "none" and injected.unconfirmed is not None:
        found.append(
            f"the signal was not confirmed ({injected.unconfirmed}) and no controller reacted before following "
            f"stopped ({seen.stopped}): the fault may not have happened"
        )
    elif seen.outcome == "none" and injected.state != "interrupted":
        found.append(f"no controller reacted to the fault before following stopped ({seen.stopped})")
    if seen.error is not None:
        found.append(f"following stopped on an error; what was measured before it is above: {seen.error}")
    if seen.counted - was.counted > 0 and was.max_restarts and seen.counted >= was.max_restarts:
        found.append(f"every restart of maxRestarts {was.max_restarts} is used: the next failure ends the job")
    return found + seen.notes


def report_document(
    name: str, namespace: str, fault: Fault, injected: Injected, prediction: Prediction, was: Before, seen: Observed
) -> dict[str, Any]:
    """The report's ``-o json`` shape (docs/drill.md): ``fault.pods`` are the pods the API server confirmed the
    fault reached, ``fault.injection`` how much of it was confirmed."""
    decision = prediction.decision
    return {
        "job": name,
        "namespace": namespace,
        "fault": {
            "kind": fault.kind,
            "slice": fault.slice_index,
            "host": fault.host,
            "exit_code": fault.exit_code,
            "pods": list(injected.hit),
            "injection": injected.state,
            "injection_detail": injected.detail(),
            "not_hit": [{"pod": pod, "why": why} for pod, why in injected.missed],
        },
        "predicted": {
            "outcome": prediction.outcome,
            "rule": decision.rule if decision is not None else None,
            "why": prediction.why,
        },
        "rule_fired": seen.outcome,
        "rule_detail": seen.detail,
        "first_failed_job": seen.first_failed_job,
        "seconds_to_detection": _rounded(seen.detected_s),
        "seconds_to_all_running": _rounded(seen.running_s),
        "seconds_to_first_step": _rounded(seen.first_step_s),
        "last_step_before": seen.last_step,
        "first_step_after": seen.first_step,
        "steps_lost": steps_lost(seen),
        "restarts_consumed": seen.counted - was.counted,
        "restarts_total": seen.restarts,
        "max_restarts": was.max_restarts,
        "stopped": seen.stopped,
        "findings": findings(prediction, seen, was, injected),
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def report_lines(doc: dict[str, Any]) -> list[str]:
    """The report as text: one fact a line."""

    def secs(key: str) -> str:
        return "-" if doc[key] is None else f"{doc[key]:.1f} s"

    lost = "unknown (no step reports)" if doc["steps_lost"] is None else str(doc["steps_lost"])
    lines = [
        f"drill report: job {doc['job']} (namespace {doc['namespace']}), stopped: {doc['stopped']}",
        f"  fault:                {doc['fault']['kind']} ({', '.join(doc['fault']['pods'])}), "
        f"{doc['fault']['injection']}"
        + (f": {doc['fault']['injection_detail']}" if doc["fault"]["injection_detail"] else ""),
        f"  predicted (local run): {doc['predicted']['outcome']}: {doc['predicted']['why']}",
        f"  rule that fired:      {doc['rule_fired']}{': ' + doc['rule_detail'] if doc['rule_detail'] else ''}",
        f"  detection:            {secs('seconds_to_detection')}",
        f"  every pod running:    {secs('seconds_to_all_running')}",
        f"  first step after:     {secs('seconds_to_first_step')}"
        + (f" (step {doc['first_step_after']})" if doc["first_step_after"] is not None else ""),
        f"  steps lost:           {lost}",
        f"  restarts consumed:    {doc['restarts_consumed']} (of maxRestarts {doc['max_restarts']}; "
        f"{doc['restarts_total']} in all)",
    ]
    lines += [f"  finding: {f}" for f in doc["findings"]]
    return [printable(line) for line in lines]
