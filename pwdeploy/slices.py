"""The slices of an elastic job, in the job's own process: which devices make each slice, the elastic manager over
them, and (in a local run) the emulated loss and return of a slice.

On Pathways every device has a ``slice_index`` and pathwaysutils' ``Manager`` groups devices by it
(``pathwaysutils.elastic.elastic.get_slice_to_devices``). A local run supplies the grouping
(``PWDEPLOY_LOCAL_SLICE_LAYOUT``), and its probe gives the emulated CPU devices that ``slice_index``
(``pwdeploy/local/transfer_probe``: a property on jax's ``Device`` class; an attribute cannot be set on a device,
and wrapper objects fail the manager's health check, which runs a real computation on each slice's devices). A
process without the probe (``local env``'s variables, a test) still groups by the layout: the real ``Manager`` is
built over the real devices with that grouping in place of the ``slice_index`` lookup.

The emulated loss is pathwaysutils' own ``DeviceLossSimulator`` (``pathwaysutils/test/mock_fault_injection.py``):
once a slice is marked lost, reading an array that lives on one of its devices raises
``jax.errors.JaxRuntimeError("DATA_LOSS: ...")``, the status Pathways gives a computation on a lost slice and the
one ``is_error_due_to_slice_down`` recognises. It patches ``jax.jit``, so it starts before the job jits its step:
``elastic_manager()`` starts it, and the job builds the manager first.

Imports: the standard library and pwdeploy.identifiers at import time; jax and pathwaysutils inside functions.
"""

from __future__ import annotations

import json
import os
import sys
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pwdeploy import identifiers as ids

Schedule = dict[int, list[int]]  # step -> the slices lost (or back) once that step is done


class ScheduleError(ValueError):
    """A SLICE@STEP list or a slice layout that does not parse."""


def parse_schedule(value: str, name: str = ids.LOSE_SLICE_ENV) -> list[tuple[int, int]]:
    """``"1@40,0@90"`` -> ``[(1, 40), (0, 90)]``: (slice, step) pairs, SLICE >= 0, STEP >= 1."""
    pairs = []
    for item in filter(None, (part.strip() for part in value.split(","))):
        slice_text, at, step_text = item.partition("@")
        try:
            pair = (int(slice_text), int(step_text))
        except ValueError:
            pair = (-1, 0)
        if not at or pair[0] < 0 or pair[1] < 1:
            raise ScheduleError(f"{name}: {item!r} is not SLICE@STEP (a slice index >= 0, a step >= 1), e.g. 1@40")
        pairs.append(pair)
    return pairs


def format_schedule(pairs: Sequence[tuple[int, int]]) -> str:
    return ",".join(f"{slice_index}@{step}" for slice_index, step in pairs)


def format_layout(slices: int, devices: int) -> str:
    """``devices`` emulated devices split into ``slices`` slices of consecutive ids: ``"0-3 4-7"``."""
    size = devices // slices
    return " ".join(f"{i * size}-{(i + 1) * size - 1}" for i in range(slices))


def parse_layout(value: str) -> dict[int, list[int]]:
    """``"0-3 4-7"`` -> ``{0: [0, 1, 2, 3], 1: [4, 5, 6, 7]}`` (slice index -> device ids)."""
    layout = {}
    for index, item in enumerate(value.split()):
        first, _, last = item.partition("-")
        try:
            ids_ = list(range(int(first), int(last or first) + 1))
        except ValueError:
            raise ScheduleError(f"{ids.LOCAL_SLICE_LAYOUT_ENV}: {item!r} is not FIRST-LAST") from None
        layout[index] = ids_
    return layout


def slice_to_devices(devices: Sequence[Any], environ: Mapping[str, str] | None = None) -> dict[int, list[Any]]:
    """Slice index -> its devices: by ``device.slice_index`` on Pathways, else by the local run's layout (every
    device one slice when neither says more)."""
    if all(getattr(d, "slice_index", None) is not None for d in devices):
        grouped: dict[int, list[Any]] = {}
        for device in devices:
            grouped.setdefault(device.slice_index, []).append(device)
        return grouped
    env = os.environ if environ is None else environ
    value = env.get(ids.LOCAL_SLICE_LAYOUT_ENV, "").strip()
    if not value:
        return {0: list(devices)}
    by_id = {d.id: d for d in devices}
    layout = parse_layout(value)
    missing = sorted(i for members in layout.values() for i in members if i not in by_id)
    if missing:
        raise ScheduleError(f"{ids.LOCAL_SLICE_LAYOUT_ENV}={value!r} names devices {missing} this process lacks")
    return {index: [by_id[i] for i in members] for index, members in layout.items()}


