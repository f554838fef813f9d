"""What ``list_sessions`` answers: SessionInfo (:func:`relaybus.gateway.frames.session_info`)
from the ``sessions`` zset plus one hash per session (pipelined), and the machines whose
collector beats now."""

from __future__ import annotations

from typing import Any

import orjson
import redis.asyncio as aioredis

from relaybus.gateway.frames import session_info
from relaybus.shared.aio import now_ms
from relaybus.shared.store.keys import Keys
from relaybus.shared.store.session_row import SessionRow
from relaybus.shared.wire.commands import host_capabilities

#: Upper bound on sessions listed in one ``sessions`` reply (most recent first).
LIST_LIMIT = 1000


async def list_sessions(client: aioredis.Redis, keys: Keys) -> list[dict[str, Any]]:
    """Every known session, most recently active first."""
    sids: Any = await client.zrevrange(keys.sessions, 0, LIST_LIMIT - 1)
    if not sids:
        return []
    pipe = client.pipeline(transaction=False)
    for sid in sids:
        pipe.hgetall(keys.session(sid.decode()))
    raw_rows: list[dict[bytes, bytes]] = await pipe.execute()
    rows = [SessionRow.parse(raw) for raw in raw_rows]
    return [
        session_info(sid.decode(), row)
        for sid, row in zip(sids, rows, strict=True)
        if has_something_to_show(row)
    ]


def has_something_to_show(row: SessionRow) -> bool:
    """Listed: a session that published something to read, or whose Claude process runs. A
    file of bookkeeping only (snapshots, another session's summaries) leaves a hash but no
    event; one of /goal status lines only has ``hasContent: 0`` (the collector's verdict;
    hashes from before it count any event)."""
    if row.live:
        return True
    return row.has_content if row.has_content is not None else row.session_seq > 0


#: Upper bound on machines listed in one ``sessions`` reply.
HOSTS_LIMIT = 200


async def list_hosts(client: aioredis.Redis, keys: Keys) -> list[dict[str, Any]]:
    """Machines whose collector beats now: ``{host, version, capabilities}``, by name.

    Read from the ``hosts`` index (live heartbeats scored by expiry), never by SCAN: a
    client asking for the list must not make the gateway walk the keyspace, and the
    gateway's Redis user may not SCAN (deploy/redis-acl.conf).
    """
    live = await client.zrangebyscore(keys.hosts, now_ms(), "+inf", start=0, num=HOSTS_LIMIT)
    names = [keys.host(h.decode() if isinstance(h, bytes) else str(h)).encode() for h in live]
    if not names:
        return []
    values = await client.mget(names)
    prefix = keys.host("")
    hosts: list[dict[str, Any]] = []
    for name, raw in zip(names, values, strict=True):
        if raw is None:
            continue
        try:
            beat = orjson.loads(raw)
        except orjson.JSONDecodeError:
            beat = {}
        version = beat.get("version", "") if isinstance(beat, dict) else ""
        hosts.append(
            {
                "host": name.decode("utf-8", "replace")[len(prefix) :],
                "version": str(version),
                "capabilities": host_capabilities(raw),
            }
        )
    hosts.sort(key=lambda h: str(h["host"]))
    return hosts
