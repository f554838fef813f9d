"""Cluster fixtures: one real 3-master cluster for the directory; relaybus given only a seed node."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis

from relaybus.shared.settings import Settings
from relaybus.shared.store.connection import connect
from relaybus.shared.store.keys import Keys
from tests.conftest import make_settings
from tests.support.cluster import ClusterRig
from tests.support.gateway_publish import Publisher
from tests.support.gateway_server import RunningGateway, running_gateway


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterRig]:
    rig = ClusterRig(tmp_path_factory.mktemp("cluster"))
    try:
        rig.start()
        yield rig
    finally:
        rig.stop()


@pytest.fixture
def namespace(cluster: ClusterRig) -> str:
    """A fresh namespace served by a master other than the seed node."""
    return cluster.namespace_away_from_seed()


@pytest.fixture
def settings(cluster: ClusterRig, namespace: str) -> Settings:
    return make_settings(cluster.seed_url, namespace, redis_cluster=True)


@pytest.fixture
async def rclient(settings: Settings) -> AsyncIterator[aioredis.Redis]:
    """relaybus's own cluster client (what ``connect`` gives with RELAYBUS_REDIS_CLUSTER)."""
    client = connect(settings)
    yield client
    await client.aclose()


@pytest.fixture
def pub(rclient: aioredis.Redis, keys: Keys) -> Publisher:
    return Publisher(rclient, keys)


@pytest.fixture
async def gw(settings: Settings) -> AsyncIterator[RunningGateway]:
    async with running_gateway(settings) as g:
        yield g
