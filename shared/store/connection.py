"""Redis client construction: timeouts, keepalive and health checks on every connection.

A half-open connection must be noticed within seconds, so every socket has a read
timeout and idle connections are PINGed before reuse.

With ``RELAYBUS_REDIS_SENTINELS`` set, every client is a Sentinel-managed one (redis-py's
:class:`~redis.asyncio.sentinel.SentinelConnectionPool`): each new connection asks the
Sentinels for the current primary, and a connection error (the primary died) or a
``READONLY`` reply (it was demoted) drops the connection, so the next command, retried by
the caller as after any outage, reaches the promoted replica. ``RELAYBUS_REDIS_URL`` then
gives only the data nodes' password, user, database and TLS.

With ``RELAYBUS_REDIS_CLUSTER`` set, every client is a cluster client
(:mod:`relaybus.shared.store.cluster`) given the URL as its seed node.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio.connection import parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel
from redis.backoff import NoBackoff

from relaybus.shared.settings import Settings
from relaybus.shared.store.cluster import cluster_client
from relaybus.shared.store.keys import Keys

#: getaddrinfo's definite "no such name" answers (EAI_AGAIN, a DNS outage, is retried).
_UNKNOWN_HOST = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}
#: "Redis is not usable right now": hold, back off, retry. READONLY is a primary that became a
#: replica (failover); OOM clears when memory is freed. In a cluster, CLUSTERDOWN, a slot no
#: node serves, TRYAGAIN (a multi-key command while its slot migrates) and redirections that
#: outlast redis-py's retries ("TTL exhausted", a ClusterError) clear once the cluster
#: settles. Other Redis errors are bugs or misconfiguration and are not retried.
#: ``REDIS_ERRORS`` are Redis's own answers; a socket's ``OSError`` means the same here.
REDIS_ERRORS: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.OutOfMemoryError,
    redis.exceptions.ClusterError,
    redis.exceptions.TryAgainError,
    redis.exceptions.SlotNotCoveredError,
)
REDIS_UNAVAILABLE: tuple[type[Exception], ...] = (*REDIS_ERRORS, OSError)
PROBE_TIMEOUT_S = 2.0
PROBE_INTERVAL_S = 1.0


class RedisRefused(Exception):
    """Redis (or DNS) gave a definite no for these settings: wrong or missing password, a
    database the server does not have, a host name that does not exist. Retrying cannot
    help; the message is one line naming ``RELAYBUS_REDIS_URL`` and the fix."""


class Connects:
    """How many connections a client has opened. redis-py reconnects without a word (a
    health-check PING or a retried command opens a new connection), so code that must notice
    a reconnect (it may be to a promoted replica that lost writes) counts them here."""

    def __init__(self) -> None:
        self.opened = 0

    async def handshake(self, conn: Any) -> None:
        """redis-py's ``redis_connect_func``: the usual handshake (AUTH, SELECT, …), counted."""
        await conn.on_connect()
        self.opened += 1


class SentinelRedis(aioredis.Redis):
    """A client of the primary the Sentinels name; closing it closes its Sentinel clients."""

    manager: Sentinel

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        try:
            await super().aclose(close_connection_pool)
        finally:
            await self.manager.aclose()


def connect(
    settings: Settings, *, block_ms: int = 0, connects: Connects | None = None
) -> aioredis.Redis:
    """A client for ``settings.redis_url`` (or the Sentinels' primary). ``block_ms`` widens
    the read timeout for XREAD BLOCK; ``connects`` counts the connections it opens (not in
    cluster mode: redis-py's cluster client takes no connect callback)."""
    options: dict[str, Any] = {}
    if connects is not None and not settings.redis_cluster:
        options["redis_connect_func"] = connects.handshake
    return _client(
        settings,
        timeout_s=settings.redis_socket_timeout_s + block_ms / 1000,
        connect_timeout_s=settings.redis_socket_timeout_s,
        socket_keepalive=True,
        health_check_interval=settings.redis_health_check_interval_s,
        retry_on_timeout=False,
        decode_responses=False,
        **options,
    )


