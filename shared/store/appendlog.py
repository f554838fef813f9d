"""The one way events enter the log: the atomic Lua append (``shared/store/lua/append.lua``)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, cast

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from relaybus.shared.store.held_conn import HeldConnection, pack
from relaybus.shared.store.keys import Keys

APPEND_LUA = resources.files("relaybus.shared.store").joinpath("lua/append.lua").read_text()
_LOAD = pack(b"SCRIPT", b"LOAD", APPEND_LUA.encode())
#: Event-loop turns given to an append on redis-py's command path to reach its socket.
SEND_YIELDS = 6

#: The sessions index is pruned of members older than the TTL by the first batch of each
#: minute of activity (by activity score), not by every batch: a ``ZREMRANGEBYSCORE`` per
#: line for members that expire once a week. A member stays at most this much past its TTL
#: (relative to the newest activity this appender wrote); readers already skip a member
#: whose hash has expired.
PRUNE_EVERY_MS = 60_000

#: The script's per-event ``flags`` argument by (session_stream, session_seq), as bytes:
#: redis-py passes bytes through, a str costs an encode per argument per event.
_FLAGS: dict[tuple[bool, bool], bytes] = {
    (False, False): b"",
    (True, False): b"s",
    (False, True): b"q",
    (True, True): b"sq",
}


@dataclass(frozen=True, slots=True)
class OutEvent:
    """One log entry to append. ``prefix`` is the wire frame's JSON without its ``}``."""

    kind: str
    prefix: bytes
    session_stream: bool = False
    session_seq: bool = False


@dataclass(slots=True)
class AppendBatch:
    """Events of one session plus the offset commit (if any) they are atomic with."""

    sid: str
    events: list[OutEvent] = field(default_factory=list)
    offset_field: str = ""
    expected_offset: str = ""
    new_offset: str = ""
    hash_updates: dict[str, str] = field(default_factory=dict)
    activity_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Appended:
    first_seq: int
    last_seq: int
    last_session_seq: int
    #: the log's rewind generation the batch was appended under (``relaybus.shared.store.rewinds``)
    gen: int = 0
    #: replicas that acknowledged the batch (``WAIT``); ``None`` when none were asked for
    replicas: int | None = None


class AppendRefused(Exception):
    """The script refused the batch before writing anything."""


class EpochChanged(AppendRefused):
    """Redis's epoch is not the one the appender holds: Redis lost its data."""

    def __init__(self, current: str) -> None:
        super().__init__(f"epoch is now {current or '<missing>'}")
        self.current = current


class OffsetConflict(AppendRefused):
    """The committed offset is not where this batch starts (another writer, or a restart)."""

    def __init__(self, committed: str) -> None:
        super().__init__(f"committed offset is {committed or '<none>'}")
        self.committed = committed


@dataclass(slots=True)
class Sent:
    """An append on its way to Redis: :meth:`LogAppender.result` reads its outcome."""

    started: float
    #: the request on the appender's own connection (sent again after a NOSCRIPT)
    request: bytes = b""
    #: the request on redis-py's command path (a cluster client)
    task: asyncio.Future[tuple[Any, int | None]] | None = None


