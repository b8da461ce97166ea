"""Watches (pwdeploy.kube.watch) against the real kube-apiserver of the control plane: a list and one watch
whatever changes, a connection the network drops resumed from the last resourceVersion (through CutWire, a TCP
forwarder a test cuts), a resourceVersion the server no longer keeps answered with 410 and listed again, the
server's bookmarks, the User-Agent the server sees. What it cannot do on demand is in test_kube_watch_fake.py."""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from pwdeploy.kube.kubeconfig import load_kube
from pwdeploy.kube.resources import EVENTS, PODS
from pwdeploy.kube.seam import Kube
from pwdeploy.kube.watch import Mirror
from pwdeploy.kube.watch_stream import Expired, Listing, events, list_at, open_watch
from tests.control_plane import ControlPlane
from tests.cut_wire import CutWire

pytestmark = [pytest.mark.control_plane, pytest.mark.timeout(180)]
NAMESPACE = "default"
NOWHERE = {"pwdeploy.test/nowhere": "x"}  # a nodeSelector no node has: the pods stay Pending, KWOK leaves them be


@pytest.fixture
def label(control_plane: ControlPlane) -> Iterator[str]:
    """A label value of this test's own pods, deleted after it."""
    value = f"w{secrets.token_hex(4)}"
    yield value
    for pod in control_plane.pods(NAMESPACE):
        if str(pod["metadata"].get("labels", {}).get("pwdeploy.test/watch", "")).startswith(value):
            control_plane.api.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod['metadata']['name']}")


def make_pod(plane: ControlPlane, name: str, label: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"pwdeploy.test/watch": label}},
        "spec": {"nodeSelector": NOWHERE, "containers": [{"name": "main", "image": "busybox"}]},
    }
    plane.api.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body)


