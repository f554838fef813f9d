"""Gateway fixtures: a publisher on the shared server and an in-process gateway."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from shared.keys import Keys
from shared.settings import Settings
from tests.conftest import make_settings
from tests.support.gateway_publish import Publisher
from tests.support.gateway_server import RunningGateway, running_gateway
from tests.support.servers import RedisServer


@pytest.fixture
async def rclient(server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(server.url)
    yield client
    await client.aclose()


@pytest.fixture
def pub(rclient: aioredis.Redis, keys: Keys) -> Publisher:
    return Publisher(rclient, keys)


@pytest.fixture
def settings(server: RedisServer, namespace: str) -> Settings:
    return make_settings(server.url, namespace)


@pytest.fixture
async def gw(settings: Settings) -> AsyncIterator[RunningGateway]:
    async with running_gateway(settings) as g:
        yield g
