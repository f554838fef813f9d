"""A connection held for good: a request written at once, its replies read when wanted.

redis-py's command path costs a pool checkout under an asyncio timeout, a retry wrapper, a
packing pass and, for the write itself, an ``asyncio.wait_for`` (a task on Python 3.11)
per command (a pipeline adds its stack of commands and a parse per reply): about a fifth of
the collector's CPU per transcript line and a quarter of the gateway's at 300 clients.
A caller that issues its requests from one task, one after another (the collector's
appends, the gateway's log reader) keeps one connection of the client's pool
(:class:`HeldConnection`): the same handshake, Sentinel lookup, TLS, health check and
connection count (``relaybus.shared.store.connection.Connects``) as every other command,
the request written to the socket without waiting and each reply read with the client's
socket timeout as its deadline (the log reader's client widens it beyond its block time).

A request whose replies were not all read (the caller failed in between) or a failed read
leaves the connection closed: the next request reconnects, so a stray reply is never taken
for another's, and the reconnect is counted like any other.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.exceptions
from redis.asyncio.connection import AbstractConnection, ConnectionPool


def pack(*args: bytes) -> bytes:
    """One command in the Redis protocol (every argument already bytes)."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        parts += (b"$%d\r\n" % len(arg), arg, b"\r\n")
    return b"".join(parts)


def entry_fields(flat: list[bytes]) -> dict[bytes, bytes]:
    """A stream entry's fields as a raw reply has them, ``[field, value, ...]``, as a dict."""
    it = iter(flat)
    return dict(zip(it, it, strict=False))


class HeldConnection:
    """One connection of ``pool`` held for good; one request in flight at a time."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool
        self._conn: AbstractConnection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Replies the request in flight still owes (0: none in flight).
        self._owed = 0

    async def send(self, request: bytes, replies: int = 1) -> None:
        """Write ``request`` (``replies`` commands) without waiting for its replies.

        Connects first if needed; a connection or timeout error propagates (as redis-py's
        ``ConnectionError``/``TimeoutError``) with the connection closed."""
        if self._owed:  # the last request's replies were never read: start afresh
            await self.close()
        conn = self._conn
        if conn is None:
            self._loop = asyncio.get_running_loop()  # the one its streams belong to
            conn = self._conn = await self._pool.get_connection()  # type: ignore[no-untyped-call]
        elif not conn.is_connected or _dropped(conn):
            # Closed by the server while idle (a restart, CLIENT KILL, its idle timeout):
            # connect again first, as the pool does when it hands out a connection.
            await conn.disconnect(nowait=True)
            await conn.connect()  # type: ignore[no-untyped-call]  # redis-py: unannotated
        elif conn.health_check_interval and self._clock() > conn.next_health_check:
            # A PING after an idle spell, as the pool's connections get.
            await conn.check_health()  # type: ignore[no-untyped-call]
        writer = conn._writer  # redis-py has no write that does not wait for the socket
        if writer is None:
            raise redis.exceptions.ConnectionError("the held connection is closed")
        try:
            writer.write(request)
            if writer.transport.get_write_buffer_size():  # the socket's buffer is full
                async with asyncio.timeout(conn.socket_timeout):
                    await writer.drain()
        except TimeoutError:
            await self.close()
            raise redis.exceptions.TimeoutError("timeout writing a request") from None
        except OSError as exc:
            await self.close()
            raise redis.exceptions.ConnectionError(f"writing a request: {exc}") from exc
        except BaseException:
            await self.close()
            raise
        self._owed = replies

    def _clock(self) -> float:
        assert self._loop is not None
        return self._loop.time()

    async def reply(self) -> Any:
        """The next reply of the request in flight. An error reply is raised (as redis-py's
        ``ResponseError``) and the connection stays usable; any other failure closes it."""
        conn = self._conn
        if conn is None or not self._owed:
            raise redis.exceptions.ConnectionError("no request in flight")
        try:
            value = await conn.read_response()
        except redis.exceptions.ResponseError:
            self._owed -= 1
            raise
        except BaseException:
            await self.close()
            raise
        self._owed -= 1
        return value

    async def close(self) -> None:
        """Close the connection (not given back: it stays its holder's, to reconnect)."""
        self._owed = 0
        if self._conn is not None:
            await self._conn.disconnect(nowait=True)


def _dropped(conn: AbstractConnection) -> bool:
    """The server closed the connection (the event loop saw its end): it cannot carry a
    request. Checked without a read (redis-py's ``can_read`` costs a timeout and a loop
    turn)."""
    reader, writer = conn._reader, conn._writer
    if reader is None or writer is None:
        return True
    return writer.transport.is_closing() or reader.at_eof()
