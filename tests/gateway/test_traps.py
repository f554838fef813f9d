"""DESIGN §8 traps: slow consumers, data loss (epoch), Redis outages and half-open connections."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from typing import cast

import httpx
import orjson
import redis.asyncio as aioredis
import websockets
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from relaybus.shared.store.keys import Keys
from tests.conftest import make_settings
from tests.support.collector_records import Entries
from tests.support.gateway_client import FULL, Frame, WsClient
from tests.support.gateway_publish import Publisher
from tests.support.gateway_server import GatewayProc, running_gateway
from tests.support.servers import RedisServer
from tests.support.wait import wait_for


async def equals(value: Awaitable[object], want: object) -> bool:
    return await value == want


async def ready_status(url: str) -> int:
    async with httpx.AsyncClient() as http:
        try:
            return (await http.get(f"{url}/readyz", timeout=10)).status_code
        except httpx.HTTPError:
            return 0


async def metric_value(base: str, name: str) -> float:
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"{base}/metrics", timeout=10)).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


async def test_slow_consumer_cut_off_fast_one_unaffected(
    server: RedisServer, namespace: str, rclient: aioredis.Redis, keys: Keys
) -> None:
    """A client that stops reading is closed with 4008 (counted) and later resumes without loss;
    a reading client meanwhile gets every event."""
    total = 4000
    pub = Publisher(rclient, keys, session_maxlen=10_000)
    await pub.start_session("s1")
    env = {"RELAYBUS_SEND_QUEUE_MAX": "500"}
    with GatewayProc(redis_url=server.url, namespace=namespace, env=env) as g:
        slow = await connect(
            g.ws,
            additional_headers={"Authorization": "Bearer full-token"},
            compression=None,
            max_queue=1,
            max_size=None,
        )
        try:
            async with WsClient(g.ws, token="full-token") as fast:
                await fast.hello(["session_subscriptions"])
                await slow.send('{"type":"hello","capabilities":["session_subscriptions"]}')
                for c in (fast.ws, slow):
                    assert c is not None
                    await c.send('{"type":"watch_session","sessionId":"s1"}')
                await fast.expect("watch_ack")
                reading = asyncio.create_task(fast.until(lambda r: fast.n_events == total, 90))
                for i in range(0, total, 20):
                    await pub.events("s1", [str(i + k) for k in range(20)], data_bytes=4000)
                    await asyncio.sleep(0.01)
                await reading
                assert [e["sessionSeq"] for e in fast.events()] == list(range(1, total + 1))
            name = "relaybus_gateway_slow_consumer_disconnects_total"
            await wait_for(lambda: equals(metric_value(g.http, name), 1.0))
            seen: list[Frame] = []
            try:
                while True:
                    frame = orjson.loads(await asyncio.wait_for(slow.recv(), 20))
                    if frame["type"] == "session_event":
                        seen.append(frame)
            except ConnectionClosed as exc:
                assert exc.rcvd is not None and exc.rcvd.code == 4008
            assert len(seen) < total
            async with WsClient(g.ws, token="full-token") as again:
                await again.hello(["session_subscriptions"])
                since = max((int(f["seqId"]) for f in seen), default=0)
                await again.send({"type": "watch_session", "sessionId": "s1", "sinceSeqId": since})
                await again.until(lambda _: len(seen) + again.n_events >= total, 60)
            qseqs = [f["sessionSeq"] for f in seen] + [e["sessionSeq"] for e in again.events()]
            assert qseqs == list(range(1, total + 1))
        finally:
            await slow.close()


async def test_epoch_change_after_flushall(
    private_server: Callable[..., RedisServer], namespace: str
) -> None:
    """After FLUSHALL a reader parked on a high id notices, tells clients gap{epoch}, and goes on."""
    srv = private_server()
    client = aioredis.Redis.from_url(srv.url)
    keys = Keys(namespace)
    pub = Publisher(client, keys)
    try:
        await pub.start_session("s1")
        for _ in range(10):
            await pub.events("s1", [str(i) for i in range(50)])
        async with (
            running_gateway(make_settings(srv.url, namespace)) as g,
            WsClient(g.ws, token="full-token") as c,
        ):
            w = await c.hello(FULL)
            assert g.runtime.hub.position == 501
            await client.flushall()
            gap = await c.expect("gap_detected", 20)
            assert gap["reason"] == "epoch" and gap["epoch"] != w["epoch"]
            assert (gap["fromSeqId"], gap["toSeqId"]) == (1, 501)
            await pub.start_session("s2")
            started = await c.expect("session_started", 20)
            assert (started["sessionId"], started["seqId"]) == ("s2", 1)
            assert g.metric("relaybus_gateway_gaps_total", {"reason": "epoch"}) >= 1
    finally:
        await client.aclose()


async def test_readyz_fails_when_redis_stops_and_recovers(
    private_server: Callable[..., RedisServer], namespace: str
) -> None:
    """/readyz turns 503 within seconds of Redis dying, and 200 again once it is back."""
    srv = private_server()
    settings = make_settings(srv.url, namespace, redis_socket_timeout_s=1.0)
    async with running_gateway(settings) as g:
        assert await ready_status(g.http) == 200
        srv.stop()
        await wait_for(lambda: equals(ready_status(g.http), 503))
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"{g.http}/healthz")).status_code == 200
        srv.start()
        await wait_for(lambda: equals(ready_status(g.http), 200))


async def test_half_open_redis_noticed(
    private_server: Callable[..., RedisServer], namespace: str
) -> None:
    """A Redis that stops answering (SIGSTOP: sockets stay open) makes /readyz 503 within seconds."""
    srv = private_server()
    settings = make_settings(srv.url, namespace, redis_socket_timeout_s=1.0)
    async with running_gateway(settings) as g:
        assert await ready_status(g.http) == 200
        assert srv.proc is not None
        os.kill(srv.proc.pid, signal.SIGSTOP)
        try:
            await wait_for(lambda: equals(ready_status(g.http), 503))
        finally:
            os.kill(srv.proc.pid, signal.SIGCONT)
        await wait_for(lambda: equals(ready_status(g.http), 200))


async def test_reader_gap_after_being_cut_off(
    server: RedisServer, namespace: str, rclient: aioredis.Redis, keys: Keys
) -> None:
    """A gateway frozen while the log is trimmed past its reader tells its clients gap_detected."""
    small = Publisher(rclient, keys, log_maxlen=100)
    await small.start_session("s1")
    with GatewayProc(redis_url=server.url, namespace=namespace) as gw:
        async with WsClient(gw.ws, token="full-token") as c:
            await c.hello([])
            await small.events("s1", ["before"])
            await c.until(lambda _: len(c.events()) == 1)
            assert gw.proc is not None
            os.kill(gw.proc.pid, signal.SIGSTOP)
            try:
                for _ in range(10):
                    await small.events("s1", [str(i) for i in range(100)])
            finally:
                os.kill(gw.proc.pid, signal.SIGCONT)
            gap = await c.expect("gap_detected", 30)
            await small.events("s1", ["after"])
            await c.until(lambda _: c.events()[-1]["event"]["blocks"][0]["text"] == "after", 30)
    assert gap["reason"] == "trimmed" and 3 <= gap["fromSeqId"] <= gap["toSeqId"]
    seqs = [e["seqId"] for e in c.events()]
    assert seqs == sorted(seqs) and gap["toSeqId"] + 1 in seqs
    missing = set(range(seqs[0], seqs[-1] + 1)) - set(seqs)
    assert missing <= set(range(gap["fromSeqId"], gap["toSeqId"] + 1))


async def test_epoch_change_after_redis_restart_without_data(
    private_server: Callable[..., RedisServer], namespace: str
) -> None:
    """Redis restarting empty (no persistence): on reconnect the reader sees the new epoch,
    tells clients gap{epoch} and then delivers the new log from seq 1."""
    srv = private_server()
    client = aioredis.Redis.from_url(srv.url)
    keys = Keys(namespace)
    try:
        await Publisher(client, keys).start_session("old")
        settings = make_settings(srv.url, namespace, redis_socket_timeout_s=1.0)
        async with running_gateway(settings) as g, WsClient(g.ws, token="full-token") as c:
            w = await c.hello(FULL, lastSeqId=0)
            await c.expect("session_started")
            srv.stop()
            srv.start()
            await client.aclose()
            client = aioredis.Redis.from_url(srv.url)
            gap = await c.expect("gap_detected", 30)
            assert gap["reason"] == "epoch" and gap["epoch"] != w["epoch"]
            await Publisher(client, keys).start_session("new")
            started = await c.expect("session_started", 30)
            assert (started["sessionId"], started["seqId"]) == ("new", 1)
    finally:
        await client.aclose()


async def test_epoch_change_when_new_log_overtakes_reader(
    private_server: Callable[..., RedisServer], namespace: str
) -> None:
    """FLUSHALL then a burst past the reader's position: the reader notices before dispatching
    it, reports gap{epoch} first, then delivers the whole new log from seq 1, in order."""
    srv = private_server()
    client = aioredis.Redis.from_url(srv.url)
    keys = Keys(namespace)
    try:
        old = Publisher(client, keys)
        await old.start_session("old")
        await old.events("old", [str(i) for i in range(20)])
        async with (
            running_gateway(make_settings(srv.url, namespace)) as g,
            WsClient(g.ws, token="full-token") as c,
        ):
            await c.hello([])
            await wait_for(lambda: g.runtime.hub.position == 21)
            await client.flushall()
            new = Publisher(client, keys)
            await new.start_session("new")
            await new.events("new", [f"n{i}" for i in range(100)])
            await c.expect("gap_detected", 30)
            assert [f["type"] for f in c.received] == ["welcome", "gap_detected"]
            after: list[dict[str, object]] = []
            while len(after) < 101:
                after.append(await c.recv(30))
    finally:
        await client.aclose()
    assert [f["seqId"] for f in after] == list(range(1, 102))
    assert after[0]["type"] == "session_started" and after[0]["sessionId"] == "new"


async def test_resume_without_redis_closes_1011(
    private_server: Callable[..., RedisServer], namespace: str
) -> None:
    """A resume that cannot read Redis is not left half-done: error{unavailable}, close 1011
    (before any welcome, so the client keeps its epoch token and resumes with it). A hello
    without lastSeqId is still welcomed."""
    srv = private_server()
    settings = make_settings(srv.url, namespace, redis_socket_timeout_s=1.0)
    async with running_gateway(settings) as g:
        srv.stop()
        async with WsClient(g.ws, token="full-token") as c:
            await c.send({"type": "hello", "capabilities": FULL, "lastSeqId": 3})
            err = await c.expect("error", 30)
            assert err["code"] == "unavailable"
            assert await c.closed_code() == 1011
            assert not c.of_type("welcome")
        async with WsClient(g.ws, token="full-token") as fresh:  # nothing to resume: welcome
            assert (await fresh.hello(FULL))["epoch"]
        srv.start()


async def resumed(url: str, last: int, epoch: str) -> WsClient:
    """A resume, done again as a client would while the gateway's pool still holds
    connections Redis closed (each fails one resume with 1011); the frames up to the answer
    to a list_sessions sent after it."""
    for _ in range(10):
        async with WsClient(url, token="full-token") as c:
            try:
                await c.hello([], lastSeqId=last, epoch=epoch)
                await c.send({"type": "list_sessions"})
                await c.expect("sessions")
            except websockets.ConnectionClosed:
                continue
            return c
    raise AssertionError("every resume failed")


async def test_rewound_log_after_reconnect(
    private_server: Callable[..., RedisServer], namespace: str
) -> None:
    """Redis comes back without the last entries the gateway dispatched (a failover to a
    replica that missed them): clients get gap_detected{rewound} and the log's new entries
    from there, so a client dropping what it held from fromSeqId holds exactly the log."""
    srv = private_server()
    client = aioredis.Redis.from_url(srv.url)
    keys = Keys(namespace)
    pub = Publisher(client, keys)
    try:
        await pub.start_session("s1")
        async with (
            running_gateway(make_settings(srv.url, namespace)) as g,
            WsClient(g.ws, token="full-token") as c,
        ):
            token = (await c.hello([]))["epoch"]
            await pub.events("s1", [f"a{i}" for i in range(5)])
            kept = int(await client.get(keys.seq) or 0)
            await pub.events("s1", [f"x{i}" for i in range(5)])
            await c.until(lambda _: len(c.events()) == 10)
            old_head = g.runtime.hub.position
            # The "replica" had only the first entries: rebuild the log as it would find it.
            for stream in (keys.log, keys.session_events("s1")):
                entries = cast(Entries, await client.xrange(stream, max=f"{kept}-0"))
                await client.delete(stream)
                for eid, fields in entries:
                    await client.xadd(stream, fields, id=eid)  # type: ignore[arg-type]  # redis-py: invariant dict of its EncodableT
            await client.set(keys.seq, kept)
            await client.client_kill_filter(_type="normal")  # the gateway reconnects
            await pub.events("s1", [f"b{i}" for i in range(3)])
            gap = await c.expect("gap_detected", 20)
            assert (gap["reason"], gap["fromSeqId"], gap["toSeqId"]) == (
                "rewound",
                kept + 1,
                old_head,
            )
            await c.until(lambda _: c.events()[-1]["event"]["blocks"][0]["text"] == "b2", 20)
            held = [
                e["event"]["blocks"][0]["text"]
                for e in c.events()
                if e["seqId"] < gap["fromSeqId"] or c.received.index(e) > c.received.index(gap)
            ]
            assert held == [f"a{i}" for i in range(5)] + [f"b{i}" for i in range(3)]
            assert g.metric("relaybus_gateway_gaps_total", {"reason": "rewound"}) == 1
            # The rewind is recorded: a client that left with the old token and a seq from the
            # lost part is told on resume; one holding the new token is not.
            assert gap["epoch"] == f"{token}.1"
            head = c.events()[-1]["seqId"]  # after the rewind, above its fromSeqId
            for resume_token, last, told in ((token, old_head, True), (gap["epoch"], head, False)):
                again = await resumed(g.ws, last, resume_token)
                assert again.of_type("welcome")[0]["epoch"] == resume_token
                gaps = [(f["reason"], f["fromSeqId"]) for f in again.of_type("gap_detected")]
                assert gaps == ([("rewound", kept + 1)] if told else [])
    finally:
        await client.aclose()


async def test_reader_connection_killed_mid_block_loses_nothing(
    private_server: Callable[..., RedisServer], namespace: str
) -> None:
    """CLIENT KILL of the reader's own connection (with every other one parked in XREAD
    BLOCK) while it blocks, three times with events published in between: it reconnects and
    every event arrives once, in order, without a gap."""
    srv = private_server()
    client = aioredis.Redis.from_url(srv.url)
    pub = Publisher(client, Keys(namespace))

    async def blocked() -> list[str] | None:
        """The connections parked in XREAD BLOCK (flag ``b``): the log reader's among them."""
        clients = await client.client_list()
        return [c["id"] for c in clients if c["cmd"] == "xread" and "b" in c["flags"]] or None

    try:
        await pub.start_session("s1")
        async with (
            running_gateway(make_settings(srv.url, namespace)) as g,
            WsClient(g.ws, token="full-token") as c,
        ):
            await c.hello([])  # the firehose: every session's events
            killed: set[str] = set()
            for round_ in range(3):
                await wait_for(lambda: g.runtime.reader.synced.is_set() or None, timeout_s=10)
                ids = await wait_for(blocked, timeout_s=10)
                assert not killed & set(ids)  # new connections after each kill
                for cid in ids:
                    await client.client_kill_filter(_id=cid)
                killed |= set(ids)
                await pub.events("s1", [f"{round_}-{i}" for i in range(20)])
            await pub.events("s1", ["end"])  # a duplicate would arrive before it
            await c.until(lambda _: bool(c.events("s1")) and _text(c.events("s1")[-1]) == "end")
    finally:
        await client.aclose()
    events = c.events("s1")
    assert [_text(e) for e in events] == [f"{r}-{i}" for r in range(3) for i in range(20)] + ["end"]
    assert [e["seqId"] for e in events] == list(range(events[0]["seqId"], events[0]["seqId"] + 61))
    assert not [f for f in c.received if f["type"] == "gap_detected"]


def _text(event: Frame) -> str:
    return cast(str, event["event"]["blocks"][0]["text"])
