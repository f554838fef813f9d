"""A scripted session through a real collector: each action is in `relaybus audit` once, with
the member and device that asked, and the collector's record of what it did with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from relaybus.shared.store import members
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire.scope import Scope
from tests.commands.test_end_to_end import Host, _published, admin, gateways, hosts
from tests.support.gateway_client import FULL, WsClient
from tests.support.servers import RedisServer
from tests.support.wait import wait_for

__all__ = ["admin", "gateways", "hosts"]  # the fixtures this module borrows

ANDROID = "Mozilla/5.0 (Linux; Android 14; Pixel 8) Chrome/120.0 Mobile Safari/537.36"


def audit_rows(server: RedisServer, namespace: str, *args: str) -> list[dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYBUS_")}
    env |= {"RELAYBUS_REDIS_URL": server.url, "RELAYBUS_NAMESPACE": namespace}
    out = subprocess.run(
        [sys.executable, "-m", "relaybus.cli", "audit", "--json", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    return [json.loads(line) for line in out.stdout.splitlines()]


async def test_every_action_is_audited_once(
    server: RedisServer,
    namespace: str,
    hosts: Callable[..., Host],
    gateways: Callable[..., Any],
    admin: aioredis.Redis,
    keys: Keys,
) -> None:
    """prompt + interrupt by dana from Android: the gateway's entry and the collector's outcome, once each; a refused prompt is recorded as refused."""
    host, closed = hosts("hostA"), hosts("hostB", allow=False)
    sid, _ = host.session()
    sid_b, _ = closed.session()
    await _published(admin, keys, sid, "hostA")
    await _published(admin, keys, sid_b, "hostB")
    scope = Scope.build(hosts=["hostA", "hostB"])
    tid, token = await members.add_token(admin, keys, "dana", scope)
    gw = await gateways()
    ws = WsClient(gw.ws, token=token)
    ws.headers["User-Agent"] = ANDROID
    async with ws:
        await ws.hello(FULL)
        await ws.send({"type": "prompt", "requestId": "p", "sessionId": sid, "message": "hi"})
        await ws.expect("prompt_sent", wait_s=30)
        await ws.until(
            lambda fs: any(f["type"] == "turn_status" and f.get("state") == "idle" for f in fs),
            wait_s=60,
        )
        await ws.send({"type": "interrupt_request", "requestId": "i", "sessionId": sid})
        await ws.expect("interrupt_ack", wait_s=30)
        await ws.send({"type": "prompt", "requestId": "b", "sessionId": sid_b, "message": "x"})
        assert (await ws.expect("error", wait_s=30))["code"] == "prompts_disabled"

    def six() -> list[dict[str, Any]] | None:
        rows = audit_rows(server, namespace, "--member", "dana", "--since", "1h")
        return rows if len(rows) >= 6 else None

    rows = await wait_for(lambda: six(), timeout_s=20)
    refused = [r for r in rows if r["sessionId"] == sid_b]
    assert [(r["action"], r["host"]) for r in refused] == [
        ("prompt", "hostB"),
        ("refused", "hostB"),
    ]
    assert refused[1]["detail"] == "prompt: prompts_disabled"
    rows = [r for r in rows if r["sessionId"] == sid]
    # After the turn's end the collector either runs the interrupt (the ack says there was no
    # turn) or refuses it as no_active_turn, by how far its own view of the turn has come:
    # either way exactly one outcome is recorded.
    outcomes = {("ran", "interrupt_request: ok"), ("refused", "interrupt_request: no_active_turn")}
    interrupt_outcome = [
        (r["action"], r.get("detail", ""))
        for r in rows
        if (r["action"], r.get("detail", "")) in outcomes
    ]
    assert len(interrupt_outcome) == 1, rows
    assert Counter((r["action"], r.get("detail", "")) for r in rows) == Counter(
        {("prompt", ""): 1, ("ran", "prompt: ok"): 1, ("interrupt", ""): 1, interrupt_outcome[0]: 1}
    )
    for r in rows:
        assert (r["member"], r["tokenId"], r["device"], r["sessionId"], r["host"]) == (
            "dana",
            tid,
            "Android",
            sid,
            "hostA",
        )
        assert isinstance(r["ts"], int)
