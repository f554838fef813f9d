"""Replay pages read once and shared by every connection that needs them (a reconnect storm).

A resume (``hello.lastSeqId``) or a ``watch_session`` reads its stream page by page from a
point. When a thousand clients drop together they resume from the same point, and each
would read the same entries; here a page read is single-flight and kept for a few
seconds, and a caller whose range starts inside a page that was read (or is being read)
gets that page's tail instead of reading again. The events, and the frames encoded from
them (:meth:`relaybus.gateway.delivery.events.Event.out`), are then shared as the live fan-out
shares them.

When may a caller use a read it did not start? Its connection buffers every live event
the reader dispatches above some reader position ``floor`` (it subscribed then); entries
at or below ``floor`` were in Redis before it subscribed (the reader dispatched them after
reading them). A read issued while the reader's position was at least ``floor`` therefore
holds every entry the caller needs up to the end of the stream at that time. A full page
is final whatever the position: stream ids only grow, so nothing can appear between its
first and last entry later. Only a rewind or an epoch change alters entries already read;
the hub counts those in its ``pages_version`` and reads of an older version are dropped.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, Generic, TypeVar

from relaybus.gateway.delivery.fanout import Hub
from relaybus.gateway.delivery.history import Page

T = TypeVar("T")

#: How long a finished read serves others (a storm's reconnects arrive within seconds).
TTL_S = 10.0
#: Frame bytes kept at most across finished reads (the oldest are dropped first).
MAX_BYTES = 64 * 1024 * 1024


Fetch = Callable[[str, int], Coroutine[Any, Any, Page]]


class _Read:
    __slots__ = ("after", "done_at", "position", "size", "stream", "task", "version")

    def __init__(self, stream: str, after: int, position: int, version: int) -> None:
        self.stream = stream
        self.after = after
        self.position = position
        self.version = version
        self.task: asyncio.Task[Page] | None = None
        self.done_at = 0.0
        self.size = 0

    def covers(self, page: Page, after: int, floor: int) -> bool:
        """Whether ``page`` (this read's result) holds what a caller from ``after`` needs."""
        if page.more:
            return bool(page.events) and page.events[-1].seq > after
        return self.position >= floor and page.head >= after


class SharedPages:
    """Single-flight, briefly cached page reads of the streams a replay reads."""

    def __init__(
        self, hub: Hub, fetch: Fetch, *, ttl_s: float = TTL_S, max_bytes: int = MAX_BYTES
    ) -> None:
        self.hub = hub
        self.fetch = fetch
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes
        self._reads: dict[str, list[_Read]] = {}
        #: Finished reads, oldest first (expiry and the byte bound).
        self._done: deque[_Read] = deque()
        self._bytes = 0

    async def page(self, stream: str, after: int, floor: int) -> Page:
        """The entries of ``stream`` above ``after`` (at most one page), complete for a
        connection that buffers the live events above reader position ``floor``."""
        self._expire()
        read = self._usable(stream, after, floor)
        if read is not None and read.task is not None:
            page = await asyncio.shield(read.task)
            if read.covers(page, after, floor):
                return page.tail(after)
        read = self._start(stream, after)
        assert read.task is not None
        return (await asyncio.shield(read.task)).tail(after)

    def _usable(self, stream: str, after: int, floor: int) -> _Read | None:
        """The read starting closest below ``after`` that may serve it (finished: does)."""
        best: _Read | None = None
        version = self.hub.pages_version
        for read in self._reads.get(stream, ()):
            if read.version != version or read.after > after:
                continue
            task = read.task
            if task is not None and task.done():
                # A failed read is dropped by its done callback, which may not have run yet.
                if task.cancelled() or task.exception() is not None:
                    continue
                if not read.covers(task.result(), after, floor):
                    continue
            elif read.position < floor:
                continue
            if best is None or read.after > best.after:
                best = read
        return best

    def _start(self, stream: str, after: int) -> _Read:
        read = _Read(stream, after, self.hub.position, self.hub.pages_version)
        read.task = asyncio.create_task(self.fetch(stream, after), name=f"page-{stream}-{after}")
        read.task.add_done_callback(lambda _t: self._finished(read))
        self._reads.setdefault(stream, []).append(read)
        return read

    def _finished(self, read: _Read) -> None:
        task = read.task
        assert task is not None
        if task.cancelled() or task.exception() is not None:
            self._drop(read)  # each caller sees the error; nobody reuses it
            return
        read.done_at = time.monotonic()
        read.size = sum(len(ev.frame) for ev in task.result().events)
        self._bytes += read.size
        self._done.append(read)
        while self._bytes > self.max_bytes and self._done:
            self._forget(self._done.popleft())
        asyncio.get_running_loop().call_later(self.ttl_s + 1, self._expire)  # also when idle

    def _expire(self) -> None:
        limit = time.monotonic() - self.ttl_s
        done = self._done
        while done and (done[0].done_at < limit or done[0].version != self.hub.pages_version):
            self._forget(done.popleft())

    def _forget(self, read: _Read) -> None:
        self._bytes -= read.size
        self._drop(read)

    def _drop(self, read: _Read) -> None:
        reads = self._reads.get(read.stream)
        if reads is not None and read in reads:
            reads.remove(read)
            if not reads:
                del self._reads[read.stream]


class SharedReads(Generic[T]):
    """Single-flight reads keyed by what they read (a session's head for ``watch_session``),
    served for ``ttl_s`` after they finished to callers whose ``floor`` they meet."""

    def __init__(self, hub: Hub, ttl_s: float) -> None:
        self.hub = hub
        self.ttl_s = ttl_s
        self._flights: dict[Hashable, _Flight[T]] = {}
        self._order: deque[tuple[Hashable, _Flight[T]]] = deque()

    async def get(self, key: Hashable, floor: int, read: Callable[[], Coroutine[Any, Any, T]]) -> T:
        now = time.monotonic()
        self._expire(now)
        flight = self._flights.get(key)
        if flight is None or not flight.serves(self.hub.pages_version, floor, now - self.ttl_s):
            flight = _Flight(self.hub.position, self.hub.pages_version, asyncio.create_task(read()))
            flight.task.add_done_callback(flight.finished)
            self._flights[key] = flight
            self._order.append((key, flight))
        return await asyncio.shield(flight.task)

    def _expire(self, now: float) -> None:
        order = self._order
        while order and order[0][1].expired(now - self.ttl_s):
            key, flight = order.popleft()
            if self._flights.get(key) is flight:
                del self._flights[key]


class _Flight(Generic[T]):
    __slots__ = ("done_at", "position", "task", "version")

    def __init__(self, position: int, version: int, task: asyncio.Task[T]) -> None:
        self.position = position
        self.version = version
        self.task = task
        self.done_at = 0.0

    def finished(self, task: asyncio.Task[T]) -> None:
        self.done_at = time.monotonic()
        if not task.cancelled():
            task.exception()  # each caller sees it; retrieved here for the orphaned case

    def expired(self, limit: float) -> bool:
        return self.task.done() and self.done_at < limit

    def serves(self, version: int, floor: int, limit: float) -> bool:
        if self.version != version or self.position < floor:
            return False
        if not self.task.done():
            return True
        return self.done_at >= limit and not self.task.cancelled() and self.task.exception() is None
