"""Watches (pwdeploy.kube.watch) against WatchFake (tests/watch_fake.py), for what the real control plane cannot do
on demand: a watch answered with 410 itself, a silent connection, events too large, trickling or of the wrong
shape, a stream cut inside an event. What the real one does (list then watch, a dropped connection resumed, 410 as
an ERROR event relisted, bookmarks) is proved in tests/test_control_plane_watch.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pwdeploy.kube.api_errors import ApiError
from pwdeploy.kube.kubeconfig import load_kube
from pwdeploy.kube.resources import PODS, Action
from pwdeploy.kube.seam import Kube, WatchBounds
from pwdeploy.kube.watch import Mirror, Mirrors
from pwdeploy.kube.watch_stream import Listing, parse_event
from tests.fake_clock import FakeClock
from tests.watch_fake import Script, WatchFake, bookmark, event, pod

LISTING = Listing(PODS, "default", labels="app=x")


@pytest.fixture
def fake() -> Iterator[WatchFake]:
    with WatchFake() as server:
        yield server


@pytest.fixture
def kube(fake: WatchFake, tmp_path: Path) -> Kube:
    return load_kube(fake.write_kubeconfig(tmp_path / "kubeconfig"))


class Changes:
    """Counts ``changed`` calls and lets a test wait for a condition on the mirror."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def __call__(self) -> None:
        self.event.set()

    def until(self, holds: object, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not holds():  # type: ignore[operator]
            assert time.monotonic() < deadline, "not in time"
            self.event.wait(0.05)
            self.event.clear()


def names(mirror: Mirror) -> set[str]:
    return {str(o["metadata"]["name"]) for o in mirror.objects()}


def test_a_watch_answered_with_410_lists_again_and_watches_from_the_new_list_against_fake(
    fake: WatchFake, kube: Kube
) -> None:
    fake.pods = [pod("a", 90)]
    fake.scripts.put(Script(status=410))
    fake.scripts.put(Script([event("ADDED", pod("b", 201))], ending="hang"))
    changes = Changes()
    mirror = Mirror(kube, LISTING, changes)
    fake.version = 100
    mirror.start()
    fake.version = 200  # what the second list answers
    try:
        changes.until(lambda: names(mirror) == {"a", "b"})
    finally:
        mirror.stop()
    assert [w["resourceVersion"] for w in fake.watches()] == [["100"], ["200"]]
    assert len(fake.lists()) == 2 and mirror.relists == 1
    first = fake.watches()[0]
    assert first["allowWatchBookmarks"] == ["true"] and first["labelSelector"] == ["app=x"]
    assert 300 <= int(first["timeoutSeconds"][0]) <= 600  # client-go's minWatchTimeout, up to twice it


def test_a_cut_stream_and_a_bookmark_resume_from_the_last_version_without_a_list_against_fake(
    fake: WatchFake, kube: Kube
) -> None:
    fake.scripts.put(Script([event("ADDED", pod("a", 101)), event("MODIFIED", pod("a", 102, "Running"))], "drop"))
    fake.scripts.put(Script([bookmark(150)], ending="close"))  # the server's timeoutSeconds, after a bookmark
    fake.scripts.put(Script([event("DELETED", pod("a", 151, "Running"))], ending="hang"))
    changes = Changes()
    mirror = Mirror(kube, LISTING, changes)
    mirror.start()
    try:
        changes.until(lambda: len(fake.watches()) == 3 and not mirror.objects())
    finally:
        mirror.stop()
    assert [w["resourceVersion"] for w in fake.watches()] == [["100"], ["102"], ["150"]]
    assert len(fake.lists()) == 1 and mirror.relists == 0 and mirror.failure is None


def test_a_silent_watch_is_taken_for_a_dead_connection_and_opened_again_against_fake(
    fake: WatchFake, kube: Kube
) -> None:
    kube.watch_bounds = WatchBounds(silence=0.3)
    fake.scripts.put(Script([event("ADDED", pod("a", 101))], ending="hang"))  # then nothing, connection open
    fake.scripts.put(Script([event("ADDED", pod("b", 102))], ending="hang"))
    changes = Changes()
    mirror = Mirror(kube, LISTING, changes)
    mirror.start()
    try:
        changes.until(lambda: names(mirror) == {"a", "b"})
    finally:
        mirror.stop()
    assert [w["resourceVersion"] for w in fake.watches()][:2] == [["100"], ["101"]]


def test_an_event_that_trickles_in_is_cut_and_the_watch_opened_again_against_fake(fake: WatchFake, kube: Kube) -> None:
    kube.watch_bounds = WatchBounds(event_wait=0.3)
    half = b'{"type": "ADDED", "object": '
    fake.scripts.put(Script([half, b'{"kind": "Pod"', b"}}\n"], ending="hang", pause=0.2))
    fake.scripts.put(Script([event("ADDED", pod("b", 102))], ending="hang"))
    changes = Changes()
    mirror = Mirror(kube, LISTING, changes)
    mirror.start()
    try:
        changes.until(lambda: names(mirror) == {"b"})
    finally:
        mirror.stop()
    assert [w["resourceVersion"] for w in fake.watches()][:2] == [["100"], ["100"]]


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (b"<html>proxy error</html>\n", "a watch event that is not JSON"),
        (b'["ADDED"]\n', "a watch event that is a list, not an object"),
        (b'{"type": "ADDDED", "object": {}}\n', "a watch event of type 'ADDDED' holding an object"),
        (b'{"type": "ADDED", "object": {"kind": "Secret", "metadata": {"name": "s", "resourceVersion": "1"}}}\n',
         "`kind` is 'Secret', not Pod"),
        (b'{"type": "MODIFIED", "object": {"kind": "Pod", "metadata": {"name": "a"}}}\n',
         "`metadata.resourceVersion` is not a string"),
        (b'{"type": "ADDED", "object": {"kind": "Pod", "metadata": {"name": "a", "resourceVersion": "1"}, '
         b'"status": "Running"}}\n', "`status` is a string, not an object"),
        (b'{"kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": []}',
         "a PodList, not a watch stream (was `watch=true` dropped?)"),
        (b"x" * 2000, "a watch event larger than 1000 bytes"),
    ],
)  # fmt: skip
def test_an_event_of_the_wrong_shape_is_a_clear_error_not_retried_against_fake(
    fake: WatchFake, kube: Kube, line: bytes, said: str
) -> None:
    kube.watch_bounds = WatchBounds(event_bytes=1000)
    fake.scripts.put(Script([line], ending="close"))
    changes = Changes()
    mirror = Mirror(kube, LISTING, changes)
    mirror.start()
    try:
        changes.until(lambda: mirror.failure is not None)
    finally:
        mirror.stop()
    assert isinstance(mirror.failure, ApiError)
    assert said in mirror.failure.message and "watch pods in namespace 'default'" in mirror.failure.message
    assert len(fake.watches()) == 1  # not opened again


