"""Publish log entries the way the collector does (atomic Lua append + shared frames).

For gateway tests that need exact control of what is in the log, without a collector.
"""

from __future__ import annotations

import time
from typing import Any

import redis.asyncio as aioredis

from relaybus.shared.store.appendlog import (
    AppendBatch,
    Appended,
    EpochChanged,
    LogAppender,
    OutEvent,
)
from relaybus.shared.store.connection import ensure_epoch
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire import frames


def now_ms() -> int:
    return int(time.time() * 1000)


class Publisher:
    def __init__(
        self,
        client: aioredis.Redis,
        keys: Keys,
        *,
        host: str = "testhost",
        log_maxlen: int = 100_000,
        session_maxlen: int = 2000,
    ) -> None:
        self.client = client
        self.keys = keys
        self.host = host
        self.appender = LogAppender(
            client,
            keys,
            host,
            log_maxlen=log_maxlen,
            session_maxlen=session_maxlen,
            session_ttl_s=3600,
        )
        self.epoch = ""

    async def _append(self, batch: AppendBatch, stamp_ms: int | None = None) -> Appended:
        for _ in range(3):
            if not self.epoch:
                self.epoch = await ensure_epoch(self.client, self.keys)
            try:
                return await self.appender.append(
                    batch, epoch=self.epoch, stamp_ms=stamp_ms or now_ms()
                )
            except EpochChanged:
                self.epoch = ""
        raise RuntimeError("epoch kept changing")

    async def start_session(
        self, sid: str, *, cwd: str = "/work/proj", title: str | None = None, at_ms: int = 0
    ) -> Appended:
        at = at_ms or now_ms()
        prefix = frames.session_started(
            sid, cwd=cwd, entrypoint="cli", host=self.host, title=title, started_at=at
        )
        hash_updates = {
            "id": sid,
            "host": self.host,
            "cwd": cwd,
            "entrypoint": "cli",
            "startedAt": str(at),
            "lastActivity": str(at),
            "live": "1",
            "state": "idle",
            "since": str(at),
        }
        if title:
            hash_updates["title"] = title
        batch = AppendBatch(
            sid,
            [OutEvent(frames.SESSION_STARTED, prefix)],
            hash_updates=hash_updates,
            activity_ms=at,
        )
        return await self._append(batch)

    async def events(
        self, sid: str, texts: list[str], *, data_bytes: int = 0, stamp_ms: int | None = None
    ) -> Appended:
        """One ``session_event`` per text (user/text block, raw line in ``data``)."""
        evs = [
            OutEvent(frames.SESSION_EVENT, event_prefix(sid, t, data_bytes), True, True)
            for t in texts
        ]
        at = now_ms()
        batch = AppendBatch(sid, evs, hash_updates={"lastActivity": str(at)}, activity_ms=at)
        return await self._append(batch, stamp_ms)

    async def turn(self, sid: str, state: str, *, since: int = 1_700_000_000_000) -> Appended:
        prefix = frames.turn_status(sid, state=state, since=since)
        batch = AppendBatch(
            sid,
            [OutEvent(frames.TURN_STATUS, prefix)],
            hash_updates={"state": state, "since": str(since)},
        )
        return await self._append(batch)

    async def end(self, sid: str) -> Appended:
        prefix = frames.session_ended(sid, reason="exit")
        batch = AppendBatch(
            sid, [OutEvent(frames.SESSION_ENDED, prefix)], hash_updates={"live": "0"}
        )
        return await self._append(batch)


def event_prefix(sid: str, text: str, data_bytes: int = 0) -> bytes:
    data: dict[str, Any] = {"type": "user", "message": {"role": "user", "content": text}}
    if data_bytes:
        data["pad"] = "x" * data_bytes
    event = {"type": "user", "blocks": [{"kind": "text", "text": text}], "data": data}
    return frames.session_event(sid, event)
