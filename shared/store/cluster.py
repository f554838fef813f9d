"""The Redis Cluster client (``RELAYBUS_REDIS_CLUSTER``): redis-py's, given a seed node.

It learns the slot map from the seed and follows ``MOVED``/``ASK`` redirections (a
resharding) and topology changes by itself. Every key of a namespace is ``{<ns>}:…``, one
hash slot, so the Lua append, the pipelines and the single-slot transactions each go to one
node. What redis-py leaves to its callers during a slot migration is retried here.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio.cluster import RedisCluster

#: Cluster connections per node and client; a blocking XREAD holds one while it waits.
CLUSTER_MAX_CONNECTIONS = 500
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


def cluster_client(
    url: str, *, timeout_s: float, connect_timeout_s: float, **options: Any
) -> aioredis.Redis:
    """A :class:`ClusterRedis` seeded with ``url``, typed as the plain client relaybus's
    store code is written against (it has the same commands and routes each one to the node
    of its key's slot)."""
    # Connection errors are retried by the caller (after an outage, as for a plain client);
    # the cluster client itself re-reads the slot map and retries redirections.
    options.pop("retry_on_timeout", None)
    client = ClusterRedis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=connect_timeout_s,
        max_connections=CLUSTER_MAX_CONNECTIONS,
        # A MOVED patches the slot map. By default every 5th MOVED also closes and rebuilds
        # the whole client, cutting the connections other tasks are using (a blocking XREAD:
        # seen as an AttributeError inside redis-py after a resharding).
        reinitialize_steps=0,
        **options,
    )
    return cast(aioredis.Redis, client)
