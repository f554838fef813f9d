"""Sentinel settings and clients, and the append's optional WAIT, against real servers."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from relaybus.shared.settings import SettingsError, load_settings, parse_sentinels
from relaybus.shared.store.appendlog import AppendBatch, LogAppender, OutEvent
from relaybus.shared.store.connection import connect, ensure_epoch, probe, redis_address
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire import frames
from tests.conftest import make_settings
from tests.support.sentinel import SentinelRig
from tests.support.servers import RedisServer


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelRig]:
    ha = SentinelRig(tmp_path_factory.mktemp("ha"))
    try:
        ha.start()
        yield ha
    finally:
        ha.stop()


def test_sentinel_addresses_parse_and_refuse() -> None:
    """host:port lists parse (IPv6 in brackets); a malformed entry is one line naming the variable."""
    assert parse_sentinels(" a:1, [::1]:26379,") == [("a", 1), ("::1", 26379)]
    assert parse_sentinels("") == []
    with pytest.raises(SettingsError, match=r"RELAYBUS_REDIS_SENTINELS.*'b:x'"):
        load_settings(redis_sentinels="a:1,b:x")
    with pytest.raises(SettingsError, match="RELAYBUS_REDIS_SENTINELS"):
        load_settings(redis_sentinels="a:0")


async def test_client_reaches_the_primary_the_sentinels_name(
    rig: SentinelRig, namespace: str
) -> None:
    """With Sentinels set, the URL's host is ignored: writes land on the named primary."""
    settings = make_settings("redis://127.0.0.1:1/0", namespace, redis_sentinels=rig.sentinels)
    assert "Sentinel service 'relaybus'" in redis_address(settings)
    assert await probe(settings) is None
    client = connect(settings)
    try:
        await client.set(f"{namespace}:k", "v")
    finally:
        await client.aclose()
    with rig.primary.client() as p:
        assert p.get(f"{namespace}:k") == b"v"


async def test_probe_names_a_missing_service(rig: SentinelRig, namespace: str) -> None:
    """An unknown service is a retryable reason (the Sentinels may not know it yet)."""
    settings = make_settings(
        "redis://127.0.0.1:1/0",
        namespace,
        redis_sentinels=rig.sentinels,
        redis_sentinel_service="nosuch",
    )
    reason = await probe(settings)
    assert reason is not None and "nosuch" in reason


def one_event(text: str) -> OutEvent:
    prefix = frames.session_event(
        "s1", {"type": "user", "blocks": [{"kind": "text", "text": text}]}
    )
    return OutEvent(frames.SESSION_EVENT, prefix, session_stream=True)


async def test_wait_reports_the_replicas_that_acknowledged(
    rig: SentinelRig, private_server: Callable[..., RedisServer], namespace: str
) -> None:
    """WAIT 1 after the append: 1 with a replica attached, 0 (after the timeout) without."""
    keys = Keys(namespace)
    for url, sentinels, replicas in (
        (rig.primary.url, rig.sentinels, 1),
        (private_server().url, "", 0),
    ):
        settings = make_settings(url, namespace, redis_sentinels=sentinels)
        client = connect(settings)
        try:
            epoch = await ensure_epoch(client, keys)
            app = LogAppender(
                client,
                keys,
                "h1",
                log_maxlen=100,
                session_maxlen=100,
                session_ttl_s=60,
                wait_replicas=1,
                wait_timeout_ms=200,
            )
            await client.script_flush()  # the first run must load the script itself
            done = await app.append(AppendBatch("s1", [one_event("a")]), epoch=epoch, stamp_ms=1)
            assert (done.first_seq, done.replicas) == (1, replicas)
        finally:
            await client.aclose()
    with rig.replica.client() as r:
        assert r.xlen(keys.log) == 1
