"""The core protocol end to end: hello/welcome, list_sessions, watch with replay then live."""

from __future__ import annotations

import asyncio

import httpx

from relaybus.gateway.web.wsserver import WsServer
from tests.conftest import make_settings
from tests.support.gateway_client import FULL, WsClient
from tests.support.gateway_publish import Publisher
from tests.support.gateway_server import RunningGateway, running_gateway
from tests.support.servers import RedisServer


async def test_hello_welcome_accepts_known_capabilities(gw: RunningGateway, pub: Publisher) -> None:
    """welcome lists only the capabilities the server knows, plus epoch, gatewayId, version, and
    the head seq as seqId."""
    done = await pub.start_session("s1")
    for _ in range(200):
        if gw.runtime.hub.position == done.last_seq:
            break
        await asyncio.sleep(0.05)
    async with WsClient(gw.ws, token="full-token") as c:
        w = await c.hello(["session_subscriptions", "turn_status_observe", "teleport"])
    assert w["capabilities"] == ["session_subscriptions", "turn_status_observe"]
    assert w["epoch"] == gw.runtime.hub.epoch and w["epoch"]
    assert w["gatewayId"] == gw.runtime.gateway_id
    assert isinstance(w["serverVersion"], str) and w["seqId"] == done.last_seq


async def test_list_sessions_sorted_by_activity(gw: RunningGateway, pub: Publisher) -> None:
    """sessions carries SessionInfo plus host/lastSeqId/lastActivity/state/since/live, newest first."""
    await pub.start_session("old", cwd="/a", at_ms=1_000)
    await pub.start_session("new", cwd="/b", title="Fix it", at_ms=2_000)
    async with WsClient(gw.ws, token="ro-token") as c:
        await c.hello(FULL)
        await c.send({"type": "list_sessions", "requestId": "r-1"})
        s = await c.expect("sessions")
    assert s["requestId"] == "r-1"
    assert [x["id"] for x in s["sessions"]] == ["new", "old"]
    new = s["sessions"][0]
    assert new == {
        "id": "new",
        "cwd": "/b",
        "startedAt": 2000,
        "entrypoint": "cli",
        "title": "Fix it",
        "host": "testhost",
        "lastSeqId": 2,
        "lastActivity": 2000,
        "state": "idle",
        "since": 2000,
        "live": True,
    }
    assert s["seqId"] >= 0


async def test_watch_replays_history_then_live(gw: RunningGateway, pub: Publisher) -> None:
    """watch_ack, then the history in order, then live events, exactly once each."""
    await pub.start_session("s1")
    await pub.events("s1", [f"h{i}" for i in range(5)])
    async with WsClient(gw.ws, token="full-token") as c:
        await c.hello(["session_subscriptions"])
        ack = await c.watch("s1", requestId="w", traceId="t")
        assert ack == {
            "type": "watch_ack",
            "sessionId": "s1",
            "watching": True,
            "seqId": ack["seqId"],
            "traceId": "t",
            "requestId": "w",
        }
        await c.until(lambda _: len(c.events("s1")) == 5)
        (conn,) = gw.runtime.hub.connections
        assert isinstance(conn.sink, WsServer)  # replays are written in one burst
        await pub.events("s1", ["live1", "live2"])
        await c.until(lambda _: len(c.events("s1")) == 7)
    texts = [e["event"]["blocks"][0]["text"] for e in c.events("s1")]
    assert texts == ["h0", "h1", "h2", "h3", "h4", "live1", "live2"]
    assert [e["sessionSeq"] for e in c.events("s1")] == list(range(1, 8))
    seqs = [e["seqId"] for e in c.events("s1")]
    assert seqs == sorted(seqs) and "data" in c.events("s1")[0]["event"]


