"""The fan-out's fast path: a session's steady connections, written in one tight loop.

Most of the time a connection takes each run of a session's events as it comes: it is open,
its transport takes data, nothing of it is queued, staged or being written, and its stream
neither buffers the session (a replay), filters it by scope, nor holds a gap. For those the
hub keeps, per session and frame variant, the list of their transports' ``write`` and the
highest dedupe floor among them: a run whose first seq is above that floor is the same
bytes for every one of them, written by ``for write in writes: write(burst.wire)`` without
touching the connections (1,000 of them do not stay in the CPU's caches); the others take
:meth:`~relaybus.gateway.delivery.connection.Connection.offer_run`.

Every change that can end (or start) a steady state drops the whole cache (one callback the
stream state, the connection and its sink call); it is rebuilt on the next run of a session.
"""

from __future__ import annotations

from collections.abc import Iterable

from relaybus.gateway.delivery.connection import Connection
from relaybus.gateway.delivery.wsio import Write


class Steady:
    """One session's audience, split: the steady connections' writes per variant, the rest."""

    __slots__ = ("floor", "groups", "others")

    def __init__(self, sid: str, audience: Iterable[Connection], position: int) -> None:
        """``position``: the hub's; a connection marked above it (a replay that read past
        the reader) is left out until the next rebuild, so the floor is at most it."""
        by_variant: dict[bool, list[Write]] = {}
        #: Connections that take the run through :meth:`Connection.offer_run`.
        self.others: list[Connection] = []
        #: The highest dedupe floor of the steady ones: a run must start above it.
        self.floor = 0
        for conn in audience:
            found = conn.steady(sid)
            if found is None or found[1] > position:
                self.others.append(conn)
                continue
            write, floor = found
            by_variant.setdefault(conn.state.blocks_only, []).append(write)
            if floor > self.floor:
                self.floor = floor
        #: ``(blocks_only, writes)`` of the steady connections.
        self.groups: list[tuple[bool, list[Write]]] = list(by_variant.items())
