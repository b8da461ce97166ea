"""The bounded hand-off between a forwarded stream's reading thread and the thread writing the local connection."""

from __future__ import annotations

import threading

from pwdeploy.kube.handoff import Handoff


def test_items_come_out_in_order_one_writer_at_a_time() -> None:
    handoff = Handoff(limit=100)
    error = ConnectionResetError("reset")
    for item in (b"a", b"bc", error):
        assert handoff.put(item)
    assert handoff.waiting()
    assert handoff.get() == b"a"
    assert not handoff.claim()  # the writing thread writes "a": the reader may not write past it
    handoff.release()
    assert handoff.get() == b"bc"
    handoff.release()
    assert not handoff.waiting()
    assert handoff.get() is error


def test_the_reader_writes_itself_only_when_nothing_is_queued_or_being_written() -> None:
    handoff = Handoff(limit=100)
    assert handoff.claim()
    assert not handoff.claim()
    handoff.release()
    handoff.put(b"queued")
    assert not handoff.claim()  # it would overtake the queued bytes
    assert handoff.get() == b"queued"
    handoff.release()
    assert handoff.claim()


def test_a_full_handoff_holds_the_reader_until_the_writer_takes_something() -> None:
    handoff = Handoff(limit=4)
    assert handoff.put(b"abcd")
    done = threading.Event()
    results: list[bool] = []

    def reader() -> None:
        results.append(handoff.put(b"e"))
        done.set()

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    assert not done.wait(0.05)  # still waiting for room (a slow machine can only make this pass, never fail)
    assert handoff.get() == b"abcd"
    handoff.release()
    assert done.wait(5)
    assert results == [True]
    assert handoff.get() == b"e"


def test_closing_releases_a_waiting_reader_and_refuses_more() -> None:
    handoff = Handoff(limit=1)
    handoff.put(b"x")
    results: list[bool] = []
    thread = threading.Thread(target=lambda: results.append(handoff.put(b"y")), daemon=True)
    thread.start()
    handoff.close()
    thread.join(5)
    assert results == [False]
    assert not handoff.put(b"z")
