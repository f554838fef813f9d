"""Resource-exhaustion attacks (issue 12 items 4-6) against a real gateway process and Redis."""

from __future__ import annotations

import asyncio
import os
import resource
import time
from collections.abc import Callable
from pathlib import Path

import redis.asyncio as aioredis

from relaybus.shared.settings import Settings
from relaybus.shared.store.keys import Keys
from tests.conftest import make_settings
from tests.support.gateway_client import FULL, WsClient
from tests.support.gateway_publish import Publisher
from tests.support.gateway_server import GatewayProc, running_gateway
from tests.support.raw_ws import (
    DeafClient,
    closed_by_peer,
    open_sockets,
    rss_bytes,
    slowloris,
    ws_frame,
)
from tests.support.servers import RedisServer

MB = 1024 * 1024


async def fill_session(rclient: aioredis.Redis, keys: Keys, sid: str, n: int, pad: int) -> None:
    pub = Publisher(rclient, keys, session_maxlen=10_000)
    await pub.start_session(sid)
    for at in range(0, n, 250):
        await pub.events(sid, [f"event {i}" for i in range(at, min(n, at + 250))], data_bytes=pad)


async def watch_rss_until_dropped(gw: GatewayProc, timeout_s: float) -> tuple[float, int]:
    """Seconds until the gateway holds no client connection, and its peak RSS meanwhile.

    Judged from the gateway's side (its connections gauge and the sockets the process
    holds): the deaf clients never read.
    """
    started = time.monotonic()
    peak = rss_bytes(gw.pid)
    while True:
        peak = max(peak, rss_bytes(gw.pid))
        open_now = metric(await metrics_text(gw.http), "relaybus_gateway_connections")
        open_now = max(open_now, open_sockets(gw.pid, gw.port))
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
            watcher.send(
                {"type": "watch_session", "sessionId": "big", "sinceSeqId": 0, "requestId": f"w{i}"}
            )
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
        _took, peak = await watch_rss_until_dropped(gw, timeout_s=30)
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


def flood_pings(client: DeafClient, duration_s: float) -> int:
    """Send pings in batches of 100 until the gateway drops us or ``duration_s`` passes;
    the bytes sent."""
    batch = b"".join(ws_frame(b"p" * 125, opcode=0x9) for _ in range(100))
    sent = 0
    deadline = time.monotonic() + duration_s
    while time.monotonic() < deadline:
        try:
            client.sock.sendall(batch)
        except OSError:
            break
        sent += len(batch)
    return sent


async def test_ping_flood_without_a_token_is_dropped(server: RedisServer, namespace: str) -> None:
    """A client without a token that floods pings and never reads is dropped once its unread
    pongs pass the write-buffer cap, long before the auth timeout, and RSS stays flat."""
    with GatewayProc(redis_url=server.url, namespace=namespace) as gw:
        base = rss_bytes(gw.pid)
        flooders = [DeafClient(gw.port) for _ in range(3)]
        assert all(f.status == 101 for f in flooders)
        sent = await asyncio.gather(*(asyncio.to_thread(flood_pings, f, 20) for f in flooders))
        _took, peak = await watch_rss_until_dropped(gw, timeout_s=5)
        assert min(sent) >= 100 * 131  # at least one batch of 100 pings went out
        assert peak - base < 60 * MB, f"RSS grew by {(peak - base) // MB} MB"
        for f in flooders:
            f.close()


async def test_auth_timeout_closes_whatever_the_client_sends(settings: Settings) -> None:
    """A client without a token that keeps sending pings (5 a second, under the ping limit)
    and never reads is gone soon after the auth timeout, not whenever it stops."""
    timeouts = {"auth_timeout_s": 1.0, "close_timeout_s": 1.0}
    async with running_gateway(settings, **timeouts) as gw:
        client = await asyncio.to_thread(DeafClient, gw.port)  # in-process gateway: off-loop
        started = time.monotonic()

        def trickle() -> None:
            while time.monotonic() - started < 10 and client.ping():
                time.sleep(0.2)

        pinger = asyncio.create_task(asyncio.to_thread(trickle))
        try:
            while open_sockets(os.getpid(), gw.port) > 0:
                assert time.monotonic() - started < 5, "unauthenticated client still connected"
                await asyncio.sleep(0.05)
            assert time.monotonic() - started > 0.9  # it was the auth timeout that closed it
        finally:
            await pinger
            client.close()


async def test_ping_rate_is_limited(settings: Settings) -> None:
    """More than 10 pings in a second drop the connection, authenticated or not, before
    its pongs can cost anything."""
    async with running_gateway(settings) as gw:
        client = await asyncio.to_thread(DeafClient, gw.port, token="full-token")
        try:
            burst = b"".join(ws_frame(b"p", opcode=0x9) for _ in range(11))
            await asyncio.to_thread(client.sock.sendall, burst)
            started = time.monotonic()
            while open_sockets(os.getpid(), gw.port) > 0:
                assert time.monotonic() - started < 5, "ping flooder still connected"
                await asyncio.sleep(0.05)
        finally:
            client.close()


