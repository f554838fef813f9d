"""Yesterday's sessions: listed at once, their history published on demand, exactly once.

Real processes: Redis, a collector, a gateway and WebSocket clients.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis

from relaybus.shared.store.keys import Keys
from tests.support import web as w
from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import transcript
from tests.support.gateway_client import FULL, WsClient
from tests.support.servers import RedisServer
from tests.support.wait import poll
from tests.support.web import TOKEN, GatewayProc

OldStack = tuple[str, Path, list[str], GatewayProc, CollectorProc]
TWO_DAYS_S = 2 * 86400
N_PAIRS = 150  # 300 published lines: more than the replay depth of 200


def _old_transcript(claude_dir: Path) -> tuple[str, Path, list[str]]:
    """A 2-day-old session of 300 prompt/reply lines (plus bookkeeping); its texts in order."""
    sid = str(uuid.uuid4())
    path = transcript(claude_dir, sid)
    start = datetime.now(UTC) - timedelta(seconds=TWO_DAYS_S + 3600)
    texts: list[str] = []
    chunks: list[bytes] = []
    for i in range(N_PAIRS):
        stamp = (start + timedelta(seconds=10 * i)).isoformat(timespec="milliseconds")
        stamp = stamp.replace("+00:00", "Z")
        chunks.append(w.prompt(sid, f"question {i}", timestamp=stamp))
        chunks.append(w.reply(sid, f"answer {i}", timestamp=stamp))
        texts += [f"question {i}", f"answer {i}"]
    path.write_bytes(b"".join(chunks))
    old = time.time() - TWO_DAYS_S
    os.utime(path, (old, old))
    return sid, path, texts


@pytest.fixture
def old_stack(
    server: RedisServer, namespace: str, claude_dir: Path, tmp_path: Path
) -> Iterator[tuple[str, Path, list[str], GatewayProc, CollectorProc]]:
    """An old transcript on disk *before* the collector's first scan, then collector + gateway."""
    sid, path, texts = _old_transcript(claude_dir)
    collector = CollectorProc(redis_url=server.url, namespace=namespace, claude_dir=claude_dir)
    gateway = GatewayProc(redis_url=server.url, namespace=namespace, workdir=tmp_path)
    try:
        collector.start()
        gateway.start()
        yield sid, path, texts, gateway, collector
    finally:
        gateway.stop()
        collector.stop()


def _ws_url(gw: GatewayProc) -> str:
    return f"ws://127.0.0.1:{gw.port}/ws"


def _texts(frames: list[dict[str, object]]) -> list[str]:
    out: list[str] = []
    for f in frames:
        event = f["event"]
        assert isinstance(event, dict)
        out += [str(b["text"]) for b in event.get("blocks", []) if b.get("kind") == "text"]
    return out


async def _listed(client: WsClient, sid: str) -> dict[str, object]:
    deadline = time.monotonic() + 30
    while True:
        await client.send({"type": "list_sessions", "requestId": "l"})
        frame = await client.expect("sessions")
        found = [s for s in frame["sessions"] if s["id"] == sid]
        if found:
            return dict(found[0])
        assert time.monotonic() < deadline, "the old session was never listed"
        await asyncio.sleep(0.2)


async def _watch(
    client: WsClient, sid: str, want: int
) -> tuple[dict[str, object], list[dict[str, object]]]:
    ack = await client.watch(sid, wait_s=30, requestId="w")
    await client.until(lambda _r: len(client.events(sid)) >= want, wait_s=30)
    return ack, client.events(sid)


