"""A stop from outside as a local fault (`local run --evict-after SECONDS`, `--evict-at-step N`, `--evict-by`): the
job's head pod deleted, and its main process stopped as the kubelet stops a container.

The kubelet asks the container runtime to send SIGTERM to the container's first process and, once the pod's
``terminationGracePeriodSeconds`` is over, SIGKILL (kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go
``killContainer``; runc ``kill`` signals the container's initial process). Here pwdeploy sends the SIGTERM to the
job's main process from outside its PID namespace, waits the grace period the rendered head pod gives, and kills
what is left. Whether main sees the SIGTERM is the kernel's to decide where the job runs in a PID namespace of its
own (``pwdeploy.local.unshare``: main is PID 1 exactly when the rendered head pod does not share its process
namespace); where namespaces cannot be made, ``sigterm_reaches`` plays the kernel's rule for a PID 1 (a signal
from outside reaches a namespace's init only when it has a handler for it, pid_namespaces(7); the handler is the
SigCgt mask of /proc/PID/status, proc(5)).

What deleted the pod (``CAUSES``, one row each) decides which conditions the failure evaluator sees: Kueue evicting
or preempting the job suspends the JobSet and the Job controller deletes the pods (no DisruptionTarget; a suspended
Job counts none of them), a person deleting the pod leaves no condition either, and the Eviction API (a drain), the
scheduler's preemption and the taint manager set DisruptionTarget first (kubernetes
pkg/registry/core/pod/storage/eviction.go ``addConditionAndDeletePod``).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from pwdeploy import identifiers as ids
from pwdeploy.stopping import SENT


class EvictionCause(NamedTuple):
    """What deleted the head pod, as `--evict-by` names it."""

    name: str
    said: str  # how the line before the SIGTERM names it
    conditions: tuple[str, ...]  # the pod conditions it sets
    suspends: bool  # the Jobs are suspended first (their pods are then never counted)


CAUSES: dict[str, EvictionCause] = {
    cause.name: cause
    for cause in (
        EvictionCause(
            "kueue",
            "as Kueue evicts or preempts a job: the JobSet suspended, its pods deleted without DisruptionTarget",
            (),
            True,
        ),
        EvictionCause("delete", "as a person deleting the head pod does: no DisruptionTarget", (), False),
        EvictionCause(
            "disruption",
            "as a drain (the Eviction API), the scheduler's preemption or the taint manager does: DisruptionTarget",
            ("DisruptionTarget",),
            False,
        ),
    )
}


@dataclass(frozen=True)
class Eviction:
    """When to stop the job from outside (after ``after`` seconds, or once runtime.step_done reached a step and
    created ``flag``), what stops it, and the pod's grace period."""

    cause: EvictionCause
    grace: float  # the rendered head pod's terminationGracePeriodSeconds
    main_is_pid_1: bool  # the rendered head pod does not share its process namespace
    after: float | None = None
    flag: Path | None = None  # the file runtime.step_done creates once the step given is done
    said: str = ""  # the flag that asked for it, as typed ("--evict-at-step 40")

    def due(self, elapsed: float) -> bool:
        if self.after is not None and elapsed >= self.after:
            return True
        return self.flag is not None and self.flag.exists()


@dataclass
class Evicted:
    """An eviction under way: when its SIGTERM went (``clock()``), whether main could see it, and whether the grace
    period ran out (the rest was SIGKILLed)."""

    at: float
    sigterm_seen: bool | None  # None: not known (main's handlers could not be read)
    killed: bool = False


def begin(
    eviction: Eviction,
    child: subprocess.Popen[bytes],
    main_pid: int | None,
    now: float,
    say: Callable[[str], None],
    *,
    emulate_pid_1: bool,
) -> Evicted:
    """Send the kubelet's SIGTERM to the job's main process (through ``child``: the launcher of its namespace, or
    main itself), saying so. ``main_pid``: main as this machine sees it, to read its handlers; ``emulate_pid_1``: the
    job runs without a PID namespace of its own, so the kernel's rule for a PID 1 is applied here."""
    say(
        f"pwdeploy local: evicting the job ({eviction.said}, {eviction.cause.said}): SIGTERM to main, SIGKILL "
        f"after the head pod's grace period of {eviction.grace:g} s"
    )
    seen = sigterm_reaches(main_pid) if eviction.main_is_pid_1 and main_pid is not None else True
    if not (emulate_pid_1 and eviction.main_is_pid_1 and seen is False):
        child.send_signal(signal.SIGTERM)
    if eviction.main_is_pid_1 and seen is False:
        say(
            "pwdeploy local: main is PID 1 of its container (the head pod does not share its process namespace) and "
            f"has no SIGTERM handler: the kernel drops the SIGTERM, and main runs on until the SIGKILL in "
            f"{eviction.grace:g} s (exit 137)"
        )
    if eviction.flag is not None:  # runtime.step_done waits at the step for this
        with contextlib.suppress(OSError):
            Path(f"{eviction.flag}{SENT}").touch()
    return Evicted(now, seen)


def sigterm_reaches(pid: int) -> bool | None:
    """Whether a SIGTERM from outside its namespace reaches ``pid`` as a namespace's init: only when it has a
    handler (SigCgt); None when its status cannot be read."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            fields = dict(line.split(":", 1) for line in status if ":" in line)
        caught = int(fields["SigCgt"].strip(), 16)
    except (OSError, KeyError, ValueError):
        return None
    return bool(caught & (1 << (signal.SIGTERM - 1)))


def step_env(at_step: int, flag: Path) -> dict[str, str]:
    """What the job's first run gets for --evict-at-step: runtime.step_done creates ``flag`` at that step."""
    return {ids.EVICT_AT_STEP_ENV: str(at_step), ids.EVICT_FLAG_ENV: str(flag)}
