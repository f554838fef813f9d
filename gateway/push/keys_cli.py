"""``relaybus push keys [--rotate]``: the fleet's VAPID public key, kept in Redis."""

from __future__ import annotations

import asyncio
import sys

from redis.exceptions import RedisError

from relaybus.gateway.push.store import PushStore
from relaybus.shared.settings import Settings
from relaybus.shared.store.connection import connect
from relaybus.shared.store.keys import Keys


async def _keys(settings: Settings, rotate: bool) -> str:
    client = connect(settings)
    try:
        return (await PushStore(client, Keys(settings.namespace)).vapid(rotate=rotate)).public
    finally:
        await client.aclose()


def run(settings: Settings, *, rotate: bool = False) -> int:
    """Print the public key (made on first use); ``rotate`` replaces the pair first."""
    try:
        public = asyncio.run(_keys(settings, rotate))
    except (RedisError, OSError) as exc:
        print(f"relaybus: Redis unavailable: {exc}", file=sys.stderr)
        return 1
    if rotate:
        print("new key pair: every device must turn push on again", file=sys.stderr)
    print(public)
    return 0
