"""The timeline's line handling and its streaming, against DrillStub (a loopback stub, not an API server: every
follow stream it serves ends after what it has, so every read here is resumed): lines stamped before the line
before them and after one stamped far ahead are kept, a line without a newline is bounded and shown, a read stops
at the limitBytes it asked for whatever the server sends, events without a uid stay apart, and the first lines come
out while most pods are still being read. The resume bookkeeping and the reordering window are checked directly."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pwdeploy import identifiers as ids
from pwdeploy.cluster.interleave import Interleave
from pwdeploy.cluster.log_reads import MAX_LINE_BYTES, Position, pieces, shown
from pwdeploy.cluster.milestones import Milestones
from pwdeploy.cluster.timeline import Entry, Selection, Timeline
from tests.drill_stub import DrillStub, stamp
from tests.fake_clock import FakeClock
from tests.test_drill_stub import NAME, NS, World
from tests.test_timeline_stub import connect, worker_lines

NOW = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
WORKER = Selection(component="worker", slice_index=0, host=0)


@pytest.fixture
def kubeconfig(drill_stub: DrillStub, tmp_path: Path) -> Path:
    return drill_stub.write_kubeconfig(tmp_path / "kc", {"stub": ("stub-token", None)}, current="stub")


def worker_pod(world: World) -> str:
    return str(
        next(
            p["metadata"]["name"]
            for p in world.pods(ids.WORKER_JOB)
            if p["metadata"]["labels"][ids.JOB_INDEX_LABEL] == "0"
            and p["metadata"]["labels"][ids.COMPLETION_INDEX_LABEL] == "0"
        )
    )


def test_the_resume_second_follows_the_last_line_and_counts_what_a_read_sends_again() -> None:
    position = Position()
    for at in (1.0, 2.0, 2.5):
        position.given(stamp(at), NOW)
    assert (position.since, position.sent_again()) == ("2026-01-01T00:05:02Z", 2)
    position.given(stamp(0.5), NOW)  # the node's clock stepped back: the resume second goes back with it
    assert (position.since, position.sent_again()) == ("2026-01-01T00:05:00Z", 4)
    position.given("2027-06-01T00:00:00.000000000Z", NOW)  # far ahead: given, counted, the resume second stays
    assert (position.since, position.sent_again()) == ("2026-01-01T00:05:00Z", 5)
    position.given(stamp(3.0), NOW)
    assert (position.since, position.sent_again()) == ("2026-01-01T00:05:03Z", 2)  # :03 and the one far ahead


@pytest.mark.parametrize("max_streams", [0, 4], ids=["polled", "streamed"])
@pytest.mark.parametrize(
    ("first", "then"),
    [
        ([("a", 5.9)], [("b", 5.1)]),  # stepped back within the second a read resumes from
        ([("a", 5.0), ("b", 3.0)], [("c", 4.0)]),  # stepped back, then a line after it: the one before not again
        ([("a", 1.0), ("z", 3.15e7)], [("b", 2.0)]),  # a line stamped a year ahead does not hold the rest back
    ],
    ids=["within a second", "across seconds", "far ahead"],
)
def test_lines_stamped_before_the_last_line_are_kept_and_none_repeated(
    drill_stub: DrillStub, kubeconfig: Path, max_streams: int, first: list[Any], then: list[Any]
) -> None:
    world = World(drill_stub)
    log = drill_stub.timed_logs[(NS, worker_pod(world), ids.WORKER_CONTAINER)]
    log += [(stamp(at), text) for text, at in first]
    got: list[Entry] = []

    def job(sleeps: int) -> None:
        if sleeps == 10:
            log.extend((stamp(at), text) for text, at in then)  # after the first lines were read and the stream ended
        if sleeps == 40:
            world.set_status(0, failed=True)

    clock = FakeClock(job)
    timeline = Timeline(connect(kubeconfig, clock), NS, NAME, got.append, selection=WORKER, max_streams=max_streams,
                        poll=0.01, window=0)  # fmt: skip
    timeline.run()
    assert sorted(e.text for e in got if e.kind == "log") == sorted(text for text, _ in first + then)


def test_a_line_without_a_newline_is_held_in_bounded_pieces_and_shown_as_a_terminal_shows_it(
    drill_stub: DrillStub, kubeconfig: Path
) -> None:
    world = World(drill_stub)
    frame = "\r 42%|####2     | 4200/10000 [00:42<00:58, 99.9it/s]"
    bar = frame * (3 * MAX_LINE_BYTES // len(frame))  # a tqdm bar redrawn for 192 KiB, no newline yet
    drill_stub.timed_tails[(NS, worker_pod(world), ids.WORKER_CONTAINER)] = (stamp(1.0), bar)
    got: list[Entry] = []
    Timeline(connect(kubeconfig, FakeClock()), NS, NAME, got.append, selection=WORKER, follow=False, window=0).run()
    logs = [e for e in got if e.kind == "log"]
    assert len(logs) == 3  # two full pieces as they came, and the rest once the read was the last
    assert all(frame.strip("\r").startswith(e.text) and e.text for e in logs)  # the last redraw in each
    assert all(e.time == stamp(1.0) for e in logs)


def test_pieces_never_hold_more_than_a_line_bound_and_stop_at_the_limit() -> None:
    chunks = [b"2026-01-01T00:05:01.000000000Z " + b"x" * (MAX_LINE_BYTES + 10) + b"\nshort\n"]
    found = list(pieces(iter(chunks), None))
    assert [p.kind for p in found[:-1]] == ["part", "line", "line"] and found[-1] == len(chunks[0])  # type: ignore[union-attr]
    assert all(len(p.text) <= MAX_LINE_BYTES for p in found[:-1])  # type: ignore[union-attr]
    limited = list(pieces(iter([b"one\ntwo\nthree\n"]), 6))
    assert [getattr(p, "text", p) for p in limited] == ["one", "tw", 6]
    assert shown("\r 10%|#\r 20%|##\r") == " 20%|##" and shown("plain") == "plain"


def test_a_read_stops_at_the_limit_it_asked_for_when_the_server_sends_more(
    drill_stub: DrillStub, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pwdeploy.cluster import timeline_reads

    monkeypatch.setattr(timeline_reads, "READ_LIMIT_BYTES", 300)
    world = World(drill_stub)
    worker_lines(world, 0, 0, [f"line {i} " + "x" * 60 for i in range(20)], at=-20.0, apart=0.1)
    drill_stub.ignores_limit_bytes = True
    got: list[Entry] = []
    Timeline(connect(kubeconfig, FakeClock()), NS, NAME, got.append, selection=WORKER, follow=False, window=0).run()
    logs = [e.text for e in got if e.kind == "log"]
    assert logs == [f"line {i} " + "x" * 60 for i in range(len(logs))] and 0 < len(logs) < 5
    assert any("is longer than 300 bytes: the rest is not shown here" in e.text for e in got if e.origin == "job")


def test_events_without_a_uid_stay_apart() -> None:
    said: list[str] = []
    milestones = Milestones(NAME, lambda kind, time, origin, text: said.append(text))
    milestones.own(frozenset({"js", "w0", "w1"}))  # the job's objects: its JobSet and two worker Jobs
    jobset, w0, w1 = ({"name": n, "uid": u} for n, u in ((NAME, "js"), (f"{NAME}-worker-0", "w0"),
                                                         (f"{NAME}-worker-1", "w1")))  # fmt: skip
    events = [  # none has a uid of its own; the last two no name either
        {"metadata": {"name": f"{NAME}.a"}, "involvedObject": jobset, "reason": "A", "message": "one"},
        {"metadata": {"name": f"{NAME}.b"}, "involvedObject": jobset, "reason": "B", "message": "two"},
        {"metadata": {}, "involvedObject": w0, "reason": "C", "message": "three"},
        {"metadata": {}, "involvedObject": w1, "reason": "C", "message": "four"},
    ]
    milestones.events(events)
    milestones.events(events)  # the next look: nothing again
    assert [text.rsplit(": ", 1)[1] for text in said] == ["one", "two", "three", "four"]


def test_the_window_gives_lines_in_stamp_order_within_it_and_holds_each_no_longer() -> None:
    now = [0.0]
    out: list[str] = []
    window = Interleave(out.append, window=1.0, clock=lambda: now[0])
    window.put("b", stamp(2.0))
    now[0] = 0.5
    window.put("a", stamp(1.0))  # later, but earlier stamped: comes out first
    window.put("c", stamp(9.0))
    assert window.release() == 0
    now[0] = 1.0  # b waited its window: out, with everything stamped before it
    assert window.release() == 2 and out == ["a", "b"]
    now[0] = 1.5
    assert window.release() == 1 and out == ["a", "b", "c"]
    late = Interleave(out.append, window=10.0, max_held=2, clock=lambda: 0.0)
    for text, at in (("x", 3.0), ("y", 1.0), ("z", 2.0)):
        late.put(text, stamp(at))
    assert late.release() == 1 and out[-1] == "y"  # over the bound: the earliest stamp goes out at once
    heavy = Interleave(out.append, window=10.0, max_bytes=100, clock=lambda: 0.0)
    heavy.put("big", stamp(5.0), 80)
    heavy.put("bigger", stamp(4.0), 80)  # 160 bytes held: over, the earliest stamp goes
    assert heavy.release() == 1 and out[-1] == "bigger" and heavy.held() == 1


def test_the_first_lines_come_out_while_most_pods_are_still_being_read(drill_stub: DrillStub, kubeconfig: Path) -> None:
    world = World(drill_stub, slices=16)  # 1 head and 32 workers
    for s in range(16):
        for h in range(world.hosts):
            worker_lines(world, s, h, [f"worker {s}/{h} up"], at=-5.0)
    drill_stub.latency = 0.02  # every answer
    unread_at_first: list[int] = []
    progress: list[str] = []
    timeline: Timeline

    def emit(entry: Entry) -> None:
        if entry.kind == "log" and not unread_at_first:
            unread_at_first.append(timeline.readers.unread_pods()[0])

    timeline = Timeline(connect(kubeconfig, FakeClock()), NS, NAME, emit, follow=False, max_streams=2,
                        window=0.05, on_progress=progress.append)  # fmt: skip
    timeline.run()
    assert unread_at_first and unread_at_first[0] > 16, unread_at_first  # most of the 33 pods not read yet
    assert any(p.endswith("of 33 pods still being read") for p in progress), progress
    assert progress[-1] == "read the logs of 33 pods"


def test_the_api_timeline_is_an_iterator_of_the_same_entries_against_the_stub(
    drill_stub: DrillStub, kubeconfig: Path
) -> None:
    """api.timeline gives, one by one, what the timeline's emit is given, and says how it ended; a selection the
    job does not have is the caller's ArgumentError, found before anything is read."""
    from pwdeploy import api
    from pwdeploy.errors import ArgumentError

    world = World(drill_stub)
    worker_lines(world, 0, 0, [f"step {i}" for i in range(5)], at=-20.0, apart=0.1)
    emitted: list[Entry] = []
    Timeline(connect(kubeconfig, FakeClock()), NS, NAME, emitted.append, selection=WORKER, follow=False).run()
    cluster = api.Cluster(connect(kubeconfig, FakeClock()), NS)
    read = api.timeline(cluster, NAME, component="worker", slice_index=0, host=0)
    entries = list(read)
    assert [e.text for e in entries if e.kind == "log"] == [f"step {i}" for i in range(5)]
    assert [(e.kind, e.text) for e in entries] == [(e.kind, e.text) for e in emitted] and read.end == "now"
    with pytest.raises(ArgumentError) as caught:
        api.timeline(cluster, NAME, component="worker", slice_index=7)
    assert caught.value.field == "slice_index" and "has no slice 7" in caught.value.message


