"""Hold permission requests for push-subscribed devices.

For every recent session a device would get approvals of, the gateway stamps the field
``push`` in the session's ``watchers`` hash, which the collector counts like a watching
client; the stamp is renewed every third of ``RELAYBUS_WATCHERS_TTL_S``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import cast

from redis.exceptions import RedisError

from relaybus.gateway.context import GatewayContext
from relaybus.gateway.push import policy
from relaybus.gateway.push.audience import Audience, audience
from relaybus.gateway.push.store import PushStore, Subscription
from relaybus.shared.aio import Backoff, Outage, now_ms, reraise_if_cancelling
from relaybus.shared.store.session_row import Field
from relaybus.shared.wire import approvals as ap

log = logging.getLogger(__name__)

#: Field of ``session:<sid>:watchers`` that stands for the push-subscribed devices.
HOLD_FIELD = "push"
#: Sessions active this recently are kept held for devices.
HOLD_RECENT_S = 900
HOLD_MAX_SESSIONS = 500


class PushHolds:
    """Stamps the ``push`` watcher of sessions whose approvals a device gets."""

    def __init__(
        self, ctx: GatewayContext, *, store: PushStore, tokens: Mapping[str, bool]
    ) -> None:
        self._client = ctx.client
        self._keys = ctx.keys
        self._store = store
        #: bootstrap token fingerprint -> full access; only full-access devices get approvals.
        self._tokens = tokens
        self._ttl_s = ctx.settings.watchers_ttl_s
        #: sid -> monotonic time of its last stamp
        self._held: dict[str, float] = {}
        self._running = False
        self._outage = Outage(
            log, "Redis (push holds)", Backoff(first_s=0.5, max_s=self._ttl_s / 3)
        )

    def healthy(self) -> bool:
        """:meth:`run` is running (not crashed, not waiting to be restarted)."""
        return self._running

    def due(self, sid: str) -> bool:
        """Whether ``sid``'s stamp is older than a third of its lifetime (or missing)."""
        return time.monotonic() - self._held.get(sid, 0.0) > self._ttl_s / 3

    async def run(self) -> None:
        """Renew the stamps until cancelled, riding out Redis outages with backoff; any other
        error ends it (the runtime's supervisor logs, counts and restarts it)."""
        self._running = True
        try:
            while True:
                try:
                    await self.hold_pass()
                    self._outage.ok()
                    delay = self._ttl_s / 3
                except (RedisError, OSError) as exc:
                    reraise_if_cancelling(exc)
                    delay = self._outage.failed(exc)
                await asyncio.sleep(delay)
        finally:
            self._running = False

    async def hold_pass(self) -> None:
        """Stamp the ``push`` watcher of every recent session a device gets approvals of."""
        subs = await self._store.subscriptions()
        who = await audience(self._client, self._keys, self._tokens, subs)
        if not any(who.full(s) for s in subs):
            return
        recent = await self._client.zrangebyscore(
            self._keys.sessions,
            now_ms() - HOLD_RECENT_S * 1000,
            "+inf",
            start=0,
            num=HOLD_MAX_SESSIONS,
        )
        sids = [s.decode(errors="replace") for s in cast(list[bytes], recent)]
        pipe = self._client.pipeline(transaction=False)
        for sid in sids:
            pipe.hmget(self._keys.session(sid), [Field.HOST, Field.CWD])
        got: list[list[bytes | None]] = await pipe.execute()
        places = {
            sid: ((h or b"").decode(errors="replace"), (c or b"").decode(errors="replace"))
            for sid, (h, c) in zip(sids, got, strict=True)
        }
        await self.hold(places, subs, who)

    async def hold(
        self, places: Mapping[str, tuple[str, str]], subs: list[Subscription], who: Audience
    ) -> None:
        """Stamp the sessions of ``places`` (sid -> (host, cwd)) that a device of ``subs``
        gets approvals of (a member's device only inside its token's scope)."""
        ttl_s = self._ttl_s
        value = ap.watcher_value(1, now_ms() + ttl_s * 1000)
        pipe = self._client.pipeline(transaction=False)
        held = []
        for sid, (host, cwd) in places.items():
            if any(
                who.full(s)
                and who.reaches(s, host, cwd)
                and s.prefs.wants(policy.APPROVALS, host, sid)
                for s in subs
            ):
                key = self._keys.session_watchers(sid)
                pipe.hset(key, HOLD_FIELD, value)
                pipe.expire(key, ttl_s)
                held.append(sid)
        if held:
            await pipe.execute()
        now = time.monotonic()
        for sid in held:
            self._held[sid] = now
        if len(self._held) > HOLD_MAX_SESSIONS * 2:
            self._held = {k: v for k, v in self._held.items() if now - v < ttl_s}
