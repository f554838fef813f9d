"""The collector's Redis writer: the epoch and the atomic append.

Everything the collector publishes goes through :meth:`Publisher.append` (the Lua script
of ``relaybus.shared.store.appendlog``), from the engine task, so offsets never race.
The session states it publishes are the engine's (``relaybus.collector.session_cache``).
"""

from __future__ import annotations

import logging
import time

import redis.asyncio as aioredis

from relaybus.collector.metrics import CollectorMetrics
from relaybus.collector.traces import TraceMap
from relaybus.shared.aio import now_ms
from relaybus.shared.settings import Settings
from relaybus.shared.store.appendlog import AppendBatch, Appended, LogAppender, Sent
from relaybus.shared.store.connection import ensure_epoch, read_epoch
from relaybus.shared.store.keys import Keys
from relaybus.shared.store.rewinds import Rewinds

log = logging.getLogger(__name__)


class Publisher:
    def __init__(
        self,
        client: aioredis.Redis,
        settings: Settings,
        metrics: CollectorMetrics,
        *,
        traces: TraceMap | None = None,
    ) -> None:
        """``traces``: the traceId window of prompts sent through relaybus, which labels
        the events they cause."""
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
            wait_replicas=settings.redis_wait_replicas,
            wait_timeout_ms=settings.redis_wait_timeout_ms,
        )
        self._wait_replicas = settings.redis_wait_replicas
        self.rewinds = Rewinds(client, self.keys)
        self.epoch = ""
        self.traces = traces

    async def open_epoch(self) -> str:
        """Adopt the namespace epoch (creating one if Redis has none)."""
        self.epoch = await ensure_epoch(self.client, self.keys)
        return self.epoch

    async def epoch_changed(self) -> bool:
        return await read_epoch(self.client, self.keys) != self.epoch

    async def committed(self, file_key: str) -> str:
        """The offset value Redis holds for a file (what the next append compares with)."""
        value = await self.client.hget(self.keys.offsets(self.host), file_key)
        return value.decode() if isinstance(value, bytes) else ""

    async def committed_all(self, file_keys: list[str]) -> list[str]:
        """:meth:`committed` of several files in one round trip."""
        values = await self.client.hmget(self.keys.offsets(self.host), file_keys)
        return [v.decode() if isinstance(v, bytes) else "" for v in values]

    async def record_rewind(self, gen: int, from_seq: int) -> None:
        """Record that the log lost entries from ``from_seq`` on, appended under ``gen``."""
        since = await self.rewinds.record(gen, from_seq)
        log.warning(
            "the log lost entries this collector appended from seq %d (generation %d, "
            "lowest recorded %s): recorded as rewind generation %d",
            from_seq,
            gen,
            since.lowest,
            since.gen,
        )

    async def append(self, batch: AppendBatch) -> Appended:
        """Run one atomic append; refusals and connection errors propagate."""
        return await self.result(await self.send(batch))

    async def send(self, batch: AppendBatch) -> Sent:
        """Send one atomic append (its :meth:`result` or :meth:`abandon` must follow
        before the next); connection errors propagate."""
        if self.traces is not None:
            batch.events = self.traces.label(batch.sid, batch.events)
        return await self.appender.send(batch, epoch=self.epoch, stamp_ms=now_ms())

    def abandon(self, sent: Sent) -> None:
        """Give up on a sent append (its outcome is read from the committed offset)."""
        self.appender.abandon(sent)

    async def result(self, sent: Sent) -> Appended:
        """A sent append's outcome; refusals and connection errors propagate."""
        try:
            done = await self.appender.result(sent)
        finally:
            self.metrics.append_latency.observe(time.perf_counter() - sent.started)
        if done.replicas is not None and done.replicas < self._wait_replicas:
            # Committed on the primary only: a failover now would lose it (docs/reliability.md).
            log.warning(
                "seqs %d..%d reached %d of %d replicas in time",
                done.first_seq,
                done.last_seq,
                done.replicas,
                self._wait_replicas,
            )
        return done