def test_an_error_event_other_than_410_is_retried_from_the_same_version_against_fake(
    fake: WatchFake, kube: Kube
) -> None:
    from tests.watch_fake import status

    fake.scripts.put(Script([event("ERROR", status(500, "InternalError", "etcd is busy"))], ending="close"))
    fake.scripts.put(Script([event("ADDED", pod("a", 101))], ending="hang"))
    changes = Changes()
    mirror = Mirror(kube, LISTING, changes)
    mirror.start()
    try:
        changes.until(lambda: names(mirror) == {"a"})
    finally:
        mirror.stop()
    assert [w["resourceVersion"] for w in fake.watches()] == [["100"], ["100"]] and mirror.relists == 0


def test_a_bookmark_needs_only_its_version_and_an_event_its_name() -> None:
    action = Action("watch", PODS, "default")
    assert parse_event(b'{"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "7"}}}',
                       PODS, action).version == "7"  # fmt: skip
    with pytest.raises(ApiError, match=r"`metadata\.name` is not a string"):
        parse_event(b'{"type": "ADDED", "object": {"metadata": {"resourceVersion": "7"}}}', PODS, action)


def test_a_change_wakes_the_caller_at_once_but_a_burst_of_them_at_most_once_a_settle(kube: Kube) -> None:
    """A thousand pods starting are a few looks at the job for a wait, not a thousand (each reads every pod)."""
    kube.clock = clock = FakeClock()
    seen = Mirrors(kube, [])
    changed = seen._changed.set  # what a mirror calls on each event
    changed()
    assert seen.wait(5.0, settle=0.5) and clock.sleeps == []  # the first at once
    changed()
    assert seen.wait(5.0, settle=0.5) and clock.sleeps == [0.5]  # the next once the settle has passed
    clock.sleep(2.0)
    changed()
    assert seen.wait(5.0, settle=0.5) and clock.sleeps == [0.5, 2.0]  # a change after a quiet time: at once
    assert not seen.wait(0.01, settle=0.5)