async def test_replay_depth_limits_history(
    server: RedisServer, namespace: str, pub: Publisher
) -> None:
    """Without sinceSeqId only the last RELAYBUS_REPLAY_DEPTH events are replayed."""
    await pub.start_session("s1")
    await pub.events("s1", [str(i) for i in range(30)])
    async with (
        running_gateway(make_settings(server.url, namespace, replay_depth=10)) as g,
        WsClient(g.ws, token="full-token") as c,
    ):
        await c.hello(["session_subscriptions"])
        await c.send({"type": "watch_session", "sessionId": "s1"})
        await c.until(lambda _: len(c.events()) == 10)
        await pub.events("s1", ["after"])
        await c.until(lambda _: len(c.events()) == 11)
    assert [e["event"]["blocks"][0]["text"] for e in c.events()] == [
        *map(str, range(20, 30)),
        "after",
    ]


async def test_watch_since_replays_exactly_after(gw: RunningGateway, pub: Publisher) -> None:
    """watch_session with sinceSeqId replays exactly the session's events after it."""
    await pub.start_session("s1")
    first = await pub.events("s1", ["a", "b", "c"])
    await pub.events("s1", ["d", "e"])
    async with WsClient(gw.ws, token="full-token") as c:
        await c.hello(["session_subscriptions"])
        await c.send({"type": "watch_session", "sessionId": "s1", "sinceSeqId": first.last_seq})
        await c.until(lambda _: len(c.events()) == 2)
        await pub.events("s1", ["f"])
        await c.until(lambda _: len(c.events()) == 3)
    assert [e["event"]["blocks"][0]["text"] for e in c.events()] == ["d", "e", "f"]
    assert not c.of_type("gap_detected")


async def test_unwatch_stops_events(gw: RunningGateway, pub: Publisher) -> None:
    """unwatch_session is acknowledged with watching:false and no more events of it arrive."""
    await pub.start_session("s1")
    await pub.start_session("s2")
    async with WsClient(gw.ws, token="full-token") as c:
        await c.hello(["session_subscriptions"])
        for sid in ("s1", "s2"):
            await c.watch(sid)
        await c.send({"type": "unwatch_session", "sessionId": "s1", "requestId": "u"})
        ack = await c.expect("watch_ack")
        assert (ack["sessionId"], ack["watching"], ack["requestId"]) == ("s1", False, "u")
        await pub.events("s1", ["hidden"])
        await pub.events("s2", ["shown"])
        await c.until(lambda _: len(c.events("s2")) == 1)
    assert c.events("s1") == []


async def test_subscriber_gets_only_watched_sessions_and_broadcasts(
    gw: RunningGateway, pub: Publisher
) -> None:
    """With session_subscriptions: events of unwatched sessions are withheld; started/ended reach all."""
    async with WsClient(gw.ws, token="full-token") as c:
        await c.hello(["session_subscriptions"])
        await pub.start_session("s1")
        await pub.events("s1", ["x"])
        await pub.end("s1")
        await c.expect("session_ended")
    assert [f["type"] for f in c.received] == ["welcome", "session_started", "session_ended"]
    started = c.of_type("session_started")[0]
    assert started["sessionId"] == "s1" and started["cwd"] == "/work/proj" and started["seqId"] == 1


async def test_turn_status_only_for_observers(gw: RunningGateway, pub: Publisher) -> None:
    """turn_status goes to turn_status_observe clients only; watch ends with the current state."""
    await pub.start_session("s1")
    await pub.turn("s1", "working", since=123)
    async with (
        WsClient(gw.ws, token="full-token") as obs,
        WsClient(gw.ws, token="full-token") as plain,
    ):
        await obs.hello(["session_subscriptions", "turn_status_observe"])
        await plain.hello(["session_subscriptions"])
        for c in (obs, plain):
            await c.watch("s1")
        current = await obs.expect("turn_status")
        assert (current["state"], current["since"], current["sessionId"]) == ("working", 123, "s1")
        await pub.turn("s1", "idle", since=456)
        await pub.events("s1", ["marker"])
        live = await obs.expect("turn_status")
        assert (live["state"], live["since"]) == ("idle", 456)
        await plain.until(lambda _: len(plain.events()) == 1)
    assert plain.of_type("turn_status") == []