def _client(
    settings: Settings, *, timeout_s: float, connect_timeout_s: float, **options: Any
) -> aioredis.Redis:
    settings.require_redis_url()
    url = settings.redis_url.get_secret_value()
    if settings.redis_cluster:
        return cluster_client(
            url, timeout_s=timeout_s, connect_timeout_s=connect_timeout_s, **options
        )
    if urlsplit(url).scheme == "unix":
        # TCP options: redis-py's Unix socket connection refuses them (every connect failed).
        options = {k: v for k, v in options.items() if not k.startswith("socket_keepalive")}
    sentinels = settings.sentinel_addresses
    if not sentinels:
        # A blocking pool: with every connection of the pool (redis-py: 100) in use, a command
        # waits up to the socket timeout for one instead of failing at once with "Too many
        # connections" (a reconnect storm of hundreds of resumes otherwise closes most of them).
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            timeout=settings.redis_socket_timeout_s,
            socket_timeout=timeout_s,
            socket_connect_timeout=connect_timeout_s,
            **options,
        )
        return aioredis.Redis.from_pool(pool)
    node: dict[str, object] = {
        k: v for k, v in parse_url(url).items() if k in ("db", "username", "password")
    }
    if urlsplit(url).scheme == "rediss":
        node["ssl"] = True
    sentinel_auth = {
        "username": settings.redis_sentinel_username or None,
        "password": settings.redis_sentinel_password.get_secret_value() or None,
    }
    manager = Sentinel(  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
        sentinels,
        sentinel_kwargs={
            "socket_timeout": min(timeout_s, settings.redis_socket_timeout_s),
            "socket_connect_timeout": connect_timeout_s,
            **sentinel_auth,
        },
        socket_timeout=timeout_s,
        socket_connect_timeout=connect_timeout_s,
        **node,
        **options,
    )
    client = manager.master_for(settings.redis_sentinel_service, redis_class=SentinelRedis)
    assert isinstance(client, SentinelRedis)
    client.manager = manager
    return client


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
    """``host:port`` (or the socket path) of the configured server, never the password; with
    Sentinels, the service and the Sentinels' addresses."""
    if settings.redis_cluster:
        return f"{_url_address(settings)} (Redis Cluster seed node)"
    if settings.redis_sentinels:
        return (
            f"primary of Sentinel service {settings.redis_sentinel_service!r} "
            f"(Sentinels {settings.redis_sentinels})"
        )
    return _url_address(settings)


def _url_address(settings: Settings) -> str:
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
    if isinstance(exc, redis.exceptions.RedisClusterException) and "not enabled" in str(exc):
        return (
            f"{where} is not part of a cluster (cluster mode is not enabled there): "
            "unset RELAYBUS_REDIS_CLUSTER or point RELAYBUS_REDIS_URL at a cluster node"
        )
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
    bounded_s = min(timeout_s, settings.redis_socket_timeout_s)
    if settings.sentinel_addresses and (refused := await _sentinel_refusal(settings, bounded_s)):
        raise RedisRefused(refused)
    client = _client(
        settings, timeout_s=bounded_s, connect_timeout_s=bounded_s, retry_on_timeout=False
    )
    try:
        await client.ping()
    except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException, OSError) as exc:
        refusal = _refusal(settings, exc)
        if refusal is not None:
            raise RedisRefused(refusal) from None
        if isinstance(exc, MasterNotFoundError):  # not its repr of every Sentinel client
            return str(exc).split(" : ", 1)[0]
        return str(exc).strip() or type(exc).__name__
    finally:
        await client.aclose()
    return None


async def _sentinel_refusal(settings: Settings, timeout_s: float) -> str | None:
    """The one-line reason when every Sentinel that answers refuses our credentials for it
    (redis-py reports that as "no master found", an outage, after retrying each Sentinel
    for seconds). Asked once each, first answer wins."""
    refused = False
    for host, port in settings.sentinel_addresses:
        sentinel = aioredis.Redis(
            host=host,
            port=port,
            username=settings.redis_sentinel_username or None,
            password=settings.redis_sentinel_password.get_secret_value() or None,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
        )
        try:
            await sentinel.ping()
        except redis.exceptions.AuthenticationError:
            refused = True  # a wrong or missing password (or user)
        except (redis.exceptions.RedisError, OSError):
            continue  # unreachable: not an answer
        else:
            return None
        finally:
            await sentinel.aclose()
    if not refused:
        return None
    where = f"the Sentinels at {settings.redis_sentinels}"
    if not settings.redis_sentinel_password.get_secret_value():
        return f"{where} require a password: set RELAYBUS_REDIS_SENTINEL_PASSWORD"
    return (
        f"{where} refused the password (or user) in RELAYBUS_REDIS_SENTINEL_PASSWORD "
        "(and RELAYBUS_REDIS_SENTINEL_USERNAME)"
    )


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
