"""One notification per event across a fleet of gateway processes, also after the gateway
that was sending is SIGKILLed: Web Push and Apprise (ntfy and a JSON webhook).

Delivery is at most once per (event, device): a push is claimed (``SET NX``) before it is
sent, so a kill between the claim and the send loses that one push; everything else the
dead gateway held is taken over and sent once."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import httpx
import redis.asyncio as aioredis

from relaybus.gateway.push.senders import apprise_target
from relaybus.shared.store.keys import Keys
from tests.support.gateway_publish import Publisher
from tests.support.gateway_server import GatewayProc
from tests.support.notify_receiver import NotifyReceiver
from tests.support.push_service import ALLOW, PushServiceStandIn
from tests.support.servers import RedisServer
from tests.support.wait import wait_for

EVENTS = 4


def _sessions(bodies: list[bytes]) -> Counter[str]:
    """Which session each Apprise message links to."""
    found: Counter[str] = Counter()
    for raw in bodies:
        message = json.loads(raw)["message"]
        found[message.rsplit("#/s/", 1)[1]] += 1
    return found


async def test_one_push_per_event_across_gateways_and_a_sigkill(
    server: RedisServer,
    namespace: str,
    keys: Keys,
    admin: aioredis.Redis,
    push_service: PushServiceStandIn,
) -> None:
    """Two gateways share the log through the consumer group; the one sending is killed
    while the receivers hold their answers; the other takes over (XAUTOCLAIM): every
    receiver gets each event exactly once."""
    with NotifyReceiver() as ntfy, NotifyReceiver() as hook:
        for receiver in (ntfy, hook, push_service):
            receiver.delay_s = 0.6
        ntfy_url, hook_url = (
            f"ntfy://127.0.0.1:{ntfy.port}/relaybus",
            f"json://127.0.0.1:{hook.port}/hook",
        )
        kinds = {apprise_target(ntfy_url): "ntfy", apprise_target(hook_url): "hook"}
        env = {
            "RELAYBUS_NOTIFY_URLS": f"{ntfy_url}, {hook_url}",
            "RELAYBUS_PUSH_CLAIM_IDLE_S": "1",
            "RELAYBUS_PUSH_PUBLIC_URL": "https://relay.example/",
            ALLOW: push_service.host,
        }
        gws = {
            name: GatewayProc(
                redis_url=server.url, namespace=namespace, env={**env, "RELAYBUS_GATEWAY_ID": name}
            )
            for name in ("gw-a", "gw-b")
        }
        try:
            await asyncio.gather(*(asyncio.to_thread(gw.start) for gw in gws.values()))
            first = gws["gw-a"]
            async with httpx.AsyncClient(base_url=first.http) as http:
                push_service.vapid_public = (await http.get("/push/key")).json()["publicKey"]
                r = await http.put(
                    "/push/subscription",
                    json={"subscription": push_service.device("phone").subscription()},
                    headers={"Authorization": "Bearer full-token"},
                )
                assert r.status_code == 200, r.text
            pub = Publisher(admin, keys)
            sids = [f"fleet-{i}" for i in range(EVENTS)]
            seqs: dict[str, str] = {}
            for sid in sids:
                await pub.start_session(sid, title=sid)
                seqs[sid] = f"{(await pub.turn(sid, 'waiting')).last_seq}-0"

            async def first_everywhere() -> bool:
                return bool(ntfy.posts and hook.posts and push_service.of("phone"))

            await wait_for(first_everywhere, what="the first event at every receiver")
            # the gateway sending the event that arrived first is waiting for its answers
            arrived = seqs[push_service.of("phone")[0].payload["sessionId"]]
            pending: list[dict[str, Any]] = await admin.xpending_range(
                keys.log, "push", min="-", max="+", count=100
            )
            [sender] = [
                p["consumer"].decode() for p in pending if p["message_id"].decode() == arrived
            ]
            gws[sender].kill()

            async def taken_over() -> bool:
                return int((await admin.xpending(keys.log, "push"))["pending"]) == 0

            await wait_for(taken_over, what="the dead gateway's entries taken over", timeout_s=30)
            await asyncio.sleep(2.0)  # > claim idle + a reader block: a duplicate would have come
            # Claims the dead gateway took and never settled: pushes the kill may have cut.
            session_of = {seq.split("-")[0]: sid for sid, seq in seqs.items()}
            cut: dict[str, set[str]] = {"ntfy": set(), "hook": set(), "phone": set()}
            async for key in admin.scan_iter(match=f"{keys.prefix}push:done:*"):
                assert isinstance(key, bytes)
                if await admin.get(key) == sender.encode():
                    event, target = key.decode().split("push:done:", 1)[1].split(":", 2)[::2]
                    kind = kinds.get(target, "phone")
                    cut[kind].add(session_of[event])
            got = {
                "ntfy": _sessions(ntfy.bodies()),
                "hook": _sessions(hook.bodies()),
                "phone": Counter(p.payload["sessionId"] for p in push_service.of("phone")),
            }
            for kind, received in got.items():
                assert max(received.values()) == 1, (kind, received)  # never twice
                # whatever is missing was cut: claimed by the dead gateway and never settled
                # (a claim it did not settle may also have been sent before the kill)
                assert set(sids) - cut[kind] <= set(received) <= set(sids), (kind, received, cut)
            assert {path for path, _ in ntfy.posts} == {"/"}
            assert json.loads(ntfy.bodies()[0])["topic"] == "relaybus"
        finally:
            for gw in gws.values():
                gw.kill()
