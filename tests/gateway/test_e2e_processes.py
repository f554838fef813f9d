"""End to end with real processes: redis-server, a collector, two gateways, WebSocket clients."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import append, assistant_line, transcript, user_line
from tests.support.gateway_client import FULL, WsClient
from tests.support.gateway_server import GatewayProc
from tests.support.servers import RedisServer

SID = "0b6c1f2e-1111-4c1e-9a51-5f1e2d3c4b5a"


def first_text(frame: dict[str, Any]) -> str:
    blocks = frame["event"].get("blocks") or []
    return str(blocks[0].get("text", "")) if blocks else ""


def chat_of(c: WsClient) -> list[dict[str, Any]]:
    return [e for e in c.events() if e["event"]["type"] in ("user", "assistant")]


def log_derived_max(frames: list[dict[str, Any]]) -> int:
    kinds = {"session_event", "session_started", "session_ended", "turn_status"}
    return max((f["seqId"] for f in frames if f["type"] in kinds), default=0)


async def wait_session(c: WsClient, sid: str) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while True:
        await c.send({"type": "list_sessions"})
        s = await c.expect("sessions")
        found: list[dict[str, Any]] = [x for x in s["sessions"] if x["id"] == sid]
        if found:
            return found[0]
        if loop.time() > deadline:
            raise AssertionError("session never listed")
        await asyncio.sleep(0.1)


async def test_resume_on_other_gateway_after_sigkill(
    server: RedisServer, namespace: str, claude_dir: Path
) -> None:
    """Collector -> Redis -> gateway A (SIGKILLed) -> resume on gateway B: every line once, in order."""
    path = transcript(claude_dir, SID)
    append(path, user_line(SID, "u0") + assistant_line(SID, "a0"))
    with (
        CollectorProc(redis_url=server.url, namespace=namespace, claude_dir=claude_dir),
        GatewayProc(redis_url=server.url, namespace=namespace) as gw_a,
        GatewayProc(redis_url=server.url, namespace=namespace) as gw_b,
    ):
        async with WsClient(gw_a.ws, token="full-token") as c1:
            welcome = await c1.hello(FULL)
            info = await wait_session(c1, SID)
            assert info["host"] == "testhost" and info["cwd"] == "/home/dev/project"
            await c1.send({"type": "watch_session", "sessionId": SID})
            await c1.until(lambda _: [first_text(e) for e in chat_of(c1)] == ["u0", "a0"])
            for i in range(1, 6):
                append(path, user_line(SID, f"u{i}") + assistant_line(SID, f"a{i}"))
            await c1.until(lambda _: len(chat_of(c1)) == 12)
            gw_a.kill()
            for i in range(6, 30):
                append(path, user_line(SID, f"u{i}") + assistant_line(SID, f"a{i}"))
            await c1.closed_code()
        last_log = log_derived_max(c1.received)
        last_session = max(e["seqId"] for e in c1.events())
        async with WsClient(gw_b.ws, token="full-token") as c2:
            w2 = await c2.hello(FULL, lastSeqId=last_log, epoch=welcome["epoch"])
            assert w2["epoch"] == welcome["epoch"] and w2["gatewayId"] != welcome["gatewayId"]
            await c2.send({"type": "watch_session", "sessionId": SID, "sinceSeqId": last_session})
            await c2.until(lambda _: len(chat_of(c1)) + len(chat_of(c2)) >= 60, 60)
            append(path, user_line(SID, "u30"))
            await c2.until(lambda _: first_text(c2.events()[-1]) == "u30", 30)
            await c2.send({"type": "list_sessions"})
            await c2.expect("sessions")
    chat = [e for e in c1.events() + c2.events() if e["event"]["type"] in ("user", "assistant")]
    texts = [first_text(e) for e in chat]
    expected = [t for i in range(30) for t in (f"u{i}", f"a{i}")] + ["u30"]
    assert texts == expected
    seqs = [e["seqId"] for e in c1.events() + c2.events()]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert not c2.of_type("gap_detected")
    states = [f["state"] for f in c2.of_type("turn_status")]
    assert states and set(states) <= {"working", "idle"}


async def test_sigterm_closes_clients_with_1012(server: RedisServer, namespace: str) -> None:
    """SIGTERM: the gateway closes every socket with 1012 so clients reconnect elsewhere, exit 0."""
    with GatewayProc(redis_url=server.url, namespace=namespace) as gw:
        async with WsClient(gw.ws, token="full-token") as a, WsClient(gw.ws, token="ro-token") as b:
            await a.hello(FULL)
            await b.hello([])
            assert gw.proc is not None
            gw.proc.terminate()
            assert await a.closed_code() == 1012
            assert await b.closed_code() == 1012
        assert gw.proc.wait(30) == 0


async def test_v1_client_resumes_with_url_last_seq_id_across_gateways(
    server: RedisServer, namespace: str, claude_dir: Path
) -> None:
    """A seed (v1) client that sends no hello: after gateway A is SIGKILLed it reconnects to B
    with ?lastSeqId= and gets every line written meanwhile once, in order, none before."""
    path = transcript(claude_dir, SID)
    append(path, user_line(SID, "u0") + assistant_line(SID, "a0"))
    with (
        CollectorProc(redis_url=server.url, namespace=namespace, claude_dir=claude_dir),
        GatewayProc(redis_url=server.url, namespace=namespace) as gw_a,
        GatewayProc(redis_url=server.url, namespace=namespace) as gw_b,
    ):
        async with WsClient(gw_a.ws, token="full-token") as c1:
            await wait_session(c1, SID)  # list_sessions: resolved as v1 at once
            append(path, user_line(SID, "u1"))
            await c1.until(lambda _: "u1" in [first_text(e) for e in chat_of(c1)], 30)
            gw_a.kill()
        last = log_derived_max(c1.received)
        append(path, assistant_line(SID, "a1") + user_line(SID, "u2"))
        async with WsClient(gw_b.ws, token="full-token") as probe:  # both lines are in the log
            await probe.hello([])
            await probe.send({"type": "watch_session", "sessionId": SID})
            await probe.until(lambda _: "u2" in [first_text(e) for e in chat_of(probe)], 30)
        async with WsClient(f"{gw_b.ws}?lastSeqId={last}", token="full-token") as c2:
            await c2.until(lambda _: "u2" in [first_text(e) for e in chat_of(c2)], 30)
            await c2.send({"type": "list_sessions"})
            await c2.expect("sessions")
    assert [first_text(e) for e in chat_of(c2)] == ["a1", "u2"]
    assert "welcome" not in [f["type"] for f in c2.received]
    seqs = [f["seqId"] for f in c2.received if f["type"] != "sessions"]
    assert seqs == sorted(seqs) and min(seqs) > last
