"""What delivery writes to: a :class:`FrameSink` (the ``/ws`` protocol,
:mod:`relaybus.gateway.web.wsconn`), and the two ways a write can fail."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from relaybus.gateway.frames import Outgoing


class WriteTimeout(Exception):
    """The socket took no data for the whole write deadline (the client does not read)."""


class ClientGone(ConnectionError):
    """The connection is closing or closed: nothing more can be written to it."""


class FrameSink(Protocol):
    #: Pre-encoded frames are written as they are; the ``text`` of such items is unused.
    raw_ok: bool

    async def send_many(self, items: Sequence[Outgoing]) -> None:
        """Write a burst; :class:`WriteTimeout` when the socket takes nothing in time,
        :class:`ClientGone` once the connection is closing."""
        ...

    def abort(self) -> None:
        """Drop the connection now, without flushing what is buffered (a stuck client)."""
        ...

    def write_now(self, items: Sequence[Outgoing]) -> bool:
        """Write without waiting if the transport takes data now; ``False``: use send_many."""
        ...

    def steady_write(self, changed: Callable[[], object]) -> Write | None:
        """The transport's ``write``, which the fan-out may call with shared bytes directly,
        while the connection is open and the transport takes data (``None`` otherwise, or
        for a sink that never allows it); from now on ``changed`` is called whenever that may
        change (pause, resume, close)."""
        ...


#: ``transport.write``: what the fan-out calls for a steady connection.
Write = Callable[[bytes], object]
