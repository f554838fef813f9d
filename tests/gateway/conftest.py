"""Gateway fixtures: a publisher on the shared server and an in-process gateway."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from relaybus.shared.settings import Settings
from relaybus.shared.store.keys import Keys
from tests.conftest import make_settings
from tests.support.gateway_publish import Publisher
from tests.support.gateway_server import RunningGateway, running_gateway
from tests.support.redis_acl import ACL_ENV, load_acl
from tests.support.servers import RedisServer


@pytest.fixture(scope="session")
def acl_urls(server: RedisServer) -> dict[str, str] | None:
    """With RELAYBUS_TEST_REDIS_ACL=1: the shipped ACL users on the shared server."""
    if os.environ.get(ACL_ENV) != "1":
        return None
    return load_acl(server, "t*")  # every test namespace starts with "t"


@pytest.fixture
async def rclient(
    server: RedisServer, acl_urls: dict[str, str] | None
) -> AsyncIterator[aioredis.Redis]:
    """The publisher's client (the collector's ACL user in ACL mode)."""
    client = aioredis.Redis.from_url(acl_urls["collector"] if acl_urls else server.url)
    yield client
    await client.aclose()


@pytest.fixture
def pub(rclient: aioredis.Redis, keys: Keys) -> Publisher:
    return Publisher(rclient, keys)


@pytest.fixture
def settings(server: RedisServer, namespace: str, acl_urls: dict[str, str] | None) -> Settings:
    """The gateway's settings (its ACL user in ACL mode)."""
    return make_settings(acl_urls["gateway"] if acl_urls else server.url, namespace)


@pytest.fixture
async def gw(settings: Settings) -> AsyncIterator[RunningGateway]:
    async with running_gateway(settings) as g:
        yield g
