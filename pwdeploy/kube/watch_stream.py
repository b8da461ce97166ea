"""One watch, as client-go's reflector opens it (k8s.io/client-go tools/cache/reflector.go): a list at a
resourceVersion, then a watch from it with ``allowWatchBookmarks=true`` and a ``timeoutSeconds`` between 5 and 10
minutes; its stream read as untrusted events (bounds: ``Kube.watch_bounds``): one JSON object per line, at most
8 MiB, whole within 60 s, of a known type, holding an object of the kind asked for with a resourceVersion. A 410 (as
the answer or an ``ERROR`` event) is ``Expired``: list again; a connection that ends early is ``Dropped``: watch
again. pwdeploy.kube.watch keeps objects current with them."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

from pwdeploy.kube.answers import json_type, object_shape
from pwdeploy.kube.api_errors import ApiError
from pwdeploy.kube.resources import Action, Resource
from pwdeploy.kube.seam import STREAM_CHUNK, Kube, malformed

WATCH_TIMEOUT_S = (300, 600)  # reflector.go: minWatchTimeout = 5 min, timeoutSeconds = min * (1 + rand)
TYPES = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR")

Object = dict[str, Any]


class Event(NamedTuple):
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    obj: Object

    @property
    def version(self) -> str:
        return str(self.obj["metadata"]["resourceVersion"])


class Expired(Exception):
    """The resourceVersion a watch asked for is older than the server keeps (410 Gone): list again."""


class Dropped(Exception):
    """The watch's connection ended before its timeout (broken, silent, an event cut short): watch again from the
    last resourceVersion seen."""


class Listing(NamedTuple):
    """What one list asks for: the resource, the namespace (None: every one) and the selectors."""

    resource: Resource
    namespace: str | None
    labels: str | None = None
    fields: str | None = None

    def action(self, verb: str) -> Action:
        return Action(verb, self.resource, self.namespace)

    def query(self) -> list[tuple[str, str]]:
        chosen = (("labelSelector", self.labels), ("fieldSelector", self.fields))
        return [(key, value) for key, value in chosen if value]

    def describe(self) -> str:
        where = f" in namespace {self.namespace}" if self.namespace else ""
        chosen = ", ".join(s for s in (self.labels, self.fields) if s)
        return f"{self.resource.display}{where}" + (f" ({chosen})" if chosen else "")


def list_at(kube: Kube, listing: Listing) -> tuple[list[Object], str]:
    """The objects of ``listing`` and the list's resourceVersion, read in pages (``Kube.iter_items``)."""
    versions: list[str] = []
    items = list(
        kube.iter_items(
            listing.action("list"), listing.resource.path(listing.namespace), query=listing.query(), versions=versions
        )
    )
    version = versions[-1] if versions else ""
    if not version:
        raise malformed(listing.action("list"), kube, "a list without metadata.resourceVersion", 200)
    return items, version


def open_watch(kube: Kube, listing: Listing, version: str, timeout: int | None = None) -> Any:
    """The raw, streaming answer of a watch from ``version`` (``events`` reads it); ``Expired`` on 410.
    ``timeout``: the watch's timeoutSeconds (default: at random, 5 to 10 minutes)."""
    query = [
        *listing.query(),
        ("watch", "true"),
        ("resourceVersion", version),
        ("allowWatchBookmarks", "true"),
        ("timeoutSeconds", str(timeout or random.randint(*WATCH_TIMEOUT_S))),
    ]
    try:
        return kube.request(
            listing.action("watch"), "GET", listing.resource.path(listing.namespace), query=query, stream=True
        )
    except ApiError as exc:
        if exc.status == 410:
            raise Expired(exc.message) from None
        raise


def events(raw: Any, listing: Listing, kube: Kube) -> Iterator[Event]:
    """The events of one watch's answer as they arrive, until the server ends it (its timeoutSeconds: the iterator
    ends). ``Expired`` for an ``ERROR`` event of code 410, ``Dropped`` when the connection breaks, falls silent or
    cuts an event short; an ``ApiError`` for an event of the wrong shape or any other ``ERROR`` event."""
    action = listing.action("watch")
    try:
        for line in _lines(raw, action, kube):
            event = parse_event(line, listing.resource, action, kube)
            if event.type == "ERROR":
                raise _error_event(event.obj, action, kube)
            yield event
    finally:
        raw.release_conn()


