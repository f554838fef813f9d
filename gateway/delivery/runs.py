"""Runs: consecutive events of one session in a reader batch, offered to a connection at once.

When the reader is behind, one ``XREAD`` returns many events of the same session, and every
watcher of that session takes the same frames of them (from the first seq above its dedupe
marks: almost always the first). A :class:`Run` builds each variant's frames once, as a
:class:`Burst` whose bytes are joined once, and a connection stages the whole burst after
one set of checks: per connection the cost of a batch no longer grows with its events,
only the bytes written do (one ``transport.write`` per connection and batch either way).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from relaybus.gateway.delivery.events import Event
from relaybus.gateway.frames import Outgoing


class Burst(tuple[Outgoing, ...]):
    """Live log frames staged whole by many connections (a tuple: a connection that stages
    more copies it), with what every write of it needs computed once."""

    #: The frames' WebSocket bytes back to back (live log frames are all pre-encoded).
    wire: bytes
    #: Bytes counted against a connection's send budget.
    size: int
    #: Frames per kind (the ``messages_sent_total`` labels).
    kinds: dict[str, int]

    def __new__(cls, items: Iterable[Outgoing]) -> Burst:
        self = super().__new__(cls, items)
        self.wire = b"".join(out.wire for out in self if out.wire is not None)
        self.size = sum(out.size for out in self)
        kinds: dict[str, int] = {}
        for out in self:
            kinds[out.kind] = kinds.get(out.kind, 0) + 1
        self.kinds = kinds
        return self


class Run:
    """Consecutive session-scoped events of one session (seq order; one or more)."""

    __slots__ = ("_bursts", "events", "sid")

    def __init__(self, events: Sequence[Event]) -> None:
        self.events = events
        self.sid = events[0].sid
        self._bursts: dict[tuple[int, bool, bool], Burst] = {}

    def burst(self, start: int, *, blocks_only: bool, raw: bool) -> Burst:
        """The live frames of ``events[start:]`` for one kind of connection, built once."""
        key = (start, blocks_only, raw)
        found = self._bursts.get(key)
        if found is not None:
            return found
        events = self.events[start:]
        for ev in events:
            ev.delivered = True
        made = self._bursts[key] = Burst(
            ev.out(blocks_only=blocks_only, raw=raw, live=True) for ev in events
        )
        return made


def runs(events: Sequence[Event]) -> Iterator[Event | Run]:
    """The batch in order: each stretch of one session's events as a :class:`Run` (a lone
    one too: a run of one takes the same single set of checks and the shared burst, which
    cost less per connection than :meth:`Connection.offer`), every event that is not
    session-scoped as itself."""
    i, n = 0, len(events)
    while i < n:
        ev = events[i]
        j = i + 1
        if ev.session_scoped:
            sid = ev.sid
            while j < n and events[j].session_scoped and events[j].sid == sid:
                j += 1
        yield Run(events[i:j]) if ev.session_scoped else ev
        i = j
