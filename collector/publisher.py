"""The collector's single Redis writer: the epoch, the session cache and the atomic append.

Everything the collector publishes goes through :meth:`Publisher.append` (the Lua script
of ``relaybus.shared.store.appendlog``), from one task, so session state and offsets never race.
Session state is cached only after Redis accepted the batch that produced it; after a
connection error the cache is dropped and reloaded from the session hashes, so a batch
whose reply was lost is neither repeated nor forgotten.
"""

from __future__ import annotations

import logging
import time

import redis.asyncio as aioredis

from relaybus.collector.drivers.notices import TraceMap
from relaybus.collector.metrics import CollectorMetrics
from relaybus.collector.sessions import SessionState
from relaybus.shared.settings import Settings
from relaybus.shared.store.appendlog import AppendBatch, Appended, LogAppender, OutEvent
from relaybus.shared.store.connection import ensure_epoch, read_epoch
from relaybus.shared.store.keys import Keys

log = logging.getLogger(__name__)


def now_ms() -> int:
    return int(time.time() * 1000)


class Publisher:
    def __init__(
        self, client: aioredis.Redis, settings: Settings, metrics: CollectorMetrics
    ) -> None:
        self.client = client
        self.keys = Keys(settings.namespace)
        self.host = settings.host_id
        self.metrics = metrics
        self.appender = LogAppender(
            client,
            self.keys,
            settings.host_id,
            log_maxlen=settings.log_maxlen,
            session_maxlen=settings.session_maxlen,
            session_ttl_s=settings.session_ttl_s,
        )
        self.epoch = ""
        self.sessions: dict[str, SessionState] = {}
        #: The traceId window of prompts sent through relaybus (set by the service).
        self.traces: TraceMap | None = None

    async def open_epoch(self) -> str:
        """Adopt the namespace epoch (creating one if Redis has none)."""
        self.epoch = await ensure_epoch(self.client, self.keys)
        return self.epoch

    async def epoch_changed(self) -> bool:
        return await read_epoch(self.client, self.keys) != self.epoch

    async def committed(self, file_key: str) -> str:
        value = await self.client.hget(self.keys.offsets(self.host), file_key)
        return value.decode() if isinstance(value, bytes) else ""

    async def session(self, sid: str) -> SessionState:
        """The cached state of a session, loaded from its hash on first use."""
        st = self.sessions.get(sid)
        if st is None:
            h = await self.client.hgetall(self.keys.session(sid))
            st = SessionState.from_hash(sid, h) if h else SessionState(sid)
            self.sessions[sid] = st
        return st

    async def load_live_sessions(self) -> int:
        """Cache this host's sessions the hashes say are live (to end them when due)."""
        members = await self.client.zrange(self.keys.sessions, 0, -1)
        sids = [m.decode() if isinstance(m, bytes) else str(m) for m in members]
        pipe = self.client.pipeline(transaction=False)
        for sid in sids:
            pipe.hmget(self.keys.session(sid), ["host", "live"])
        found = 0
        for sid, (host, live) in zip(sids, await pipe.execute(), strict=True):
            if host == self.host.encode() and live == b"1" and sid not in self.sessions:
                await self.session(sid)
                found += 1
        return found

    def forget_sessions(self) -> None:
        """Drop the cache (after a connection error, the hashes are the truth)."""
        self.sessions.clear()

    async def append(self, batch: AppendBatch, *, stamp_ms: int | None = None) -> Appended:
        """Run one atomic append; refusals and connection errors propagate."""
        if self.traces is not None:
            batch.events = self.traces.label(batch.sid, batch.events)
        t0 = time.perf_counter()
        try:
            return await self.appender.append(
                batch, epoch=self.epoch, stamp_ms=now_ms() if stamp_ms is None else stamp_ms
            )
        finally:
            self.metrics.append_latency.observe(time.perf_counter() - t0)

    async def commit_session(
        self,
        state: SessionState,
        events: list[OutEvent],
        hash_updates: dict[str, str],
        *,
        activity_ms: int | None = None,
    ) -> None:
        """Publish session-level events (no file offset) and cache the new state."""
        if events or hash_updates:
            await self.append(
                AppendBatch(state.sid, events, hash_updates=hash_updates, activity_ms=activity_ms)
            )
        self.sessions[state.sid] = state
