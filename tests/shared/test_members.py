"""Members' tokens and the audit trail on a real server, through the store and the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess

import pytest
import redis

from relaybus.collector.heartbeat import beat
from relaybus.shared.store import audit, members
from relaybus.shared.store.connection import connect
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire.device import device_label
from relaybus.shared.wire.scope import Scope, ScopeError
from tests.conftest import make_settings
from tests.shared.test_cli import run_cli
from tests.support.servers import RedisServer
from tests.support.wait import wait_for


def cli(server: RedisServer, namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYBUS_")}
    env |= {"RELAYBUS_REDIS_URL": server.url, "RELAYBUS_NAMESPACE": namespace}
    return run_cli(*args, env=env)


def test_scope_allows_hosts_and_project_subtrees() -> None:
    """A scope admits its hosts and everything under its projects, nothing else."""
    s = Scope.build(hosts=["a"], projects=["/src/app/"])
    assert s.allows("a", "/src/app") and s.allows("a", "/src/app/lib")
    assert not s.allows("a", "/src/application")
    assert not s.allows("b", "/src/app")
    assert not s.allows("a", None)
    assert Scope().allows(None, None)
    assert Scope.from_json(s.to_json()) == s


def test_scope_rejects_hostile_entries() -> None:
    """Relative projects, control characters and too many entries are refused."""
    for bad in ({"projects": ["rel"]}, {"projects": ["/a\x00"]}, {"hosts": ["x"] * 65 + ["y"]}):
        with pytest.raises(ScopeError):
            Scope.from_json(bad if "projects" in bad else {"hosts": [f"h{i}" for i in range(65)]})


@pytest.mark.parametrize(
    "host", ["lap\x00top", "lap\x1b[2Jtop", "lap\x7ftop", "lap\x85top", "a b", "a:b"]
)
def test_scope_refuses_a_host_with_a_control_character(host: str) -> None:
    """A machine id in a scope holds no control character (C0, DEL, C1), whitespace or ':'."""
    with pytest.raises(ScopeError, match="not a machine id"):
        Scope.from_json({"hosts": ["laptop", host]})
    assert Scope.build(hosts=["laptop", "büro-1.lan"]).hosts == frozenset({"laptop", "büro-1.lan"})


def test_cli_token_add_refuses_a_host_with_a_control_character(
    server: RedisServer, namespace: str
) -> None:
    """`token add --hosts` with an escape sequence in a machine id: exit 2, nothing stored."""
    out = cli(server, namespace, "token", "add", "dana", "--hosts", "laptop,evil\x1b[2J")
    assert out.returncode == 2 and "not a machine id" in out.stderr, out.stderr
    assert redis.Redis.from_url(server.url).hlen(Keys(namespace).tokens) == 0


def test_device_labels_are_coarse() -> None:
    """User agents map to a handful of fixed labels."""
    assert device_label("Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X)") == "iPhone"
    assert device_label("Mozilla/5.0 (Linux; Android 14)") == "Android"
    assert device_label("Mozilla/5.0 (X11; Linux x86_64)") == "Linux"
    assert device_label(None) == "client"
    assert device_label("<script>" * 100) == "client"


async def test_store_resolves_only_live_tokens(server: RedisServer, namespace: str) -> None:
    """A token resolves to its member and scope until revoked; its hash alone is stored."""
    settings = make_settings(server.url, namespace)
    client, keys = connect(settings), Keys(namespace)
    try:
        scope = Scope.build(read_only=True, hosts=["h1"])
        tid, token = await members.add_token(client, keys, "dana", scope)
        stored = await client.hgetall(keys.tokens)
        assert token not in repr(stored)
        found = await members.resolve(client, keys, token)
        assert found is not None and (found.name, found.token_id, found.scope) == (
            "dana",
            tid,
            scope,
        )
        assert await members.resolve(client, keys, token[:-1] + "x") is None
        assert await members.resolve(client, keys, "full-token") is None
        await members.mark_seen(client, keys, tid, "iPhone")
        (entry,) = await members.list_tokens(client, keys)
        assert entry.devices == ("iPhone",) and entry.last_used_ms
        assert await members.revoke(client, keys, "dana") == [tid]
        assert await members.resolve(client, keys, token) is None
        assert [f for _, f in await client.xrange(keys.revocations) or []] == [
            {b"id": tid.encode()}
        ]
    finally:
        await client.aclose()


async def test_audit_trims_by_retention(server: RedisServer, namespace: str) -> None:
    """Appends keep only entries inside the retention; read filters by member and time."""
    settings = make_settings(server.url, namespace)
    client, keys = connect(settings), Keys(namespace)
    try:
        await client.xadd(keys.audit, {"action": "prompt", "member": "old"}, id="1000-0")
        trail = audit.Trail(client, keys, retention_days=1)
        await trail.append("prompt", member="dana", sessionId="s1", host="h1", device="Mac")
        await trail.append("deny", member="erik", sessionId="s2", host="h2")
        rows = await audit.read(client, keys)
        assert "old" not in {r.get("member") for r in rows}
        assert [r["action"] for r in await audit.read(client, keys, member="erik")] == ["deny"]
    finally:
        await client.aclose()


def test_cli_token_add_list_revoke(server: RedisServer, namespace: str) -> None:
    """`token add` defaults to the owner's machines, prints the token once; list shows it; revoke removes it."""
    r = redis.Redis.from_url(server.url)
    keys = Keys(namespace)
    r.hset(keys.owners, mapping={"laptop": "dana", "server": "erik"})
    none = cli(server, namespace, "token", "add", "nobody")
    assert none.returncode == 2 and "RELAYBUS_OWNER=nobody" in none.stderr
    out = cli(server, namespace, "token", "add", "dana", "--json")
    assert out.returncode == 0, out.stderr
    made = json.loads(out.stdout)
    assert made["name"] == "dana" and made["url"].endswith(f"#token={made['token']}")
    plain = cli(server, namespace, "token", "add", "erik", "--read", "--projects", "/srv/x")
    assert plain.returncode == 0 and "Open on the phone:" in plain.stdout
    listed = [
        json.loads(line)
        for line in cli(server, namespace, "token", "list", "--json").stdout.splitlines()
    ]
    assert {(e["name"], tuple(e["scope"]["hosts"])) for e in listed} == {
        ("dana", ("laptop",)),
        ("erik", ("server",)),
    }
    assert made["token"] not in cli(server, namespace, "token", "list").stdout
    assert cli(server, namespace, "token", "revoke", made["id"]).returncode == 0
    assert cli(server, namespace, "token", "revoke", "dana").returncode == 1
    assert [
        e["name"]
        for e in map(
            json.loads, cli(server, namespace, "token", "list", "--json").stdout.splitlines()
        )
    ] == ["erik"]


