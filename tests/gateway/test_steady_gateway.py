"""The fan-out's fast path in a running gateway (real Redis, real WebSocket clients): watchers
take it, and one that unwatches and watches again mid-stream (its replay buffered, then
live again) misses nothing and gets nothing twice."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support.gateway_client import WsClient
from tests.support.gateway_publish import Publisher
from tests.support.gateway_server import RunningGateway
from tests.support.wait import wait_for


def seqs(frames: list[dict[str, Any]]) -> list[int]:
    return [f["seqId"] for f in frames]


def steady_writes(gw: RunningGateway, sid: str) -> int:
    found = gw.runtime.hub._steady.get(sid)
    return 0 if found is None else sum(len(w) for _, w in found.groups)


async def test_a_rewatch_mid_stream_leaves_and_rejoins_the_fast_path(
    gw: RunningGateway, pub: Publisher
) -> None:
    await pub.start_session("s1")
    hub = gw.runtime.hub
    async with (
        WsClient(gw.ws, token="full-token") as a,
        WsClient(gw.ws, token="full-token") as b,
    ):
        for c in (a, b):
            await c.hello(["session_subscriptions"])
            await c.watch("s1")
        first = await pub.events("s1", ["a0", "a1", "a2"])
        await b.until(lambda _: len(b.events()) == 3)
        assert steady_writes(gw, "s1") == 2  # both written by the fast path
        await b.send({"type": "unwatch_session", "sessionId": "s1"})
        await wait_for(lambda: len(hub.watchers.get("s1", ())) == 1, what="the unwatch")
        await pub.events("s1", ["b0", "b1"])
        seen = b.events()[-1]["seqId"]

        async def publish() -> None:
            for i in range(30):
                await pub.events("s1", [f"c{i}"])
                await asyncio.sleep(0.002)

        writer = asyncio.create_task(publish())
        await asyncio.sleep(0.01)
        await b.send({"type": "watch_session", "sessionId": "s1", "sinceSeqId": seen})
        await writer
        last = await pub.events("s1", ["end"])
        await a.until(lambda _: bool(a.events()) and a.events()[-1]["seqId"] == last.last_seq)
        await b.until(lambda _: bool(b.events()) and b.events()[-1]["seqId"] == last.last_seq)
        assert steady_writes(gw, "s1") == 2  # b is steady again after its replay
    everything = list(range(first.first_seq, last.last_seq + 1))
    assert seqs(a.events()) == everything
    assert seqs(b.events()) == everything
