"""Redis operations of the command path (``{ns}:cmd:<host>``, its replies, reservations, the
session route)."""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline
from redis.exceptions import ResponseError

from relaybus.shared.store.keys import GROUP, REPLY_MAXLEN, REPLY_TTL_S, Keys
from relaybus.shared.store.session_row import Field
from relaybus.shared.wire.commands import Reply


async def ensure_group(
    client: aioredis.Redis, stream: str, group: str = GROUP, *, start: str = "0"
) -> None:
    """Create consumer group ``group`` (the ``collectors`` one unless told) at ``start`` (and
    the stream) unless it exists; only BUSYGROUP is ignored."""
    try:
        await client.xgroup_create(stream, group, id=start, mkstream=True)
    except ResponseError as exc:
        if not str(exc).startswith("BUSYGROUP"):
            raise


def queue_reply(pipe: Pipeline, keys: Keys, gateway_id: str, reply: Reply) -> None:
    """Queue in ``pipe`` the XADD of ``reply`` to gateway ``gateway_id``'s reply stream (capped)
    and the stream's expiry."""
    stream = keys.reply(gateway_id)
    pipe.xadd(stream, reply.fields(), maxlen=REPLY_MAXLEN, approximate=True)  # type: ignore[arg-type]
    pipe.expire(stream, REPLY_TTL_S)


async def session_route(client: aioredis.Redis, keys: Keys, sid: str) -> tuple[str, str] | None:
    """``(host, cwd)`` of a known or reserved session, or ``None`` when there is none."""
    fields = [Field.HOST, Field.CWD]
    host, cwd = await client.hmget(keys.session(sid), fields)
    if host is None:
        host, cwd = await client.hmget(keys.reservation(sid), fields)
    if not isinstance(host, bytes):
        return None
    return host.decode(), cwd.decode() if isinstance(cwd, bytes) else ""