class Seen:
    """``changed`` for a mirror, and a wait on what it holds."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def __call__(self) -> None:
        self.event.set()

    def until(self, holds: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not holds():
            assert time.monotonic() < deadline, "not in time"
            self.event.wait(0.1)
            self.event.clear()


def names(mirror: Mirror) -> set[str]:
    return {str(o["metadata"]["name"]) for o in mirror.objects()}


def unschedulable(mirror: Mirror) -> bool:
    """The scheduler wrote its verdict on every pod the mirror holds (PodScheduled False: no node fits)."""
    return all(
        any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in o["status"].get("conditions", []))
        for o in mirror.objects()
    )


def spied(kube: Kube) -> list[str]:
    """The URLs of the requests ``kube`` sends from now on (its own client's, recorded on the way)."""
    urls: list[str] = []
    send = kube.api_client.request

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        urls.append(url)
        return send(method, url, *args, **kwargs)

    kube.api_client.request = request
    return urls


def watched_versions(urls: list[str]) -> list[str]:
    queries = [parse_qs(urlsplit(u).query) for u in urls]
    return [q["resourceVersion"][0] for q in queries if q.get("watch") == ["true"]]


def test_a_mirror_costs_one_list_and_one_watch_however_many_changes(control_plane: ControlPlane, label: str) -> None:
    plane = control_plane
    make_pod(plane, f"{label}-0", label)
    kube = load_kube(plane.admin_kubeconfig)
    seen = Seen()
    mirror = Mirror(kube, Listing(PODS, NAMESPACE, labels=f"pwdeploy.test/watch={label}"), seen)
    mirror.start()
    try:
        for index in range(1, 6):
            make_pod(plane, f"{label}-{index}", label)
        plane.api.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/{label}-2")
        seen.until(lambda: names(mirror) == {f"{label}-{i}" for i in (0, 1, 3, 4, 5)})
        phases = {str((o.get("status") or {}).get("phase")) for o in mirror.objects()}
    finally:
        mirror.stop()
    assert kube.sent == 2 and mirror.relists == 0  # the list and the watch
    assert phases == {"Pending"}


def test_a_dropped_connection_is_watched_again_from_the_last_version_seen(
    control_plane: ControlPlane, label: str, tmp_path: Path
) -> None:
    plane = control_plane
    config = yaml.safe_load(plane.admin_kubeconfig.read_text())
    with CutWire(("127.0.0.1", int(urlsplit(plane.server).port or 0))) as wire:
        config["clusters"][0]["cluster"]["server"] = wire.url
        path = tmp_path / "through-the-wire.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        kube = load_kube(path)
        urls = spied(kube)
        seen = Seen()
        mirror = Mirror(kube, Listing(PODS, NAMESPACE, labels=f"pwdeploy.test/watch={label}"), seen)
        mirror.start()
        try:
            make_pod(plane, f"{label}-a", label)
            seen.until(lambda: names(mirror) == {f"{label}-a"} and unschedulable(mirror))  # the scheduler's word
            time.sleep(1.0)  # nothing more comes for it: the last version the mirror saw is where it resumes
            last = mirror.version
            assert wire.cut() >= 1  # the watch's connection, and any idle one of the pool
            make_pod(plane, f"{label}-b", label)  # made while the watch is down: the resumed watch brings it
            seen.until(lambda: names(mirror) == {f"{label}-a", f"{label}-b"})
        finally:
            mirror.stop()
    versions = watched_versions(urls)
    assert versions[1] == last != versions[0] and mirror.relists == 0, versions
    assert wire.connections >= 2


def test_a_version_the_server_no_longer_keeps_is_answered_410_and_listed_again(
    control_plane: ControlPlane, label: str
) -> None:
    """Events are not in the API server's watch cache (kube-apiserver's default --watch-cache-sizes leaves them out),
    so their watch is etcd's: once etcd's history is compacted (the API server does it every 5 minutes), a watch
    from a version before it is answered 410. The real answer is a 200 and an ERROR event whose Status has code 410
    ("The resourceVersion for the provided watch is too old."); the 410 as the answer itself is the fake's
    (test_kube_watch_fake.py)."""
    plane = control_plane
    kube = load_kube(plane.admin_kubeconfig)
    listing = Listing(EVENTS, NAMESPACE)
    _, stale = list_at(kube, listing)
    make_pod(plane, f"{label}-0", label)  # its FailedScheduling event comes after the stale version, and
    make_pod(plane, f"{label}-1", label)  # etcd keeps the compaction's own revision: two writes put it past
    plane.compact_etcd()
    raw = open_watch(kube, listing, stale, timeout=10)  # the real server opens the watch ...
    with pytest.raises(Expired, match="too old"):
        list(events(raw, listing, kube))  # ... and ends it with the ERROR event
    seen = Seen()
    mirror = Mirror(kube, listing, seen)
    mirror.start(listed=([], stale))  # a mirror whose version aged out (it was away longer than the window)
    try:
        seen.until(lambda: any(e.get("involvedObject", {}).get("name") == f"{label}-0" for e in mirror.objects()))
    finally:
        mirror.stop()
    assert mirror.relists == 1 and int(mirror.version) > int(stale)


def test_the_server_sends_a_bookmark_when_its_version_moves_without_an_event_for_the_watch(
    control_plane: ControlPlane, label: str
) -> None:
    kube = load_kube(control_plane.admin_kubeconfig)
    listing = Listing(PODS, NAMESPACE, labels=f"pwdeploy.test/watch={label}")
    _, version = list_at(kube, listing)
    raw = open_watch(kube, listing, version, timeout=4)  # the watch cache sends a bookmark 2 s before a timeout
    make_pod(control_plane, f"{label}-other", f"{label}-other")  # a change this watch does not select
    seen = [(e.type, e.obj) for e in events(raw, listing, kube)]
    # Nothing of the pod the watch does not select, and at least one bookmark past the list's version: how many is
    # the server's discretion (the API's allowWatchBookmarks: "bookmarks are sent at the server's discretion";
    # the watch cache sends one as the watch nears its timeout, and a busy one was seen to send two).
    assert seen and {kind for kind, _ in seen} == {"BOOKMARK"}, seen
    versions = [int(obj["metadata"]["resourceVersion"]) for _, obj in seen]
    assert versions == sorted(versions) and versions[-1] > int(version), (versions, version)


def test_the_api_server_sees_pwdeploys_user_agent(control_plane: ControlPlane) -> None:
    """The audit log of the control plane (every request of the user alice) records the User-Agent."""
    from tests.control_plane.commands import pwdeploy

    answer = pwdeploy(control_plane, "list", "-n", control_plane.user_namespace)
    assert answer.returncode == 0, answer.stderr
    from pwdeploy import __version__

    agents = {json.loads(line).get("userAgent", "") for line in control_plane.audit_lines()}
    assert any(a.startswith(f"pwdeploy/{__version__} (linux/") and " python/3." in a for a in agents), agents