async def healthz_status(base: str) -> int:
    import httpx

    async with httpx.AsyncClient() as http:
        try:
            return (await http.get(f"{base}/healthz", timeout=5)).status_code
        except httpx.HTTPError:
            return 0


async def test_slowloris_is_cut_off_and_capped(server: RedisServer, namespace: str) -> None:
    """300 half-sent requests: those above the connection cap are refused at once, the rest
    are closed after the header timeout, and /healthz answers again right after."""
    env = {"RELAYBUS_HEADER_TIMEOUT_S": "2", "RELAYBUS_MAX_CONNECTIONS": "100"}
    with GatewayProc(redis_url=server.url, namespace=namespace, env=env) as gw:
        socks = await asyncio.to_thread(slowloris, gw.port, 300)
        started = time.monotonic()
        # the ones above the cap are refused as they are accepted
        while open_sockets(gw.pid, gw.port) > 100:
            assert time.monotonic() - started < 1.5, "connections above the cap kept"
            await asyncio.sleep(0.05)
        while sum(closed_by_peer(s) for s in socks) < len(socks):
            assert time.monotonic() - started < 10, "half-sent requests still open"
            await asyncio.sleep(0.1)
        assert time.monotonic() - started < 6
        assert await healthz_status(gw.http) == 200
        for s in socks:
            s.close()


async def test_accept_out_of_resources_is_logged_once_a_minute(
    server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """A gateway out of file descriptors logs the accept() failure once, not per retry."""
    env = {"RELAYBUS_HEADER_TIMEOUT_S": "30", "RELAYBUS_MAX_CONNECTIONS": "1000"}
    log_path = tmp_path / "gw.log"
    with GatewayProc(redis_url=server.url, namespace=namespace, env=env, log_path=log_path) as gw:
        resource.prlimit(gw.pid, resource.RLIMIT_NOFILE, (96, 96))
        socks = await asyncio.to_thread(slowloris, gw.port, 200)
        # asyncio retries accept() every second: wait for several retries to have happened
        deadline = time.monotonic() + 20
        while log_path.read_text().count("out of system resource") == 0:
            assert time.monotonic() < deadline, "no accept() failure logged"
            await asyncio.sleep(0.2)
        await asyncio.sleep(4)  # four more retries, each of which used to log a traceback
        text = log_path.read_text()
        assert text.count("out of system resource") == 1
        assert "Traceback" not in text
        for s in socks:
            s.close()


async def test_new_conversation_without_host_never_scans(
    private_server: Callable[..., RedisServer], namespace: str
) -> None:
    """new_conversation without host finds the only live machine from the hosts index: the
    gateway runs no SCAN however often a client asks (commandstats of a private server)."""
    srv = private_server()
    admin = aioredis.Redis.from_url(srv.url)
    keys = Keys(namespace)
    try:
        await admin.zadd(keys.hosts, {"lonely": int(time.time() * 1000) + 60_000})
        await admin.zadd(keys.hosts, {"gone": int(time.time() * 1000) - 5_000})
        settings = make_settings(srv.url, namespace, allow_prompts=True)
        async with running_gateway(settings) as gw, WsClient(gw.ws, token="full-token") as ws:
            await ws.hello()
            for i in range(20):
                await ws.send({"type": "new_conversation", "requestId": f"n{i}"})
                err = await ws.expect("error")
                # the only live machine was chosen; its heartbeat key is missing: offline
                assert (err["code"], err["requestId"]) == ("host_offline", f"n{i}")
                assert "'lonely'" in err["message"]
        stats = await admin.info("commandstats")
        assert "cmdstat_scan" not in stats and "cmdstat_keys" not in stats
    finally:
        await admin.aclose()


async def test_reply_flood_from_a_deaf_client_is_cut_off(
    server: RedisServer, namespace: str, rclient: aioredis.Redis, keys: Keys
) -> None:
    """A client that never reads and keeps asking for a big session list is dropped once its
    unwritten replies pass the byte budget, long before the write deadline."""
    pub = Publisher(rclient, keys)
    for i in range(200):
        await pub.start_session(f"s{i:03d}", title="t" * 200)
    settings = make_settings(
        server.url,
        namespace,
        send_buffer_bytes=256 * 1024,
        write_timeout_s=60,
        rate_limit_per_s=1000,
    )
    async with running_gateway(settings, close_timeout_s=1.0) as gw:
        client = await asyncio.to_thread(DeafClient, gw.port, token="ro-token")
        try:
            client.send({"type": "hello", "capabilities": FULL})
            frames = b"".join(
                ws_frame(f'{{"type":"list_sessions","requestId":"l{i}"}}'.encode())
                for i in range(400)
            )
            await asyncio.to_thread(client.sock.sendall, frames)
            started = time.monotonic()
            # The bound is the write deadline's (halved), not a latency: cut off before it, the
            # client was dropped for its byte budget (a loaded CI needs seconds for the replies).
            while open_sockets(os.getpid(), gw.port) > 0:
                elapsed = time.monotonic() - started
                assert elapsed < settings.write_timeout_s / 2, "reply flooder still connected"
                await asyncio.sleep(0.05)
            assert gw.metric("relaybus_gateway_slow_consumer_disconnects_total") >= 1
        finally:
            client.close()