def _lines(raw: Any, action: Action, kube: Kube) -> Iterator[bytes]:
    """The lines of a watch's answer, each within ``Kube.watch_bounds`` (its size, the time to finish it)."""
    import urllib3

    bounds = kube.watch_bounds
    pending: list[bytes] = []
    size, began = 0, 0.0
    try:
        for chunk in raw.stream(STREAM_CHUNK, decode_content=True):
            if pending and time.monotonic() - began > bounds.event_wait:
                raise Dropped(f"an event still arriving {bounds.event_wait:g} s after its first byte")
            start = 0
            while (end := chunk.find(b"\n", start)) != -1:
                pending.append(chunk[start:end])
                yield b"".join(pending)
                pending, size, start = [], 0, end + 1
            if start < len(chunk):
                if not pending:
                    began = time.monotonic()
                pending.append(chunk[start:])
                size += len(chunk) - start
                if size > bounds.event_bytes:
                    raise malformed(action, kube, f"a watch event larger than {bounds.event_bytes} bytes", 200)
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise Dropped(f"{type(exc).__name__}: {exc}") from None
    if pending and b"".join(pending).strip():  # a whole answer without a newline: not a watch (the event says what)
        yield b"".join(pending)


def parse_event(line: bytes, resource: Resource, action: Action, kube: Kube | None = None) -> Event:
    """One line of a watch as an ``Event``; a line that is not one (not JSON, an unknown type, an object of another
    kind, without a resourceVersion) is an ``ApiError`` naming what was wrong."""
    try:
        parsed = json.loads(line)
    except (ValueError, RecursionError):
        raise malformed(action, kube, f"a watch event that is not JSON: {line[:80]!r}", 200) from None
    if not isinstance(parsed, dict):
        raise malformed(action, kube, f"a watch event that is {json_type(parsed)}, not an object", 200)
    kind, obj = parsed.get("type"), parsed.get("object")
    if "type" not in parsed and str(parsed.get("kind", "")).endswith("List"):
        raise malformed(
            action, kube, f"a {str(parsed['kind'])[:60]}, not a watch stream (was `watch=true` dropped?)", 200
        )
    if kind not in TYPES or not isinstance(obj, dict):
        raise malformed(action, kube, f"a watch event of type {str(kind)[:40]!r} holding {json_type(obj)}", 200)
    if kind != "ERROR" and (problem := object_problem(obj, str(kind), resource)) is not None:
        raise malformed(action, kube, f"a {kind} watch event whose {problem}", 200)
    return Event(str(kind), obj)


def object_problem(obj: Object, kind: str, resource: Resource) -> str | None:
    """What is wrong with the object of an event of type ``kind``, or None."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return "`metadata` is missing"
    problem = object_shape(obj)
    if problem is not None:
        return problem
    if not (isinstance(meta.get("resourceVersion"), str) and meta["resourceVersion"]):
        return "`metadata.resourceVersion` is not a string"
    if kind != "BOOKMARK" and not isinstance(meta.get("name"), str):
        return "`metadata.name` is not a string"
    if obj.get("kind") not in (None, resource.kind):
        return f"`kind` is {str(obj.get('kind'))[:40]!r}, not {resource.kind}"
    return None


def _error_event(status: Object, action: Action, kube: Kube) -> Exception:
    """An ``ERROR`` event's Status: ``Expired`` for code 410 (reason Expired or Gone), else an ``ApiError``."""
    code = status.get("code")
    message = str(status.get("message") or status.get("reason") or "")[:500]
    if code == 410:
        return Expired(message)
    from pwdeploy.kube.answers import printable

    return ApiError(
        f"the API server{kube.where()} ended the watch to {action.describe()} with an error"
        + (f" ({code})" if isinstance(code, int) else "")
        + f": {printable(message, 300)}",
        status=code if isinstance(code, int) else None,
        hint="run the command again",
    )


# ---------------------------------------------------------------------------------------------- a kept list


def shut(raw: Any) -> None:
    """Shut the socket under a streaming response (urllib3's), so that the thread reading it returns at once
    (closing alone does not wake a read blocked in another thread)."""
    import socket

    sock = getattr(getattr(raw, "connection", None), "sock", None) if raw is not None else None
    try:
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