def elastic_manager(environ: Mapping[str, str] | None = None) -> Any:
    """pathwaysutils' ``Manager`` over every device, grouped into slices by ``slice_to_devices``; in a local run
    with slice losses to emulate (on its first attempt), the emulation starts here too. Call it before jitting."""
    import jax
    from pathwaysutils.elastic import elastic, manager

    env = os.environ if environ is None else environ
    devices = jax.devices()
    layout = slice_to_devices(devices, env)
    if all(getattr(d, "slice_index", None) is not None for d in devices):
        built = manager.Manager(devices)
    else:
        from unittest import mock

        # The one lookup the manager makes by slice_index, answered with the supplied layout while it is built;
        # from then on it uses its own slice_to_devices.
        with mock.patch.object(elastic, "get_slice_to_devices", lambda _devices: layout):
            built = manager.Manager(devices)
    losses, returns = (_schedule(env, name) for name in (ids.LOSE_SLICE_ENV, ids.RESTORE_SLICE_ENV))
    global _EMULATION
    if (losses or returns) and env.get(ids.RESTART_ATTEMPT_ENV, "0").strip() in ("", "0"):
        _EMULATION = Emulation(built, layout, losses, returns, env.get(ids.ELASTIC_EVENTS_ENV) or None)
        _EMULATION.simulator.start()
    return built


def _schedule(env: Mapping[str, str], name: str) -> Schedule:
    schedule: Schedule = {}
    for slice_index, step in parse_schedule(env.get(name, ""), name):
        schedule.setdefault(step, []).append(slice_index)
    return schedule


def step_done(step: int) -> None:
    """Where ``runtime.step_done`` hands over: the emulation's losses and returns due at ``step``, if any."""
    if _EMULATION is not None:
        _EMULATION.step_done(step)


@dataclass
class Pending:
    """A loss or return emulated at ``step``, waiting for the first step done on the slices it leaves."""

    kind: str  # "lost" or "returned"
    slice_index: int
    step: int
    at: float  # time.monotonic() when it happened
    highest: int  # the highest step done before it: a step at or below it done again was re-done


@dataclass
class Emulation:
    """The slice losses and returns of a local run, applied when their step is done; each reported (one JSON line
    in the events file, one line on stderr) at the first step done after it on the slices it leaves."""

    manager: Any
    layout: Mapping[int, Sequence[Any]]
    losses: Schedule
    returns: Schedule
    events_path: str | None
    simulator: Any = None
    pending: list[Pending] = field(default_factory=list)
    highest: int = 0

    def __post_init__(self) -> None:
        self.simulator = _simulator()

    def step_done(self, step: int) -> None:
        now = time.monotonic()
        active = set(self.manager.active_slice_indices)
        for event in list(self.pending):
            if (event.slice_index in active) == (event.kind == "returned"):
                self.pending.remove(event)
                self._report(event, step, now, active)
        self.highest = max(self.highest, step)
        for slice_index in self.losses.pop(step, []):
            self.simulator.mark_slice_lost(slice_index, self.layout)
            self.pending.append(Pending("lost", slice_index, step, time.monotonic(), self.highest))
        back = self.returns.pop(step, [])
        if back:
            self._bring_back(back, step)

    def _bring_back(self, back: list[int], step: int) -> None:
        """Reconnect ``back`` and make it visible now, as the manager's monitor would at its next poll: the same
        health check over the inactive slices, its answer put where the job looks (``available_inactive_slices``)."""
        from pathwaysutils.elastic import elastic

        for slice_index in back:
            self.simulator.mark_slice_connected(slice_index, self.layout)
            self.pending.append(Pending("returned", slice_index, step, time.monotonic(), self.highest))
        inactive = {i: self.layout[i] for i in self.manager.inactive_slice_indices}
        found = set(elastic.get_active_slice_indices(inactive)) if inactive else set()
        self.manager.available_inactive_slices = frozenset(found - set(self.manager.active_slice_indices))

    def _report(self, event: Pending, step: int, now: float, active: set[int]) -> None:
        record = {
            "event": event.kind,
            "slice": event.slice_index,
            "step": event.step,
            "active_slices": sorted(active),
            "seconds_to_next_step": round(now - event.at, 6),
            "next_step": step,
            "steps_redone": max(0, event.highest - step + 1),
        }
        what = "lost (emulated)" if event.kind == "lost" else "is back"
        print(
            f"pwdeploy local: step {event.step}: slice {event.slice_index} {what}; training goes on with slices "
            f"{sorted(active)}",
            file=sys.stderr,
            flush=True,
        )
        if self.events_path is not None:
            with open(self.events_path, "a", encoding="utf-8") as events:
                events.write(json.dumps(record) + "\n")


_EMULATION: Emulation | None = None


def _simulator() -> Any:
    """pathwaysutils' DeviceLossSimulator, whose bookkeeping forgets each array when it is freed: it keys arrays by
    ``id()``, and a new array given a freed lost one's id would otherwise read as lost too."""
    import jax
    from pathwaysutils.test.mock_fault_injection import DeviceLossSimulator

    class ForgettingSimulator(DeviceLossSimulator):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self._watched: set[int] = set()

        def track_array(self, arr: Any) -> None:
            super().track_array(arr)
            key = id(arr)
            if isinstance(arr, jax.Array) and not isinstance(arr, jax.core.Tracer) and key not in self._watched:
                self._watched.add(key)
                weakref.finalize(arr, self._forget, key)

        def _forget(self, key: int) -> None:
            self._watched.discard(key)
            self._array_devices.pop(key, None)
            self._array_generation.pop(key, None)
            self._corrupted_array_ids.discard(key)

    return ForgettingSimulator()