def test_a_timeline_stopped_by_ctrl_c_stops_its_reads_and_hands_out_what_it_held_against_the_stub(
    drill_stub: DrillStub, kubeconfig: Path
) -> None:
    """Ctrl-C while a consumer iterates: it reaches the consumer, every read of pwdeploy's stops (the stub's own
    threads still serving the closed streams aside), nothing has an end yet, and what the window held is held()
    (the CLI prints it before "Stopped following"), none of it given twice."""
    import threading
    import time

    def interrupt(sleeps: int) -> None:
        if sleeps > 2 and threading.current_thread() is threading.main_thread():  # Ctrl-C reaches it only
            raise KeyboardInterrupt

    world = World(drill_stub)
    worker_lines(world, 0, 0, [f"step {i}" for i in range(5)], at=-20.0, apart=0.1)
    before = set(threading.enumerate())
    timeline = Timeline(connect(kubeconfig, FakeClock(interrupt)), NS, NAME, selection=WORKER, window=60)
    got: list[Entry] = []
    with pytest.raises(KeyboardInterrupt):
        got.extend(timeline)
    given = [*got, *timeline.held()]
    assert timeline.end is None and timeline.held() == []
    assert len({(e.origin, e.time, e.text) for e in given}) == len(given)
    ours = [t for t in threading.enumerate() if t not in before and "process_request" not in t.name]  # the stub's
    while ours:  # the reads end once told to stop (pytest-timeout bounds the wait)
        time.sleep(0.05)
        ours = [t for t in ours if t.is_alive()]
