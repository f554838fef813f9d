"""The host heartbeat: ``{ns}:host:<host>`` JSON with a TTL, refreshed every TTL/3."""

from __future__ import annotations

import asyncio
import os

import orjson
import redis.asyncio as aioredis

from relaybus.shared import __version__
from relaybus.shared.aio import now_ms, sleep_unless
from relaybus.shared.settings import Settings
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire.commands import CAP_LOAD_HISTORY, CAP_PROMPTS


def capabilities_of(settings: Settings) -> list[str]:
    """What this machine serves: ``load_history`` always, ``prompts`` when enabled."""
    caps = [CAP_LOAD_HISTORY]
    if settings.allow_prompts:
        caps.append(CAP_PROMPTS)
    return caps


def heartbeat_value(host: str, started_at_ms: int, capabilities: list[str]) -> bytes:
    return orjson.dumps(
        {
            "host": host,
            "version": __version__,
            "capabilities": capabilities,
            "pid": os.getpid(),
            "startedAt": started_at_ms,
        }
    )


async def beat(client: aioredis.Redis, settings: Settings, stop: asyncio.Event) -> None:
    """Refresh the heartbeat until ``stop``; Redis errors propagate to the supervisor."""
    keys, host, ttl_s = Keys(settings.namespace), settings.host_id, settings.heartbeat_ttl_s
    value = heartbeat_value(host, now_ms(), capabilities_of(settings))
    while not stop.is_set():
        # The hosts index lets a gateway find the live machines without SCANning keys.
        expires_ms = now_ms() + ttl_s * 1000
        pipe = client.pipeline(transaction=False)
        pipe.set(keys.host(host), value, ex=ttl_s)
        pipe.zadd(keys.hosts, {host: expires_ms})
        pipe.zremrangebyscore(keys.hosts, "-inf", expires_ms - 86_400_000)  # long dead
        if settings.owner:  # `relaybus token add <owner>` scopes that member to this machine
            pipe.hset(keys.owners, host, settings.owner)
        else:  # no one's any more: `token add` must not scope a former owner to it
            pipe.hdel(keys.owners, host)
        await pipe.execute()
        await sleep_unless(stop, ttl_s / 3)
