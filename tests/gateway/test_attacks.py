"""Resource-exhaustion attacks (issue 12 items 4-6) against a real gateway process and Redis."""

from __future__ import annotations

import asyncio
import time

import redis.asyncio as aioredis

from shared.keys import Keys
from tests.support.gateway_client import FULL, WsClient
from tests.support.gateway_publish import Publisher
from tests.support.gateway_server import GatewayProc
from tests.support.raw_ws import DeafClient, rss_bytes
from tests.support.servers import RedisServer

MB = 1024 * 1024


async def fill_session(rclient: aioredis.Redis, keys: Keys, sid: str, n: int, pad: int) -> None:
    pub = Publisher(rclient, keys, session_maxlen=10_000)
    await pub.start_session(sid)
    for at in range(0, n, 250):
        await pub.events(sid, [f"event {i}" for i in range(at, min(n, at + 250))], data_bytes=pad)


async def watch_rss_until_dropped(gw: GatewayProc, timeout_s: float) -> tuple[float, int]:
    """Seconds until the gateway holds no WebSocket connection, and its peak RSS meanwhile.

    Judged from the gateway's side (its connections gauge): the deaf clients never read.
    """
    started = time.monotonic()
    peak = rss_bytes(gw.pid)
    while True:
        peak = max(peak, rss_bytes(gw.pid))
        open_now = metric(await metrics_text(gw.http), "relaybus_gateway_connections")
        if open_now == 0:
            return time.monotonic() - started, peak
        if time.monotonic() - started > timeout_s:
            raise AssertionError(
                f"{open_now:.0f} deaf clients still connected after {timeout_s}s "
                f"(gateway RSS {peak // MB} MB)"
            )
        await asyncio.sleep(0.1)


async def test_replay_flood_from_a_deaf_client_is_cut_off(
    server: RedisServer, namespace: str, rclient: aioredis.Redis, keys: Keys
) -> None:
    """40 watch_session{sinceSeqId:0} on a 2,000-event session from a read-only client that never
    reads, and ten hello{lastSeqId:0}: the gateway drops them all (4008, counted) within its write
    deadline, its RSS stays bounded, and a normal client is served meanwhile."""
    await fill_session(rclient, keys, "big", 2000, pad=3000)
    env = {"RELAYBUS_WRITE_TIMEOUT_S": "2"}
    with GatewayProc(redis_url=server.url, namespace=namespace, env=env) as gw:
        base = rss_bytes(gw.pid)
        watcher = DeafClient(gw.port, token="ro-token")
        watcher.send({"type": "hello", "capabilities": FULL})
        for i in range(40):
            watcher.send({"type": "watch_session", "sessionId": "big", "sinceSeqId": 0,
                          "requestId": f"w{i}"})
        resumers = []
        for _ in range(10):
            c = DeafClient(gw.port, token="ro-token")
            c.send({"type": "hello", "lastSeqId": 0})
            resumers.append(c)
        async with WsClient(gw.ws, token="full-token") as normal:
            await normal.hello(FULL)
            t0 = time.monotonic()
            await normal.send({"type": "list_sessions", "requestId": "l"})
            await normal.expect("sessions")
            assert time.monotonic() - t0 < 2.0
        took, peak = await watch_rss_until_dropped(gw, timeout_s=30)
        print(f"dropped after {took:.1f}s, RSS {base // MB} -> {peak // MB} MB")
        assert peak - base < 150 * MB, f"RSS grew by {(peak - base) // MB} MB"
        text = await metrics_text(gw.http)
        assert metric(text, "relaybus_gateway_slow_consumer_disconnects_total") >= 11
        for c in [watcher, *resumers]:
            c.close()


async def metrics_text(base: str) -> str:
    import httpx

    async with httpx.AsyncClient() as http:
        return (await http.get(f"{base}/metrics", timeout=10)).text


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0
