"""Members' tokens and push (issue 25): until push learns scopes, a member's token cannot
subscribe a device, so no notification reaches a device outside its scope."""

from __future__ import annotations

import httpx
import redis.asyncio as aioredis

from relaybus.shared.store import members
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire.scope import Scope
from tests.conftest import make_settings
from tests.support.gateway_server import running_gateway
from tests.support.push_service import PushServiceStandIn
from tests.support.servers import RedisServer


async def test_member_token_cannot_subscribe_a_device(
    server: RedisServer, namespace: str, keys: Keys, push_service: PushServiceStandIn
) -> None:
    """PUT /push/subscription with a member's token is 401 and stores nothing."""
    admin = aioredis.Redis.from_url(server.url)
    try:
        _tid, token = await members.add_token(admin, keys, "dana", Scope.build(hosts=["h"]))
        settings = make_settings(server.url, namespace, push_endpoint_allow=push_service.host)
        async with running_gateway(settings) as gw, httpx.AsyncClient(base_url=gw.http) as http:
            push_service.vapid_public = (await http.get("/push/key")).json()["publicKey"]
            r = await http.put(
                "/push/subscription",
                json={"subscription": push_service.device("phone").subscription(), "prefs": {}},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert r.status_code == 401, r.text
        assert await admin.hlen(keys.push_subs) == 0
    finally:
        await admin.aclose()
