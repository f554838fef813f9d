"""Who a notification may reach: each subscription's token, checked at send time.

A ``RELAYBUS_TOKENS`` subscription reaches every session (full or read-only as configured).
A member's subscription reaches only sessions its token's scope allows (the gateway's
:meth:`Scope.allows`: a session whose place is unknown is outside every restricted scope),
and nothing once the token is gone from ``{ns}:tokens`` (revoked), even before the
revocation reader removed the subscription.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import redis.asyncio as aioredis

from relaybus.gateway.push.store import Subscription
from relaybus.shared.store import members
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire.scope import Scope


@dataclass(frozen=True, slots=True)
class Audience:
    """The live tokens behind a set of subscriptions."""

    #: bootstrap token fingerprint -> full access
    fingerprints: Mapping[str, bool]
    #: member token id -> its scope (a revoked or malformed token is absent)
    scopes: Mapping[str, Scope]

    def full(self, sub: Subscription) -> bool | None:
        """Whether ``sub``'s token has full access; ``None`` when the token is gone."""
        if sub.token_id:
            scope = self.scopes.get(sub.token_id)
            return None if scope is None else not scope.read_only
        return self.fingerprints.get(sub.token)

    def reaches(self, sub: Subscription, host: str | None, cwd: str | None) -> bool:
        """True when ``sub``'s token is live and its scope allows a session on ``host`` in
        ``cwd`` (empty: unknown)."""
        if not sub.token_id:
            return sub.token in self.fingerprints
        scope = self.scopes.get(sub.token_id)
        return scope is not None and scope.allows(host or None, cwd or None)


async def audience(
    client: aioredis.Redis,
    keys: Keys,
    fingerprints: Mapping[str, bool],
    subs: Iterable[Subscription],
) -> Audience:
    """The :class:`Audience` of ``subs``: one ``HMGET`` of their members' tokens."""
    ids = [s.token_id for s in subs if s.token_id]
    return Audience(fingerprints, await members.scopes(client, keys, ids))
