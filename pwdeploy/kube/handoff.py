"""A bounded hand-off of byte strings from one thread to another, for the two threads that carry a forwarded
stream's bytes to the local program (pwdeploy.kube.portforward)."""

from __future__ import annotations

import collections
import threading


class Handoff:
    """Bytes (or the stream's end) from a stream's reading thread to the thread writing the local connection: the
    reader waits while ``limit`` bytes wait, so a slow local program slows the stream (TCP flow control) instead of
    filling memory. One thread writes at a time, in order: the writing thread after ``get``, or the reader after a
    successful ``claim`` (nothing queued); either calls ``release`` when its write is done."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: collections.deque[bytes | BaseException] = collections.deque()
        self._size = 0
        self._closed = False
        self._writing = False  # a thread writes an item it took (or claimed): writes never overlap, in order
        self._changed = threading.Condition()

    def put(self, item: bytes | BaseException) -> bool:
        """Waits for room; False once closed (nobody will take it)."""
        size = len(item) if isinstance(item, bytes) else 0
        with self._changed:
            self._changed.wait_for(lambda: self._closed or self._size < self.limit)
            if self._closed:
                return False
            self._items.append(item)
            self._size += size
            self._changed.notify_all()
            return True

    def get(self) -> bytes | BaseException:
        """The next item, once nobody writes; the caller writes it, then calls ``release``."""
        with self._changed:
            self._changed.wait_for(lambda: self._items and not self._writing)
            item = self._items.popleft()
            self._size -= len(item) if isinstance(item, bytes) else 0
            self._writing = True
            self._changed.notify_all()
            return item

    def claim(self) -> bool:
        """Whether nothing waits and nobody writes: the caller then writes itself (ahead of nothing), then calls
        ``release``."""
        with self._changed:
            if self._items or self._writing:
                return False
            self._writing = True
            return True

    def release(self) -> None:
        with self._changed:
            self._writing = False
            self._changed.notify_all()

    def waiting(self) -> bool:
        """Whether bytes wait for the local program."""
        return self._size > 0

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()
