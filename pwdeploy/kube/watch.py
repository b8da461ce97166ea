"""Watches, as client-go's reflector makes them (k8s.io/client-go tools/cache/reflector.go, ListAndWatch): list the
objects once, then watch from the list's resourceVersion with ``allowWatchBookmarks=true`` and a ``timeoutSeconds``
chosen at random between 5 and 10 minutes (its minWatchTimeout, doubled at most, so that many clients do not all
come back at once); a watch that ends (its timeout, a dropped connection, a silent one) is opened again from the
last resourceVersion seen, an event or a bookmark; a resourceVersion the server no longer keeps (410 Gone, as the
watch's answer or as an ``ERROR`` event whose Status has code 410: "too old resource version") makes it list again.

``Mirror`` keeps the objects of one list current that way, in a thread of its own; ``Mirrors`` runs several and
tells the caller when any changed. What a command that waits costs is then a list and a watch per kind of object,
not a list every two seconds.

Every event is untrusted input (bounds: ``Kube.watch_bounds``): one JSON object per line (the API server's JSON
stream framing), at most 8 MiB, whole within 60 s of its first byte, of a known type, holding an object of the
kind asked for with a resourceVersion; anything else is an ``ApiError`` that says what was wrong. A stream silent
for 90 s (bookmarks come about once a minute) is taken for a dead connection and opened again.

Where this identity may not watch (403: a Role without the ``watch`` verb), a ``Mirror`` lists again every
``POLL_S`` seconds instead, and says so once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from pwdeploy.kube.api_errors import ApiError
from pwdeploy.kube.seam import Kube, stream_retryable
from pwdeploy.kube.watch_stream import Dropped, Event, Expired, Listing, events, list_at, open_watch, shut

POLL_S = 2.0  # the list's period where watching is forbidden
SETTLE_S = 0.5  # the least time between two wakes for a change: a burst of changes is one look
BACKOFF_S = (0.8, 30.0)  # reflector.go's backoff between failed attempts: 800 ms doubling to 30 s

Object = dict[str, Any]


class Mirror:
    """The objects of one ``Listing``, by uid, kept current by a watch read in a thread of its own.

    ``start`` lists and opens the first watch in the caller's thread (so that a refusal is the caller's error);
    ``changed`` is called after each change worth a look (every event but a bookmark, each list again). A failure
    that retries cannot mend (an answer of the wrong shape, a refusal) ends the thread: ``failure`` holds it and
    ``changed`` is called. Where this identity may not watch (403 on the watch, the list allowed), the mirror is
    ``polling``: its caller lists again (``relist``) when it looks."""

    def __init__(self, kube: Kube, listing: Listing, changed: Callable[[], None]) -> None:
        self.kube, self.listing, self.changed = kube, listing, changed
        self.failure: BaseException | None = None
        self.polling = False
        self.relists = 0  # lists read again after the first (a 410, or polling)
        self.version = ""  # the last resourceVersion seen: of the list, an event or a bookmark
        self._objects: dict[str, Object] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._raw: Any = None
        self._thread: threading.Thread | None = None

    def objects(self) -> list[Object]:
        with self._lock:
            return list(self._objects.values())

    def start(self, listed: tuple[list[Object], str] | None = None) -> None:
        """List (or take ``listed``: objects and the list's resourceVersion the caller read), open the watch, and
        read it in a thread; a 403 on the watch makes the mirror ``polling`` (no thread)."""
        items, version = listed if listed is not None else list_at(self.kube, self.listing)
        self._replace(items)
        self.version = version
        try:
            raw = open_watch(self.kube, self.listing, version)
        except Expired:  # the list's own version already gone: the thread lists again
            raw, version = None, ""
        except ApiError as exc:
            if exc.status != 403:
                raise
            self._start_polling()
            return
        self._raw = raw
        self._thread = threading.Thread(target=self._run, args=(raw, version), daemon=True, name="pwdeploy-watch")
        self._thread.start()

    def relist(self) -> None:
        """List again (a polling mirror, when its caller looks)."""
        items, _ = list_at(self.kube, self.listing)
        self.relists += 1
        self._replace(items)

    def stop(self) -> None:
        self._stop.set()
        shut(self._raw)
        if self._thread is not None:
            self._thread.join(5.0)

    def _start_polling(self) -> None:
        self.polling = True

    def _run(self, raw: Any, version: str) -> None:
        try:
            self._keep(raw, version)
        except BaseException as exc:  # handed to the caller's thread: Mirrors.wait raises it there
            if not self._stop.is_set():
                self.failure = exc
                self.changed()

    def _keep(self, raw: Any, version: str) -> None:
        """Read watch after watch from the last resourceVersion seen, listing again on 410, until stopped."""
        failures = 0
        while not self._stop.is_set():
            try:
                if raw is None:
                    version = version or self._relisted()
                    raw = self._reopen(version)
                heard = False
                for event in events(raw, self.listing, self.kube):
                    version, failures, heard = event.version, 0, True
                    self.version = version
                    if event.type != "BOOKMARK":
                        self._apply(event)
                        self.changed()
                failures += not heard  # ended with nothing said: a server that ends watches at once is not hammered
            except Expired:
                version = ""  # listed again before the next watch
            except Dropped:
                failures += 1
            except ApiError as exc:
                if not stream_retryable(exc):
                    raise
                failures += 1
            raw = None
            if failures > 1:  # a watch that drops at once, again and again: back off as the reflector does
                self._stop.wait(min(BACKOFF_S[1], BACKOFF_S[0] * 2 ** (failures - 2)))

    def _reopen(self, version: str) -> Any:
        raw = open_watch(self.kube, self.listing, version)
        self._raw = raw
        if self._stop.is_set():
            shut(raw)
        return raw

    def _relisted(self) -> str:
        items, version = list_at(self.kube, self.listing)
        self.relists, self.version = self.relists + 1, version
        self._replace(items)
        self.changed()
        return version

    def _replace(self, items: Sequence[Object]) -> None:
        with self._lock:
            self._objects = {_key(item): item for item in items}

    def _apply(self, event: Event) -> None:
        key = _key(event.obj)
        with self._lock:
            if event.type == "DELETED":
                self._objects.pop(key, None)
            else:
                self._objects[key] = event.obj


def _key(obj: Object) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")


class Mirrors:
    """Several mirrors whose changes wake one caller. ``wait`` returns when any changed since the last call (or
    ``timeout`` seconds passed) and raises a mirror's failure in the caller's thread, unless the mirror is
    ``optional`` (by index: the caller reads its ``failure`` and does without it); where a mirror is polling, it
    sleeps ``poll`` seconds on the connection's clock and lists again (what pwdeploy did before it watched), and
    ``Kube.on_wait`` hears so once."""

    def __init__(
        self,
        kube: Kube,
        listings: Sequence[Listing],
        poll: float = POLL_S,
        listed: Sequence[tuple[list[Object], str] | None] = (),
        optional: frozenset[int] | set[int] = frozenset(),
    ) -> None:
        self.kube, self.poll, self.optional = kube, poll, frozenset(optional)
        self._changed = threading.Event()
        self.mirrors = [Mirror(kube, listing, self._changed.set) for listing in listings]
        self._listed = list(listed) + [None] * (len(listings) - len(listed))  # what the caller already read
        self._polled_at = kube.clock.now()
        self._woken_at = -float("inf")  # when a change last woke the caller

    def __enter__(self) -> Mirrors:
        try:
            for index, (mirror, listed) in enumerate(zip(self.mirrors, self._listed, strict=True)):
                try:
                    mirror.start(listed)
                except ApiError as exc:
                    if index not in self.optional:
                        raise
                    mirror.failure = exc  # an optional list the caller does without (it reads ``failure``)
        except BaseException:
            self.__exit__()
            raise
        polled = [m.listing for m in self.mirrors if m.polling]
        if polled and self.kube.on_wait is not None:
            kinds = sorted({listing.resource.display for listing in polled})
            self.kube.on_wait(
                f"this identity's Role does not grant `watch` on {', '.join(kinds)} in namespace "
                f"{polled[0].namespace}: listing them every {self.poll:g} s instead (the Role of docs/cluster.md "
                "grants it)"
            )
        return self

    def _relist(self, index: int, mirror: Mirror) -> None:
        try:
            mirror.relist()
        except ApiError as exc:
            if index not in self.optional:
                raise
            mirror.failure = exc

    def __getitem__(self, index: int) -> list[Object]:
        """The objects the ``index``-th listing holds now."""
        return self.mirrors[index].objects()

    def __exit__(self, *exc: object) -> None:
        for mirror in self.mirrors:
            mirror.stop()

    def wait(self, timeout: float, settle: float = SETTLE_S) -> bool:
        """Whether something changed (False: ``timeout`` seconds passed first). A change wakes the caller at once,
        but at most once every ``settle`` seconds (within ``timeout``): a burst of events (a thousand pods starting)
        is a few looks at the objects for the caller, not one each."""
        polled = [m for m in self.mirrors if m.polling and m.failure is None]
        if polled:  # listed again every ``poll`` seconds on the connection's clock, whatever ``timeout`` is
            self.kube.clock.sleep(max(0.0, min(timeout, self._polled_at + self.poll - self.kube.clock.now())))
            changed = self.kube.clock.now() >= self._polled_at + self.poll
            if changed:
                for index, mirror in enumerate(self.mirrors):
                    if mirror in polled:
                        self._relist(index, mirror)
                self._polled_at = self.kube.clock.now()
        else:
            changed = self._changed.wait(timeout)
            if changed and settle > 0:
                clock = self.kube.clock
                rest = min(timeout, self._woken_at + settle - clock.now())
                if rest > 0:
                    clock.sleep(rest)
                self._woken_at = clock.now()
        self._changed.clear()
        for index, mirror in enumerate(self.mirrors):
            if mirror.failure is not None and index not in self.optional:
                raise mirror.failure
        return changed
