"""The example's choice of the steps to checkpoint: Orbax's save-decision policies, by time unless a step interval
is asked for (examples/data_parallel/checkpointing.py; docs/checkpoints.md)."""

from __future__ import annotations

import datetime
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "examples" / "data_parallel"))
from checkpointing import NotBefore, save_policy

START = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)


def info(step: int, seconds: float) -> Any:
    """What Orbax tells a policy about a step: its number and when it was reached."""
    return SimpleNamespace(step=step, time=START + datetime.timedelta(seconds=seconds), metrics=None)


class AlwaysSaveStub:
    """A stand-in for Orbax's continuous policy (whose real decision needs Orbax's signaling client)."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def should_save(self, step: Any, previous_steps: Any, *, context: Any) -> bool:
        self.asked.append(step.step)
        return True


def test_no_save_in_a_runs_first_interval_then_the_policy_decides_stub() -> None:
    inner = AlwaysSaveStub()
    policy = NotBefore(inner, 5)
    decisions = [policy.should_save(info(step, s), [], context=None) for step, s in [(1, 0), (2, 4.9), (3, 5), (4, 9)]]
    assert decisions == [False, False, True, True]
    assert inner.asked == [3, 4]  # the wrapped policy is asked only once the interval has passed


@pytest.mark.slow  # imports orbax
def test_a_step_interval_saves_its_multiples_and_the_last_step() -> None:
    policy = save_policy(steps=12, every=5, seconds=5)
    saved = [step for step in range(1, 13) if policy.should_save(info(step, step), [], context=None)]
    assert saved == [5, 10, 12]
    only_last = save_policy(steps=12, every=0, seconds=5)
    assert [s for s in range(1, 13) if only_last.should_save(info(s, s), [], context=None)] == [12]