def test_cli_audit_json_and_since(server: RedisServer, namespace: str) -> None:
    """`relaybus audit --json` prints one object a line with member, action, sessionId, host, ts."""
    r = redis.Redis.from_url(server.url)
    keys = Keys(namespace)
    r.xadd(
        keys.audit,
        {"action": "approve", "member": "dana", "sessionId": "s", "host": "h", "ts": "5"},
        id="5-0",
    )
    out = cli(server, namespace, "audit", "--json", "--since", "0")
    assert out.returncode == 0, out.stderr
    (row,) = map(json.loads, out.stdout.splitlines())
    assert row == {"action": "approve", "member": "dana", "sessionId": "s", "host": "h", "ts": 5}
    assert cli(server, namespace, "audit", "--json").stdout == ""  # default: the last day
    assert cli(server, namespace, "audit", "--since", "yesterday").returncode == 2


async def test_collector_heartbeat_registers_its_owner(server: RedisServer, namespace: str) -> None:
    """A collector with RELAYBUS_OWNER puts its machine under that member ({ns}:owners)."""
    settings = make_settings(server.url, namespace, owner="dana", host_id="laptop")
    client, stop = connect(settings), asyncio.Event()
    task = asyncio.create_task(beat(client, settings, stop))
    try:
        owned = await wait_for(lambda: members.owned_hosts(client, Keys(namespace), "dana"))
        assert owned == ["laptop"]
    finally:
        stop.set()
        await task
        await client.aclose()


async def test_a_collector_without_owner_takes_its_machine_from_the_former_owner(
    server: RedisServer, namespace: str
) -> None:
    """The collector is the authority on its machine's owner: restarted without
    RELAYBUS_OWNER, its machine leaves {ns}:owners (other machines' entries stay), so
    `relaybus token add dana` no longer scopes dana to it."""
    keys = Keys(namespace)
    settings = make_settings(server.url, namespace, owner="", host_id="laptop")
    client, stop = connect(settings), asyncio.Event()

    async def only_server() -> list[str] | None:
        hosts = await members.owned_hosts(client, keys, "dana")
        return hosts if hosts == ["server"] else None

    await client.hset(keys.owners, mapping={"laptop": "dana", "server": "dana"})
    task = asyncio.create_task(beat(client, settings, stop))
    try:
        assert await wait_for(only_server, what="laptop gone from dana's machines")
    finally:
        stop.set()
        await task
        await client.aclose()
