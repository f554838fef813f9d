"""Redis client construction: timeouts, keepalive and health checks on every connection.

A half-open connection must be noticed within seconds, so every socket has a read
timeout and idle connections are PINGed before reuse.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import uuid
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

import redis.asyncio as aioredis
import redis.exceptions

from relaybus.shared.settings import Settings
from relaybus.shared.store.keys import Keys

#: getaddrinfo's definite "no such name" answers (EAI_AGAIN, a DNS outage, is retried).
_UNKNOWN_HOST = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}
PROBE_TIMEOUT_S = 2.0
PROBE_INTERVAL_S = 1.0


class RedisRefused(Exception):
    """Redis (or DNS) gave a definite no for these settings: wrong or missing password, a
    database the server does not have, a host name that does not exist. Retrying cannot
    help; the message is one line naming ``RELAYBUS_REDIS_URL`` and the fix."""


def connect(settings: Settings, *, block_ms: int = 0) -> aioredis.Redis:
    """A client for ``settings.redis_url``. ``block_ms`` widens the read timeout for XREAD BLOCK."""
    timeout_s = settings.redis_socket_timeout_s + block_ms / 1000
    # A blocking pool: with every connection of the pool (redis-py: 100) in use, a command
    # waits up to the socket timeout for one instead of failing at once with "Too many
    # connections" (a reconnect storm of hundreds of resumes otherwise closes most of them).
    pool = aioredis.BlockingConnectionPool.from_url(
        settings.redis_url.get_secret_value(),
        timeout=settings.redis_socket_timeout_s,
        socket_timeout=timeout_s,
        socket_connect_timeout=settings.redis_socket_timeout_s,
        socket_keepalive=True,
        health_check_interval=settings.redis_health_check_interval_s,
        retry_on_timeout=False,
        decode_responses=False,
    )
    return aioredis.Redis.from_pool(pool)


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


def redis_address(settings: Settings) -> str:
    """``host:port`` (or the socket path) of the configured server, never the password."""
    parts = urlsplit(settings.redis_url.get_secret_value())
    if parts.scheme == "unix":
        return parts.path
    host = parts.hostname or "localhost"
    return f"[{host}]:{parts.port or 6379}" if ":" in host else f"{host}:{parts.port or 6379}"


def _refusal(settings: Settings, exc: BaseException) -> str | None:
    """The one-line reason when ``exc`` is a permanent refusal, else ``None``."""
    where = f"Redis at {redis_address(settings)}"
    parts = urlsplit(settings.redis_url.get_secret_value())
    if isinstance(exc, redis.exceptions.AuthenticationError):
        if parts.password is None:
            return (
                f"{where} requires a password: put it in RELAYBUS_REDIS_URL "
                "(redis://:<password>@host:port/db)"
            )
        return f"{where} refused the password (or user) in RELAYBUS_REDIS_URL"
    if isinstance(exc, redis.exceptions.ResponseError):
        text = str(exc)
        if "DB index" in text or "invalid DB" in text.lower():
            db = parts.path.strip("/") or "0"
            return (
                f"{where} has no database {db} (RELAYBUS_REDIS_URL ends in /{db}; "
                "use /0 or a number below the server's 'databases' setting)"
            )
        return f"{where} refused the connection: {text}"
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, socket.gaierror) and cause.errno in _UNKNOWN_HOST:
        return (
            f"unknown host {parts.hostname!r} in RELAYBUS_REDIS_URL "
            "(check the spelling, or use an IP address)"
        )
    return None


async def probe(settings: Settings, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """PING the configured server once: ``None`` when it answers, a one-line reason when
    it cannot be reached now (worth retrying); raises :class:`RedisRefused` when it never
    will answer these settings."""
    client = aioredis.Redis.from_url(
        settings.redis_url.get_secret_value(),
        socket_timeout=min(timeout_s, settings.redis_socket_timeout_s),
        socket_connect_timeout=min(timeout_s, settings.redis_socket_timeout_s),
        retry_on_timeout=False,
    )
    try:
        await client.ping()
    except (redis.exceptions.RedisError, OSError) as exc:
        refusal = _refusal(settings, exc)
        if refusal is not None:
            raise RedisRefused(refusal) from None
        return str(exc).strip() or type(exc).__name__
    finally:
        await client.aclose()
    return None


async def wait_for_redis(
    settings: Settings,
    stop: asyncio.Event,
    on_waiting: Callable[[str], None],
    interval_s: float = PROBE_INTERVAL_S,
) -> bool:
    """Probe until the server answers (True) or ``stop`` is set (False). ``on_waiting`` is
    called once with the first reason; a refusal (:class:`RedisRefused`) is raised."""
    told = False
    while not stop.is_set():
        reason = await probe(settings)
        if reason is None:
            return True
        if not told:
            on_waiting(reason)
            told = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
    return False


async def refusal_watch(settings: Settings, stop: asyncio.Event) -> RedisRefused | None:
    """For a process that started while Redis was unreachable (and said so): probe until
    it answers. A refusal then (wrong password, no such database) sets ``stop`` and is
    returned."""
    try:
        await wait_for_redis(settings, stop, lambda _reason: None)
    except RedisRefused as exc:
        stop.set()
        return exc
    return None


async def serve_unless_refused(
    settings: Settings,
    stop: asyncio.Event,
    body: Callable[[], Awaitable[None]],
    log: logging.Logger,
    meanwhile: str,
) -> None:
    """Probe Redis, then run ``body`` (which serves until ``stop``).

    A refusal (:class:`RedisRefused`) is raised before ``body`` starts. An unreachable
    Redis is logged once (``meanwhile`` says what the process does until it answers) and
    ``body`` starts anyway; should Redis then refuse, ``stop`` is set and the refusal is
    raised once ``body`` has returned.
    """
    unreachable = await probe(settings)
    guard: asyncio.Task[RedisRefused | None] | None = None
    if unreachable is not None:
        log.warning(
            "Redis at %s is unreachable (%s); retrying, %s",
            redis_address(settings),
            unreachable,
            meanwhile,
        )
        guard = asyncio.create_task(refusal_watch(settings, stop), name="redis-guard")
    try:
        await body()
    finally:
        if guard is not None and not guard.done():
            guard.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await guard
    if guard is not None and not guard.cancelled() and (refused := guard.result()) is not None:
        raise refused
