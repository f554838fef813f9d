"""History reads for replays: one pipelined round trip per watch, pages for resumes."""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as aioredis

from gateway.events import Event, from_entry
from shared.keys import Keys

RESUME_PAGE = 1000


@dataclass(slots=True)
class SessionHistory:
    row: dict[bytes, bytes]
    events: list[Event]
    #: The oldest entry the session stream still holds (``None``: stream empty or gone).
    first: Event | None
    head: int


async def read_session(
    client: aioredis.Redis, keys: Keys, sid: str, *, depth: int, since: int | None
) -> SessionHistory:
    """The session hash and its last ``depth`` events, or every event after ``since``."""
    stream = keys.session_events(sid)
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.session(sid))
    if since is None:
        pipe.xrevrange(stream, count=max(depth, 1))
    else:
        pipe.xrange(stream, min=f"({since}-0")
    pipe.xrange(stream, count=1)
    pipe.get(keys.seq)
    row, raw, first_raw, head = await pipe.execute()
    entries = list(raw)
    if since is None:
        entries = entries[::-1] if depth else []
    events = [from_entry(eid, fields) for eid, fields in entries]
    first = from_entry(*first_raw[0]) if first_raw else None
    return SessionHistory(row, events, first, int(head) if head else 0)


@dataclass(slots=True)
class LogHistory:
    events: list[Event]
    head: int
    epoch: str | None


async def read_log_page(
    client: aioredis.Redis, keys: Keys, after: int, count: int = RESUME_PAGE
) -> LogHistory:
    """Up to ``count`` log entries with seq > ``after``, plus the head seq and epoch."""
    pipe = client.pipeline(transaction=False)
    pipe.xrange(keys.log, min=f"({after}-0", count=count)
    pipe.get(keys.seq)
    pipe.get(keys.epoch)
    raw, head, epoch = await pipe.execute()
    events = [from_entry(eid, fields) for eid, fields in raw]
    return LogHistory(events, int(head) if head else 0, epoch.decode() if epoch else None)

