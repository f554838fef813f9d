"""Redis client construction: timeouts, keepalive and health checks on every connection.

A half-open connection must be noticed within seconds, so every socket has a read
timeout and idle connections are PINGed before reuse.

With ``RELAYBUS_REDIS_SENTINELS`` set, every client is a Sentinel-managed one (redis-py's
:class:`~redis.asyncio.sentinel.SentinelConnectionPool`): each new connection asks the
Sentinels for the current primary, and a connection error (the primary died) or a
``READONLY`` reply (it was demoted) drops the connection, so the next command, retried by
the caller as after any outage, reaches the promoted replica. ``RELAYBUS_REDIS_URL`` then
gives only the data nodes' password, user, database and TLS.

With ``RELAYBUS_REDIS_CLUSTER`` set, every client is a :class:`ClusterRedis`: the URL names a
seed node, the client learns the slot map from it and follows ``MOVED``/``ASK`` redirections
(a resharding) and topology changes by itself. A namespace's keys share one hash slot, so
the Lua append, the pipelines and the single-slot transactions each go to one node.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, cast
from urllib.parse import urlsplit

import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import parse_url
from redis.asyncio.sentinel import Sentinel

from relaybus.shared.settings import Settings
from relaybus.shared.store.keys import Keys

#: getaddrinfo's definite "no such name" answers (EAI_AGAIN, a DNS outage, is retried).
_UNKNOWN_HOST = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}
#: "Redis is not usable right now": hold, back off, retry. READONLY is a primary that became a
#: replica (failover); OOM clears when memory is freed. In a cluster, CLUSTERDOWN, a slot no
#: node serves, TRYAGAIN (a multi-key command while its slot migrates) and redirections that
#: outlast redis-py's retries ("TTL exhausted", a ClusterError) clear once the cluster
#: settles. Other Redis errors are bugs or misconfiguration and are not retried.
REDIS_UNAVAILABLE: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.OutOfMemoryError,
    redis.exceptions.ClusterError,
    redis.exceptions.TryAgainError,
    redis.exceptions.SlotNotCoveredError,
    OSError,
)
#: Cluster connections per node and client; a blocking XREAD holds one while it waits.
CLUSTER_MAX_CONNECTIONS = 500
PROBE_TIMEOUT_S = 2.0
PROBE_INTERVAL_S = 1.0


class RedisRefused(Exception):
    """Redis (or DNS) gave a definite no for these settings: wrong or missing password, a
    database the server does not have, a host name that does not exist. Retrying cannot
    help; the message is one line naming ``RELAYBUS_REDIS_URL`` and the fix."""


class SentinelRedis(aioredis.Redis):
    """A client of the primary the Sentinels name; closing it closes its Sentinel clients."""

    manager: Sentinel

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        try:
            await super().aclose(close_connection_pool)
        finally:
            await self.manager.aclose()


#: How long a command is retried while its slot migrates (see :class:`ClusterRedis`).
MIGRATION_SETTLE_S = 5.0
MIGRATION_RETRY_S = 0.05


def _migrating(exc: redis.exceptions.RedisError) -> bool:
    """The answers of a slot in migration, which mean "not executed, ask again shortly"."""
    if isinstance(exc, redis.exceptions.TryAgainError):
        return True  # a multi-key command (the Lua append) whose keys are split between nodes
    if type(exc) is redis.exceptions.ClusterError:
        return True  # "TTL exhausted": redis-py's own redirection retries ran out
    # A blocking XREADGROUP whose stream was migrated away from under it.
    return isinstance(exc, redis.exceptions.ResponseError) and str(exc).startswith("UNBLOCKED")


class ClusterRedis(RedisCluster):
    """redis-py's cluster client, steadier during a resharding and a cluster outage.

    While a slot migrates key by key, a multi-key command (the append's 7 keys) meets
    ``TRYAGAIN`` for as long as its keys are split between the two nodes, longer than the
    fraction of a second redis-py retries it for; a blocking ``XREADGROUP`` is ended with
    ``UNBLOCKED`` when its stream moves. None of them ran the command, so it is sent again
    for up to :data:`MIGRATION_SETTLE_S`. "No seed node answers" is raised as a connection
    error (retried like any outage) instead of a bare ``RedisClusterException``.
    """

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + MIGRATION_SETTLE_S
        while True:
            try:
                return await super().execute_command(*args, **kwargs)
            except redis.exceptions.RedisError as exc:
                if not _migrating(exc) or loop.time() >= deadline:
                    raise
            await asyncio.sleep(MIGRATION_RETRY_S)

    async def initialize(
        self,
        additional_startup_nodes_info: list[tuple[str, int]] | None = None,
        last_failed_node_name: str | None = None,
    ) -> ClusterRedis:
        try:
            await super().initialize(additional_startup_nodes_info, last_failed_node_name)
        except redis.exceptions.RedisClusterException as exc:
            cause = exc.__cause__
            refused = (
                redis.exceptions.AuthenticationError,
                redis.exceptions.ResponseError,
                redis.exceptions.RedisClusterException,
            )
            if isinstance(cause, redis.exceptions.RedisClusterException) and isinstance(
                cause.__context__, redis.exceptions.NoPermissionError
            ):  # redis-py reads a CLUSTER SLOTS denied by the ACL as "not a cluster"
                raise cause.__context__ from exc
            if isinstance(cause, refused):  # a wrong password, not a cluster node: a refusal
                raise cause from exc
            if isinstance(cause, (redis.exceptions.ConnectionError, OSError)):
                raise redis.exceptions.ConnectionError(
                    f"no node of the cluster answers ({str(cause).strip() or type(cause).__name__})"
                ) from exc
            if "not covered" in str(exc):
                raise redis.exceptions.ClusterDownError(
                    "the cluster does not serve every slot yet"
                ) from exc
            raise
        return self


def connect(settings: Settings, *, block_ms: int = 0) -> aioredis.Redis:
    """A client for ``settings.redis_url`` (or the Sentinels' primary). ``block_ms`` widens
    the read timeout for XREAD BLOCK."""
    return _client(
        settings,
        timeout_s=settings.redis_socket_timeout_s + block_ms / 1000,
        connect_timeout_s=settings.redis_socket_timeout_s,
        socket_keepalive=True,
        health_check_interval=settings.redis_health_check_interval_s,
        retry_on_timeout=False,
        decode_responses=False,
    )


def _client(
    settings: Settings, *, timeout_s: float, connect_timeout_s: float, **options: Any
) -> aioredis.Redis:
    url = settings.redis_url.get_secret_value()
    if settings.redis_cluster:
        return _cluster_client(
            url, timeout_s=timeout_s, connect_timeout_s=connect_timeout_s, **options
        )
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


def _cluster_client(
    url: str, *, timeout_s: float, connect_timeout_s: float, **options: Any
) -> aioredis.Redis:
    # Connection errors are retried by the caller (after an outage, as for a plain client);
    # the cluster client itself re-reads the slot map and retries redirections.
    options.pop("retry_on_timeout", None)
    client = ClusterRedis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=connect_timeout_s,
        max_connections=CLUSTER_MAX_CONNECTIONS,
        **options,
    )
    # The cluster client has the plain client's commands and routes each one to the node of
    # its key's slot; relaybus's store code is typed against the plain client.
    return cast(aioredis.Redis, client)


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
    client = _client(
        settings, timeout_s=bounded_s, connect_timeout_s=bounded_s, retry_on_timeout=False
    )
    try:
        await client.ping()
    except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException, OSError) as exc:
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