class LogAppender:
    """Registers the append script once and runs batches through it.

    A plain client's appends go through a connection of their own (``held_conn``); a
    cluster client's through redis-py's command path. :meth:`send` a batch, then read its
    :meth:`result` (or :meth:`abandon` it); on the own connection one batch is in flight at a
    time, and a concurrent :meth:`send` waits for the batch before it to be settled.
    """

    def __init__(
        self,
        client: aioredis.Redis,
        keys: Keys,
        host: str,
        *,
        log_maxlen: int,
        session_maxlen: int,
        session_ttl_s: int,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1000,
    ) -> None:
        """``wait_replicas`` > 0 follows each batch with ``WAIT`` in the same round trip (on
        the same connection, which WAIT needs), so the reply says whether it replicated."""
        self._client = client
        self._wait = (wait_replicas, wait_timeout_ms)
        self._wait_request = (
            pack(b"WAIT", b"%d" % wait_replicas, b"%d" % wait_timeout_ms) if wait_replicas else b""
        )
        self._keys = keys
        self._host = host
        self._limits = (b"%d" % log_maxlen, b"%d" % session_maxlen, b"%d" % session_ttl_s)
        self._ttl_ms = session_ttl_s * 1000
        #: the activity minute (``PRUNE_EVERY_MS``) of the last batch that pruned the index
        self._pruned = -1
        self._script: AsyncScript = client.register_script(APPEND_LUA)
        self._sha = self._script.sha.encode()
        self._fixed_keys = [
            k.encode()
            for k in (
                keys.seq,
                keys.log,
                keys.sessions,
                keys.offsets(host),
                keys.epoch,
                keys.rewinds,
            )
        ]
        # A cluster client (``relaybus.shared.store.cluster``) is typed as a plain one.
        cluster = isinstance(cast(object, client), RedisCluster)
        self._conn = None if cluster else HeldConnection(client.connection_pool)
        #: Held from a send on the own connection until its result is read (or abandoned):
        #: callers that append concurrently take turns instead of reading each other's replies.
        self._turn = asyncio.Lock()

    async def append(self, batch: AppendBatch, *, epoch: str, stamp_ms: int) -> Appended:
        return await self.result(await self.send(batch, epoch=epoch, stamp_ms=stamp_ms))

    async def send(self, batch: AppendBatch, *, epoch: str, stamp_ms: int) -> Sent:
        """Send one batch; a connection error propagates."""
        seq, log, sessions, offsets, epoch_key, rewinds = self._fixed_keys
        k = self._keys
        keys = [
            seq,
            log,
            sessions,
            k.session(batch.sid).encode(),
            k.session_events(batch.sid).encode(),
            offsets,
            epoch_key,
            rewinds,
        ]
        activity, prune = b"", b""
        if (at := batch.activity_ms) is not None:
            activity = b"%d" % at
            if at // PRUNE_EVERY_MS > self._pruned:
                self._pruned = at // PRUNE_EVERY_MS
                prune = b"%d" % (at - self._ttl_ms)
        updates = batch.hash_updates
        args = [
            epoch.encode(),
            batch.sid.encode(),
            batch.offset_field.encode(),
            batch.expected_offset.encode(),
            batch.new_offset.encode(),
            *self._limits,
            b"%d" % stamp_ms,
            activity,
            prune,
            b"%d" % len(updates),
        ]
        for name, value in updates.items():
            args += (name.encode(), value.encode())
        for ev in batch.events:
            args += (ev.kind.encode(), _FLAGS[ev.session_stream, ev.session_seq], ev.prefix)
        started = time.perf_counter()
        if self._conn is None:
            task = asyncio.ensure_future(self._pooled(keys, args))
            for _ in range(SEND_YIELDS):  # let it reach the socket before the caller goes on
                await asyncio.sleep(0)
            return Sent(started, task=task)
        request = pack(b"EVALSHA", self._sha, b"8", *keys, *args) + self._wait_request
        await self._turn.acquire()
        try:
            await self._conn.send(request, 2 if self._wait[0] else 1)
        except BaseException:
            self._turn.release()
            raise
        return Sent(started, request)

    async def result(self, sent: Sent) -> Appended:
        """The outcome of a sent batch: refusals raise :class:`AppendRefused`."""
        if sent.task is not None:
            reply, acked = await sent.task
        else:
            try:
                reply, acked = await self._replies(sent)
            finally:
                self._turn.release()
        status = _text(reply[0])
        if status == "EPOCH":
            raise EpochChanged(_text(reply[1]))
        if status == "OFFSET":
            raise OffsetConflict(_text(reply[1]))
        return Appended(int(reply[1]), int(reply[2]), int(reply[3]), int(reply[4]), acked)

    def abandon(self, sent: Sent) -> None:
        """The caller gives up on a sent batch (it failed meanwhile); its outcome is
        settled by reading the committed offset again. The own connection is closed
        before the next request (``held_conn``)."""
        task = sent.task
        if task is None:
            self._turn.release()
        elif not task.done():
            task.cancel()
        elif not task.cancelled():
            task.exception()  # retrieved

    async def _replies(self, sent: Sent) -> tuple[Any, int | None]:
        conn = self._conn
        assert conn is not None
        wait = bool(self._wait[0])
        try:
            reply = await conn.reply()
        except NoScriptError:  # a restarted or promoted server: load the script, run again
            if wait:
                await conn.reply()  # WAIT's, read all the same
            await conn.send(_LOAD)  # on this connection: the pool's may not know yet
            await conn.reply()
            await conn.send(sent.request, 2 if wait else 1)
            reply = await conn.reply()
        return reply, (int(await conn.reply()) if wait else None)

    async def _pooled(self, keys: list[bytes], args: list[bytes]) -> tuple[Any, int | None]:
        if not self._wait[0]:
            return await self._script(keys=keys, args=args), None
        try:
            return await self._pipelined(keys, args)
        except NoScriptError:
            await self._client.script_load(APPEND_LUA)
            return await self._pipelined(keys, args)

    async def _pipelined(self, keys: list[bytes], args: list[bytes]) -> tuple[Any, int]:
        pipe = self._client.pipeline(transaction=False)
        pipe.evalsha(self._script.sha, len(keys), *keys, *args)
        pipe.execute_command("WAIT", *self._wait)
        reply, acked = await pipe.execute()
        return reply, int(acked)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
