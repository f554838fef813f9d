"""``relaybus push keys``: one key pair for the fleet, kept in Redis, rotated on request."""

from __future__ import annotations

import pytest
import redis

from relaybus.cli import main
from relaybus.shared.store.keys import Keys
from tests.support.servers import RedisServer


def test_push_keys_prints_the_same_key_until_rotated(
    server: RedisServer,
    namespace: str,
    keys: Keys,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first call makes the pair, later calls print the same public key; --rotate makes a
    new one and drops the subscriptions made with the old one."""
    monkeypatch.setenv("RELAYBUS_REDIS_URL", server.url)
    monkeypatch.setenv("RELAYBUS_NAMESPACE", namespace)
    assert main(["push", "keys"]) == 0
    first = capsys.readouterr().out.strip()
    assert main(["push", "keys"]) == 0
    assert capsys.readouterr().out.strip() == first
    assert len(first) == 87  # b64url of an uncompressed P-256 point (65 bytes)
    client = redis.Redis.from_url(server.url)
    client.hset(f"{keys.prefix}push:subs", "x", b"{}")
    assert main(["push", "keys", "--rotate"]) == 0
    rotated = capsys.readouterr().out.strip()
    assert rotated != first and len(rotated) == 87
    assert client.exists(f"{keys.prefix}push:subs") == 0
    client.close()
