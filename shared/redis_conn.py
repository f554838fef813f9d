"""Redis client construction: timeouts, keepalive and health checks on every connection.

A half-open connection must be noticed within seconds, so every socket has a read
timeout and idle connections are PINGed before reuse.
"""

from __future__ import annotations

import uuid

import redis.asyncio as aioredis

from shared.keys import Keys
from shared.settings import Settings


def connect(settings: Settings, *, block_ms: int = 0) -> aioredis.Redis:
    """A client for ``settings.redis_url``. ``block_ms`` widens the read timeout for XREAD BLOCK."""
    timeout_s = settings.redis_socket_timeout_s + block_ms / 1000
    return aioredis.Redis.from_url(
        settings.redis_url.get_secret_value(),
        socket_timeout=timeout_s,
        socket_connect_timeout=settings.redis_socket_timeout_s,
        socket_keepalive=True,
        health_check_interval=settings.redis_health_check_interval_s,
        retry_on_timeout=False,
        decode_responses=False,
    )


async def ensure_epoch(client: aioredis.Redis, keys: Keys) -> str:
    """Return the namespace epoch, creating a fresh random one if Redis has none."""
    await client.set(keys.epoch, uuid.uuid4().hex, nx=True)
    value = await client.get(keys.epoch)
    if value is None:  # deleted between the two calls; try once more
        await client.set(keys.epoch, uuid.uuid4().hex, nx=True)
        value = await client.get(keys.epoch)
    return value.decode() if isinstance(value, bytes) else str(value)


async def read_epoch(client: aioredis.Redis, keys: Keys) -> str | None:
    """The current epoch, or ``None`` when Redis lost it (no persistence, FLUSHALL)."""
    value = await client.get(keys.epoch)
    return value.decode() if isinstance(value, bytes) else None
