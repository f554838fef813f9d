"""RELAYBUS_REDIS_CLUSTER: the setting's refusals, the cluster client, probe and doctor."""

from __future__ import annotations

import asyncio
import secrets

import pytest

from relaybus.doctor import FAIL, OK, check_redis
from relaybus.shared.settings import SettingsError, load_settings
from relaybus.shared.store.cluster import ClusterRedis
from relaybus.shared.store.connection import (
    RedisRefused,
    connect,
    probe,
    redis_address,
)
from relaybus.shared.store.keys import Keys
from tests.conftest import make_settings
from tests.support.cluster import ClusterRig
from tests.support.gateway_client import FULL, WsClient
from tests.support.gateway_publish import Publisher
from tests.support.gateway_server import running_gateway
from tests.support.redis_acl import ROLES, set_acl_users
from tests.support.servers import RedisServer, free_port


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"redis_sentinels": "10.0.0.5:26379"},
            "RELAYBUS_REDIS_CLUSTER: cannot be combined with RELAYBUS_REDIS_SENTINELS",
        ),
        ({"redis_url": "redis://h:7000/3"}, "RELAYBUS_REDIS_CLUSTER: needs database 0"),
        ({"redis_url": "unix:///run/redis.sock"}, "RELAYBUS_REDIS_CLUSTER: needs a redis://"),
        ({"redis_wait_replicas": 1}, "RELAYBUS_REDIS_WAIT_REPLICAS: is not supported with"),
    ],
)
def test_cluster_refuses_what_a_cluster_cannot_do(
    overrides: dict[str, object], message: str
) -> None:
    """Each impossible combination is one line naming the variable."""
    with pytest.raises(SettingsError, match=message):
        load_settings(redis_cluster=True, **overrides)


async def test_seed_node_gives_the_whole_cluster(cluster: ClusterRig, namespace: str) -> None:
    """Given one seed node, the client writes a namespace served by another master."""
    settings = make_settings(cluster.seed_url, namespace, redis_cluster=True)
    assert redis_address(settings) == f"127.0.0.1:{cluster.ports[0]} (Redis Cluster seed node)"
    assert await probe(settings) is None
    # object: connect() is typed aioredis.Redis, and cluster_client() casts its ClusterRedis
    client: object = connect(settings)
    assert isinstance(client, ClusterRedis)
    try:
        await client.set(Keys(namespace).epoch, "e")
    finally:
        await client.aclose()
    with cluster.node(cluster.owner_of(namespace)) as node:
        assert node.get(Keys(namespace).epoch) == b"e"


def test_doctor_checks_the_cluster(cluster: ClusterRig, namespace: str) -> None:
    settings = make_settings(cluster.seed_url, namespace, redis_cluster=True)
    assert check_redis(settings).status == OK


def test_seed_node_down_is_one_clear_line(namespace: str) -> None:
    """Nothing answers at the seed: a retryable reason naming the cluster, and doctor says
    where and what to fix."""
    port = free_port()
    settings = make_settings(f"redis://127.0.0.1:{port}/0", namespace, redis_cluster=True)
    reason = asyncio.run(probe(settings))
    assert reason is not None and reason.startswith("no node of the cluster answers")
    check = check_redis(settings)
    assert check.status == FAIL
    assert f"127.0.0.1:{port} (Redis Cluster seed node) is unreachable" in check.text


async def test_a_plain_server_is_refused_in_cluster_mode(
    server: RedisServer, namespace: str
) -> None:
    """RELAYBUS_REDIS_CLUSTER pointed at a server without cluster mode is a refusal, not a wait."""
    settings = make_settings(server.url, namespace, redis_cluster=True)
    with pytest.raises(
        RedisRefused, match=r"cluster mode is not enabled there.*RELAYBUS_REDIS_CLUSTER"
    ):
        await probe(settings)


async def test_shipped_acl_users_work_on_the_cluster(cluster: ClusterRig, namespace: str) -> None:
    """deploy/redis-acl.conf on every node: the collector's user appends and the gateway's
    user serves it, both through the cluster client (which reads the slot map and sends
    ASKING; both need to be allowed)."""
    passwords = {role: secrets.token_hex(16) for role in ROLES}
    for port in cluster.ports:
        with cluster.node(port) as admin:
            set_acl_users(admin, namespace, passwords)

    def url(role: str) -> str:
        return f"redis://relaybus-{role}:{passwords[role]}@127.0.0.1:{cluster.ports[0]}/0"

    collector = connect(make_settings(url("collector"), namespace, redis_cluster=True))
    try:
        await Publisher(collector, Keys(namespace)).start_session("s1")
        gateway = make_settings(url("gateway"), namespace, redis_cluster=True)
        async with running_gateway(gateway) as gw, WsClient(gw.ws, token="full-token") as c:
            await c.hello(FULL, lastSeqId=0)
            started = await c.expect("session_started")
    finally:
        await collector.aclose()
    assert started["sessionId"] == "s1"


async def test_a_user_denied_the_slot_map_is_told_so(cluster: ClusterRig, namespace: str) -> None:
    """A user whose ACL lacks CLUSTER SLOTS gets the server's NOPERM, not "not a cluster"."""
    user, password = f"noslots-{namespace}", secrets.token_hex(8)
    with cluster.node(cluster.ports[0]) as admin:
        admin.execute_command("ACL", "SETUSER", user, "on", f">{password}", "+ping", "~*")
    url = f"redis://{user}:{password}@127.0.0.1:{cluster.ports[0]}/0"
    with pytest.raises(RedisRefused, match=r"refused the connection: .*cluster\|slots"):
        await probe(make_settings(url, namespace, redis_cluster=True))
