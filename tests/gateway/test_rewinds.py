"""The rewind record in Redis (real server): several gateways reporting one failover make one
generation; a view told of a later, lower rewind is told again; tokens round-trip."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis.asyncio as aioredis
import redis.exceptions

from relaybus.gateway.delivery.rewinds import parse_token, token
from relaybus.shared.store.keys import Keys
from relaybus.shared.store.rewinds import Rewinds, Since
from tests.support.redis_acl import load_acl
from tests.support.servers import RedisServer


def test_token_carries_the_generation_and_a_plain_epoch_is_generation_0() -> None:
    assert token("ab12", 0) == "ab12"
    assert parse_token(token("ab12", 3)) == ("ab12", 3)
    assert parse_token("ab12") == ("ab12", 0)
    assert parse_token("a.b") == ("a.b", 0)


async def test_gateways_reporting_one_rewind_share_its_generation(
    rclient: aioredis.Redis, keys: Keys
) -> None:
    a, b = Rewinds(rclient, keys), Rewinds(rclient, keys)
    assert await a.since(0) == Since(0, None)
    assert await a.record(0, 33) == Since(1, None)  # the first to see it records it
    assert await b.record(0, 35) == Since(1, 33)  # covered by 33: adopted, not recorded
    assert await b.record(0, None) == Since(1, 33)  # nothing seen here: told what was
    assert await a.since(0) == Since(1, 33)
    assert await a.since(1) == Since(1, None)  # a view at generation 1 is current
    # A later report below everything recorded since the view's generation is new.
    assert await b.record(0, 30) == Since(2, 33)
    assert await a.since(1) == Since(2, 30)
    assert await a.since(0) == Since(2, 30)


async def test_the_gateway_acl_user_may_record_a_rewind(
    private_server: Callable[..., RedisServer], keys: Keys
) -> None:
    """deploy/redis-acl.conf lets the gateway user write {ns}:rewinds; still not the log."""
    srv = private_server()
    urls = load_acl(srv, keys.ns)
    gateway = aioredis.Redis.from_url(urls["gateway"])
    try:
        assert await Rewinds(gateway, keys).record(0, 7) == Since(1, None)
        with pytest.raises(redis.exceptions.NoPermissionError):
            await gateway.set(keys.seq, 1)
    finally:
        await gateway.aclose()
