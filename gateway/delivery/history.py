"""History reads for replays, in pages: memory follows what one page holds, never the stream."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import redis.asyncio as aioredis

from relaybus.gateway.delivery.events import Event, from_entry
from relaybus.shared.store.keys import Keys

#: Entries per replay page (each page is queued before the next is read).
PAGE = 256

#: The id of the ``depth``-th newest entry, computed in Redis so that only an id crosses
#: the wire (a replay then reads forward from it in pages).
_NTH_NEWEST = """
local r = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', ARGV[1])
if #r == 0 then return false end
return r[#r][1]
"""


@dataclass(slots=True)
class SessionHead:
    row: dict[bytes, bytes]
    #: The oldest entry the session stream still holds (``None``: stream empty or gone).
    first: Event | None
    head: int
    #: Replay the entries with seq above this (``sinceSeqId``, or below the depth window).
    after: int


async def read_session_head(
    client: aioredis.Redis, keys: Keys, sid: str, *, depth: int, since: int | None
) -> SessionHead:
    """The session hash, its oldest entry, the head seq, and where its replay starts."""
    stream = keys.session_events(sid)
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.session(sid))
    pipe.xrange(stream, count=1)
    pipe.get(keys.seq)
    row, first_raw, head = await pipe.execute()
    head_seq = int(head) if head else 0
    if since is not None:
        after = since
    elif depth <= 0:
        after = head_seq
    else:
        start = await client.eval_ro(_NTH_NEWEST, 1, stream, str(depth))  # read-only: ACL R~
        after = int(start.split(b"-", 1)[0]) - 1 if start else head_seq
    first = from_entry(*first_raw[0]) if first_raw else None
    return SessionHead(row, first, head_seq, after)


@dataclass(frozen=True, slots=True)
class Page:
    """Every entry of a stream with seq above ``after``, up to ``count`` of them."""

    after: int
    events: list[Event]
    #: The page is full: entries may follow its last one.
    more: bool
    #: The head seq and epoch read with it.
    head: int
    epoch: str | None

    def tail(self, after: int) -> Page:
        """The entries above ``after`` (a page that starts at or before it)."""
        if after <= self.after:
            return self
        at = bisect_right([ev.seq for ev in self.events], after)
        return Page(after, self.events[at:], self.more, self.head, self.epoch)


async def read_page(client: aioredis.Redis, keys: Keys, stream: str, after: int) -> Page:
    """Up to :data:`PAGE` entries of ``stream`` with seq > ``after``, plus the head seq and
    epoch read in the same round trip."""
    pipe = client.pipeline(transaction=False)
    pipe.xrange(stream, min=f"({after}-0", count=PAGE)
    pipe.get(keys.seq)
    pipe.get(keys.epoch)
    raw, head, epoch = await pipe.execute()
    events = [from_entry(eid, fields) for eid, fields in raw]
    return Page(
        after,
        events,
        len(events) >= PAGE,
        int(head) if head else 0,
        epoch.decode() if epoch else None,
    )