async def test_v1_client_gets_broadcast_all(gw: RunningGateway, pub: Publisher) -> None:
    """A client that sends no hello receives every session's events (v1 behaviour)."""
    async with WsClient(gw.ws, token="full-token") as c:
        await pub.start_session("a")
        await pub.start_session("b")
        await pub.events("a", ["1"])
        await pub.events("b", ["2"])
        await c.until(lambda _: len(c.events()) == 2)
    assert {e["sessionId"] for e in c.events()} == {"a", "b"}
    assert "welcome" not in [f["type"] for f in c.received]


async def test_blocks_only_omits_data(gw: RunningGateway, pub: Publisher) -> None:
    """A client that negotiated blocks_only receives session_event without event.data."""
    await pub.start_session("s1")
    await pub.events("s1", ["replayed"])
    async with WsClient(gw.ws, token="full-token") as c:
        w = await c.hello(["session_subscriptions", "blocks_only"])
        assert "blocks_only" in w["capabilities"]
        await c.send({"type": "watch_session", "sessionId": "s1"})
        await c.until(lambda _: len(c.events()) == 1)
        await pub.events("s1", ["live"])
        await c.until(lambda _: len(c.events()) == 2)
    for e in c.events():
        assert "data" not in e["event"] and e["event"]["blocks"] and e["sessionSeq"] >= 1


async def test_http_endpoints(gw: RunningGateway) -> None:
    """healthz and readyz answer 200, metrics exposes the gateway's metric names."""
    async with httpx.AsyncClient(base_url=gw.http) as http:
        assert (await http.get("/healthz")).status_code == 200
        assert (await http.get("/readyz")).status_code == 200
        text = (await http.get("/metrics")).text
    assert "relaybus_gateway_connections" in text
    assert "relaybus_gateway_e2e_latency_seconds_bucket" in text


async def test_web_client_served_without_shadowing(gw: RunningGateway) -> None:
    """The web client is served at / while /ws, /healthz, /readyz and /metrics keep working."""
    async with httpx.AsyncClient(base_url=gw.http) as http:
        index = await http.get("/")
        assert index.status_code == 200 and "text/html" in index.headers["content-type"]
        assert (await http.get("/healthz")).json()["status"] == "ok"
    async with WsClient(gw.ws, token="full-token") as c:
        assert (await c.hello())["type"] == "welcome"


async def test_metrics_count_what_happened(gw: RunningGateway, pub: Publisher) -> None:
    """Replays, replayed events, frames and bytes by type, e2e latency, connections are counted."""
    await pub.start_session("s1")
    await pub.events("s1", ["a", "b", "c"])
    async with WsClient(gw.ws, token="full-token") as c:
        await c.hello(["session_subscriptions"])
        assert gw.metric("relaybus_gateway_connections") == 1
        await c.send({"type": "watch_session", "sessionId": "s1"})
        await c.until(lambda _: c.n_events == 3)
        await pub.events("s1", ["d", "e"])
        await c.until(lambda _: c.n_events == 5)
    assert gw.metric("relaybus_gateway_replays_total") == 1
    assert gw.metric("relaybus_gateway_replayed_events_total") == 3
    assert gw.metric("relaybus_gateway_messages_sent_total", {"type": "session_event"}) == 5
    assert gw.metric("relaybus_gateway_messages_sent_total", {"type": "watch_ack"}) == 1
    assert gw.metric("relaybus_gateway_bytes_sent_total") > 500
    assert gw.metric("relaybus_gateway_e2e_latency_seconds_count") >= 2
    for _ in range(200):
        if gw.metric("relaybus_gateway_connections") == 0:
            break
        await asyncio.sleep(0.05)
    assert gw.metric("relaybus_gateway_connections") == 0