async def test_two_day_old_session_is_listed_and_watchable_with_its_last_200_lines(
    old_stack: OldStack, server: RedisServer, namespace: str
) -> None:
    """A 2-day-old session is listed (not live, history not loaded) and two watchers each get its last 200 lines, published once."""
    sid, path, texts, gw, _collector = old_stack
    keys = Keys(namespace)
    async with WsClient(_ws_url(gw), token=TOKEN) as a, WsClient(_ws_url(gw), token=TOKEN) as b:
        await a.hello(FULL)
        await b.hello(FULL)
        info = await _listed(a, sid)
        assert info["live"] is False
        assert info["historyLoaded"] is False
        assert info["cwd"] == "/home/dev/project"
        activity = int(str(info["lastActivity"]))
        assert abs(activity / 1000 - (time.time() - TWO_DAYS_S)) < 2 * 3600
        hosts = a.of_type("sessions")[-1]["hosts"]
        assert [h["host"] for h in hosts] == ["testhost"]
        assert "load_history" in hosts[0]["capabilities"]
        assert "prompts" not in hosts[0]["capabilities"]  # off by default
        (ack_a, events_a), (ack_b, events_b) = await asyncio.gather(
            _watch(a, sid, 200), _watch(b, sid, 200)
        )  # two watchers at once: one load
        assert "historyLoaded" not in ack_a and "historyLoaded" not in ack_b
        assert _texts(events_a) == texts[-200:]
        assert _texts(events_b) == texts[-200:]
        assert [f["seqId"] for f in events_a] == [f["seqId"] for f in events_b]

        client = redis.Redis.from_url(server.url)
        try:
            assert client.xlen(keys.session_events(sid)) == 200, "history published more than once"
            assert client.hget(keys.session(sid), "historyLoaded") == b"1"
            with path.open("ab") as f:
                f.write(w.prompt(sid, "back again"))
            await a.until(lambda _r: len(a.events(sid)) >= 201, wait_s=30)
            await b.until(lambda _r: len(b.events(sid)) >= 201, wait_s=30)
            assert _texts(a.events(sid))[200:] == ["back again"]
            assert a.events(sid)[-1]["seqId"] > events_a[199]["seqId"]
            poll(lambda: client.xlen(keys.session_events(sid)) == 201 or None)
        finally:
            client.close()
        # A new watcher after the load: the same history from the stream, not loaded again.
        async with WsClient(_ws_url(gw), token=TOKEN) as c:
            await c.hello(FULL)
            _ack, events_c = await _watch(c, sid, 200)
            assert _texts(events_c) == [*texts[-199:], "back again"]  # the last 200 of 201


async def test_watching_a_reserved_new_conversation_is_an_empty_replay(
    old_stack: OldStack, server: RedisServer, namespace: str
) -> None:
    """Watching a reserved new-conversation id is acknowledged with an empty replay, not unknown_session."""
    gw = old_stack[3]
    new_sid = str(uuid.uuid4())
    client = redis.Redis.from_url(server.url)
    try:
        client.hset(
            Keys(namespace).reservation(new_sid), mapping={"host": "testhost", "cwd": "/tmp"}
        )
    finally:
        client.close()
    async with WsClient(_ws_url(gw), token=TOKEN) as a:
        await a.hello(FULL)
        ack = await a.watch(new_sid, requestId="w")
        assert ack["watching"] is True and ack["sessionId"] == new_sid
        await a.send({"type": "watch_session", "sessionId": str(uuid.uuid4()), "requestId": "x"})
        err = await a.expect("error")
        assert err["code"] == "unknown_session"
        assert not a.events(new_sid)


async def test_an_offline_machine_leaves_the_history_unloaded_and_says_so(
    old_stack: OldStack, server: RedisServer, namespace: str
) -> None:
    """With the session's collector gone the watch succeeds with historyLoaded:false; once it is back, the history arrives."""
    sid, _path, texts, gw, collector = old_stack
    async with WsClient(_ws_url(gw), token=TOKEN) as a:
        await a.hello(FULL)
        assert (await _listed(a, sid))["historyLoaded"] is False
        collector.stop()
        client = redis.Redis.from_url(server.url)
        try:
            poll(lambda: not client.exists(Keys(namespace).host("testhost")) or None)
        finally:
            client.close()
        ack = await a.watch(sid, requestId="w1")
        assert ack["historyLoaded"] is False
        await a.send({"type": "list_sessions", "requestId": "l2"})
        await a.expect("sessions")
        assert a.events(sid) == []
        collector.start()
        _ack, events = await _watch(a, sid, 200)
        assert "historyLoaded" not in _ack
        assert _texts(events) == texts[-200:]
