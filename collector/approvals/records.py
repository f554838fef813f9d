"""The Redis records of held permission requests (key layout: ``relaybus.shared.wire.approvals``).

Every operation is bounded by :data:`REDIS_OP_S`: it runs on the hook's path, and a hook
left without an answer falls through to Claude Code's own prompt anyway.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable
from typing import Any, TypeVar

import orjson
import redis.asyncio as aioredis

from relaybus.shared.aio import now_ms
from relaybus.shared.settings import Settings
from relaybus.shared.store.keys import Keys
from relaybus.shared.store.session_row import Field
from relaybus.shared.wire import approvals

T = TypeVar("T")

#: One Redis round trip on the hook's path may take this long before we give up.
REDIS_OP_S = 2.0

Decision = tuple[str, str | None]


class Records:
    def __init__(self, client: aioredis.Redis, settings: Settings) -> None:
        self.client = client
        self.keys = Keys(settings.namespace)
        self.host = settings.host_id
        self.timeout_s = settings.approval_timeout_seconds

    async def _op(self, aw: Awaitable[T]) -> T:
        return await asyncio.wait_for(aw, REDIS_OP_S)

    async def watchers(self, sid: str) -> int:
        """Full-access clients watching the session, as the gateways count them."""
        fields = await self._op(self.client.hgetall(self.keys.session_watchers(sid)))
        return approvals.live_watchers(fields, now_ms())

    async def session(self, sid: str) -> tuple[bytes | str | None, bytes | str | None]:
        """The session hash's (host, cwd); host is ``None`` for an unknown session."""
        host, cwd = await self._op(
            self.client.hmget(self.keys.session(sid), [Field.HOST, Field.CWD])
        )
        return host, cwd

    async def index(
        self, sid: str, key: str, name: str, expires_ms: int, asks: dict[str, Any] | None = None
    ) -> None:
        """List the request in the session's ``approvals`` hash (``asks``: what the gateway
        checks a decision against, ``relaybus.collector.approvals.asks.Asks.index``)."""
        index = self.keys.approvals(sid)
        entry = orjson.dumps(
            {**(asks or {}), "host": self.host, "name": name, "expiresAt": expires_ms}
        )
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(index, key, entry)
        pipe.expire(index, int(self.timeout_s) + approvals.DECISION_GRACE_S)
        await self._op(pipe.execute())

    async def decision(self, key: str) -> Decision | None:
        """The decision a gateway (or we) claimed, if any."""
        return approvals.parse_decision(await self._op(self.client.get(self.keys.approval(key))))

    async def extra(self, key: str) -> dict[str, Any]:
        """The client decision's ``answers`` / ``suggestion`` / ``interrupt``, as claimed."""
        return approvals.decision_extra(await self._op(self.client.get(self.keys.approval(key))))

    async def decided_by(self, key: str) -> dict[str, Any] | None:
        """Who decided from a client (``{member, device, at}``), as the gateway recorded it."""
        return approvals.decided_by(await self._op(self.client.get(self.keys.approval(key))))

    async def claim(self, key: str, decision: Decision) -> Decision:
        """Claim the decision key (first writer wins); the decision that stands."""
        dkey = self.keys.approval(key)
        ttl = approvals.DECISION_GRACE_S + int(self.timeout_s)
        if await self._op(
            self.client.set(dkey, approvals.decision_record(*decision), nx=True, ex=ttl)
        ):
            return decision
        # a client decided in the same instant: its decision stands
        return await self.decision(key) or decision

    async def resolve(self, sid: str, key: str, outcome: str) -> None:
        """Drop the request from the index and name it the session's last resolved one.

        Both change together, so a late keyless decision sees one or the other
        (``already_resolved``, not ``no_pending_request``).
        """
        pipe = self.client.pipeline(transaction=True)
        pipe.hdel(self.keys.approvals(sid), key)
        pipe.set(
            self.keys.approval_resolved(sid),
            approvals.resolved_record(key, outcome, now_ms()),
            ex=max(1, math.ceil(self.timeout_s)),
        )
        await self._op(pipe.execute())
