"""Session metadata from Redis: the ``sessions`` zset plus one hash per session (pipelined)."""

from __future__ import annotations

from typing import Any

import orjson
import redis.asyncio as aioredis

from shared.commands import host_capabilities
from shared.keys import Keys

#: Upper bound on sessions listed in one ``sessions`` reply (most recent first).
LIST_LIMIT = 1000


def _int(value: bytes | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def session_info(sid: str, row: dict[bytes, bytes]) -> dict[str, Any]:
    """SessionInfo as the seed shapes it, plus the additive host/lastSeqId/lastActivity/state/
    since/waitingFor/live/historyLoaded."""
    text = {k.decode(): v.decode("utf-8", "replace") for k, v in row.items()}
    info: dict[str, Any] = {
        "id": sid,
        "cwd": text.get("cwd", ""),
        "startedAt": _int(row.get(b"startedAt")) or 0,
        "entrypoint": text.get("entrypoint", ""),
    }
    if text.get("title"):
        info["title"] = text["title"]
    info.update(
        host=text.get("host", ""),
        lastSeqId=_int(row.get(b"lastSeqId")) or 0,
        lastActivity=_int(row.get(b"lastActivity")) or 0,
        state=text.get("state") or "idle",
        live=text.get("live") == "1",
    )
    if text.get("historyLoaded") == "0":
        info["historyLoaded"] = False
    if text.get("state"):
        info["since"] = _int(row.get(b"since")) or 0
    if text.get("waitingFor"):
        info["waitingFor"] = text["waitingFor"]
    return info


def turn_status_frame(sid: str, row: dict[bytes, bytes], seq_id: int) -> dict[str, Any] | None:
    """The session's current turn state as a ``turn_status`` frame, if the hash has one."""
    state = row.get(b"state")
    if not state:
        return None
    frame: dict[str, Any] = {
        "type": "turn_status",
        "sessionId": sid,
        "state": state.decode(),
        "since": _int(row.get(b"since")) or 0,
    }
    waiting = row.get(b"waitingFor")
    if waiting:
        frame["waitingFor"] = waiting.decode()
    frame["seqId"] = seq_id
    return frame


async def list_sessions(client: aioredis.Redis, keys: Keys) -> list[dict[str, Any]]:
    """Every known session, most recently active first."""
    sids: Any = await client.zrevrange(keys.sessions, 0, LIST_LIMIT - 1)
    if not sids:
        return []
    pipe = client.pipeline(transaction=False)
    for sid in sids:
        pipe.hgetall(keys.session(sid.decode()))
    rows: list[dict[bytes, bytes]] = await pipe.execute()
    return [session_info(sid.decode(), row) for sid, row in zip(sids, rows, strict=True) if row]


#: Upper bound on machines listed in one ``sessions`` reply.
HOSTS_LIMIT = 200


async def list_hosts(client: aioredis.Redis, keys: Keys) -> list[dict[str, Any]]:
    """Machines whose collector beats now: ``{host, version, capabilities}``, by name."""
    names: list[bytes] = []
    async for key in client.scan_iter(match=keys.hosts_pattern, count=1000):
        names.append(key)
        if len(names) >= HOSTS_LIMIT:
            break
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
