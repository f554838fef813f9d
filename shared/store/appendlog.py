"""The one way events enter the log: the atomic Lua append (``shared/store/lua/append.lua``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from relaybus.shared.store.keys import Keys

APPEND_LUA = resources.files("relaybus.shared.store").joinpath("lua/append.lua").read_text()

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


class LogAppender:
    """Registers the append script once and runs batches through it."""

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
        self._keys = keys
        self._host = host
        self._limits = (b"%d" % log_maxlen, b"%d" % session_maxlen, b"%d" % session_ttl_s)
        self._script: AsyncScript = client.register_script(APPEND_LUA)

    async def append(self, batch: AppendBatch, *, epoch: str, stamp_ms: int) -> Appended:
        k = self._keys
        keys = [
            k.seq,
            k.log,
            k.sessions,
            k.session(batch.sid),
            k.session_events(batch.sid),
            k.offsets(self._host),
            k.epoch,
            k.rewinds,
        ]
        args: list[str | bytes] = [
            epoch,
            batch.sid,
            batch.offset_field,
            batch.expected_offset,
            batch.new_offset,
            *self._limits,
            str(stamp_ms),
            orjson.dumps(batch.hash_updates) if batch.hash_updates else "",
            "" if batch.activity_ms is None else str(batch.activity_ms),
        ]
        for ev in batch.events:
            args += (ev.kind.encode(), _FLAGS[ev.session_stream, ev.session_seq], ev.prefix)
        acked: int | None = None
        if self._wait[0]:
            reply, acked = await self._run_and_wait(keys, args)
        else:
            reply = await self._script(keys=keys, args=args)
        status = _text(reply[0])
        if status == "EPOCH":
            raise EpochChanged(_text(reply[1]))
        if status == "OFFSET":
            raise OffsetConflict(_text(reply[1]))
        return Appended(int(reply[1]), int(reply[2]), int(reply[3]), int(reply[4]), acked)

    async def _run_and_wait(self, keys: list[str], args: list[str | bytes]) -> tuple[Any, int]:
        try:
            return await self._pipelined(keys, args)
        except NoScriptError:  # a restarted or promoted server: load the script, run again
            await self._client.script_load(APPEND_LUA)
            return await self._pipelined(keys, args)

    async def _pipelined(self, keys: list[str], args: list[str | bytes]) -> tuple[Any, int]:
        pipe = self._client.pipeline(transaction=False)
        pipe.evalsha(self._script.sha, len(keys), *keys, *args)
        pipe.execute_command("WAIT", *self._wait)
        reply, acked = await pipe.execute()
        return reply, int(acked)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
