"""Commands end to end: WebSocket clients, gateways, real collector processes, the stand-in CLI."""

from __future__ import annotations

import asyncio
import os
import random
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis

from relaybus.shared.store.connection import connect
from relaybus.shared.store.keys import Keys
from tests.conftest import make_settings
from tests.support.collector_proc import CollectorProc
from tests.support.commands_env import TmuxServer, texts
from tests.support.fake_claude import (
    INTERRUPTED,
    REPO,
    Transcript,
    interactive_argv,
    transcript_path,
)
from tests.support.gateway_client import FULL, Frame, WsClient
from tests.support.gateway_server import RunningGateway, running_gateway
from tests.support.servers import RedisServer
from tests.support.wait import wait_for


@dataclass
class Host:
    name: str
    claude_dir: Path
    workdir: Path
    proc: CollectorProc

    def session(self) -> tuple[str, Path]:
        """A recent transcript the collector will pick up (backfill)."""
        sid = str(uuid.uuid4())
        path = transcript_path(self.claude_dir, str(self.workdir), sid)
        t = Transcript(path, sid, str(self.workdir), "cli")
        t.user("first question")
        t.reply("first question")
        return sid, path


@pytest.fixture
def hosts(
    server: RedisServer, namespace: str, tmp_path: Path, claude_bin: Path
) -> Iterator[Callable[..., Host]]:
    """A factory of collector processes, one claude dir each; all stopped at teardown."""
    made: list[Host] = []

    def make(name: str = "hostA", *, allow: bool = True) -> Host:
        root = tmp_path / name
        claude_dir = root / "claude"
        (claude_dir / "projects").mkdir(parents=True)
        (claude_dir / "sessions").mkdir()
        workdir = root / "work"
        workdir.mkdir()
        env = {
            "RELAYBUS_ALLOW_PROMPTS": "true" if allow else "false",
            "RELAYBUS_CLAUDE_BIN": str(claude_bin),
            "RELAYBUS_HEARTBEAT_TTL_S": "3",
        }
        proc = CollectorProc(
            redis_url=server.url, namespace=namespace, claude_dir=claude_dir, host_id=name, env=env
        )
        host = Host(name, claude_dir, workdir, proc)
        made.append(host)
        proc.start()
        return host

    yield make
    for host in made:
        host.proc.stop()


@pytest.fixture
async def gateways(server: RedisServer, namespace: str) -> AsyncIterator[Callable[..., Any]]:
    """A factory of in-process gateways (each its own gatewayId and reply reader)."""
    async with AsyncExitStack() as stack:

        async def make(timeout_s: float = 20) -> RunningGateway:
            settings = make_settings(server.url, namespace, command_timeout_seconds=timeout_s)
            return await stack.enter_async_context(running_gateway(settings))

        yield make


@pytest.fixture
async def admin(server: RedisServer, namespace: str) -> AsyncIterator[aioredis.Redis]:
    client = connect(make_settings(server.url, namespace))
    yield client
    await client.aclose()


async def _published(admin: aioredis.Redis, keys: Keys, sid: str, host: str) -> None:
    async def probe() -> bool:
        return await admin.hget(keys.session(sid), "host") == host.encode()

    await wait_for(probe, what=f"session {sid} published by {host}")


def _has_text(frame: Frame, text: str) -> bool:
    return text.encode() in orjson.dumps(frame.get("event", {}).get("blocks", []))


def _states(ws: WsClient, sid: str, after: int = 0) -> list[str]:
    return [
        f["state"]
        for f in ws.received[after:]
        if f["type"] == "turn_status" and f["sessionId"] == sid
    ]


async def _watch(ws: WsClient, sid: str) -> None:
    await ws.hello(FULL)
    await ws.watch(sid, requestId="w")


async def test_prompt_to_second_host_through_another_gateway(
    hosts: Callable[..., Host],
    gateways: Callable[..., Any],
    admin: aioredis.Redis,
    keys: Keys,
) -> None:
    """The phone prompts via gateway 2 a session of host B watched via gateway 1: events and turn follow."""
    hosts("hostA")
    host_b = hosts("hostB")
    sid, _ = host_b.session()
    await _published(admin, keys, sid, "hostB")
    gw1, gw2 = await gateways(), await gateways()
    assert gw1.runtime.gateway_id != gw2.runtime.gateway_id
    async with (
        WsClient(gw1.ws, token="ro-token") as watcher,
        WsClient(gw2.ws, token="full-token") as phone,
    ):
        await _watch(watcher, sid)
        mark = len(watcher.received)
        await phone.hello(FULL)
        await phone.send(
            {
                "type": "prompt",
                "requestId": "p1",
                "traceId": "trace-42",
                "sessionId": sid,
                "message": "what is up",
            }
        )
        sent = await phone.expect("prompt_sent", wait_s=30)
        assert (sent["requestId"], sent["traceId"], sent["message"]) == (
            "p1",
            "trace-42",
            "what is up",
        )
        await watcher.until(
            lambda fs: (
                any(_has_text(f, "Done: what is up") for f in fs[mark:])
                and _states(watcher, sid, mark)[-1:] == ["idle"]
            ),
            wait_s=60,
        )
    new = [f for f in watcher.received[mark:] if f["type"] == "session_event"]
    user = next(f for f in new if _has_text(f, "what is up"))
    assert user["event"]["type"] == "user"
    assert user.get("traceId") == "trace-42"
    states = _states(watcher, sid, mark)
    assert "working" in states and states[-1] == "idle"
    assert states.index("working") < len(states) - 1


async def test_interrupt_busy_and_idle_interrupt(
    hosts: Callable[..., Host], gateways: Callable[..., Any], admin: aioredis.Redis, keys: Keys
) -> None:
    """A long turn: a second prompt is busy, interrupt stops it (ack ok), a second interrupt is no_active_turn."""
    host = hosts("hostA")
    sid, path = host.session()
    await _published(admin, keys, sid, "hostA")
    gw = await gateways()
    async with WsClient(gw.ws, token="full-token") as ws:
        await _watch(ws, sid)
        await ws.send({"type": "interrupt_request", "requestId": "i0", "sessionId": sid})
        ack = await ws.expect("interrupt_ack", wait_s=30)
        assert (ack["requestId"], ack["ok"], ack["errorCode"]) == ("i0", False, "no_active_turn")
        mark = len(ws.received)
        await ws.send(
            {"type": "prompt", "requestId": "p1", "sessionId": sid, "message": "LONG work"}
        )
        await ws.expect("prompt_sent", wait_s=30)
        await ws.send({"type": "prompt", "requestId": "p2", "sessionId": sid, "message": "more"})
        err = await ws.expect("error", wait_s=30)
        assert (err["requestId"], err["code"]) == ("p2", "busy")
        await ws.until(lambda fs: any(_has_text(f, "LONG work") for f in fs[mark:]), wait_s=60)
        await ws.until(lambda fs: "working" in _states(ws, sid, mark), wait_s=60)
        await ws.send({"type": "interrupt_request", "requestId": "i1", "sessionId": sid})
        ack = await ws.expect("interrupt_ack", wait_s=30)
        assert (ack["requestId"], ack["ok"]) == ("i1", True)
        await ws.until(
            lambda fs: (
                any(_has_text(f, INTERRUPTED) for f in fs[mark:])
                and _states(ws, sid, mark)[-1:] == ["idle"]
            ),
            wait_s=60,
        )
        await ws.send({"type": "interrupt_request", "requestId": "i2", "sessionId": sid})
        ack = await ws.expect("interrupt_ack", wait_s=30)
        assert (ack["ok"], ack["errorCode"]) == (False, "no_active_turn")
    assert texts(path, "user")[-1] == INTERRUPTED
    assert "more" not in texts(path, "user")


async def test_a_failed_run_reaches_the_client_after_prompt_sent(
    hosts: Callable[..., Host], gateways: Callable[..., Any], admin: aioredis.Redis, keys: Keys
) -> None:
    """The run took the prompt, then exits 1: the sender gets error{prompt_failed} naming the
    reason, watchers an error event, and the turn ends idle — never prompt_sent then silence."""
    host = hosts("hostA")
    sid, _path = host.session()
    await _published(admin, keys, sid, "hostA")
    gw = await gateways()
    async with WsClient(gw.ws, token="full-token") as ws:
        await _watch(ws, sid)
        mark = len(ws.received)
        await ws.send(
            {"type": "prompt", "requestId": "p1", "sessionId": sid, "message": "FAIL now"}
        )
        await ws.expect("prompt_sent", wait_s=30)
        err = await ws.expect("error", wait_s=30)
        await ws.until(lambda fs: _states(ws, sid, mark)[-1:] == ["idle"], wait_s=30)
    assert (err["code"], err["requestId"], err["sessionId"]) == ("prompt_failed", "p1", sid)
    assert "stand-in refusal" in err["message"]
    events = [f["event"] for f in ws.received[mark:] if f["type"] == "session_event"]
    assert any(e.get("subtype") == "relaybus_error" for e in events)


async def test_new_conversation_then_first_prompt(
    hosts: Callable[..., Host], gateways: Callable[..., Any], admin: aioredis.Redis, keys: Keys
) -> None:
    """new_conversation reserves an id on the only live host; its first prompt starts the session."""
    host = hosts("hostA")
    gw = await gateways()
    async with WsClient(gw.ws, token="full-token") as ws:
        await ws.hello(FULL)
        await ws.send({"type": "new_conversation", "requestId": "n", "cwd": str(host.workdir)})
        ack = await ws.expect("new_conversation_ack", wait_s=30)
        assert (ack["ok"], ack["host"], ack["cwd"]) == (True, "hostA", str(host.workdir))
        sid = ack["sessionId"]
        await ws.send({"type": "list_sessions", "requestId": "l0"})
        assert sid not in [s["id"] for s in (await ws.expect("sessions"))["sessions"]]
        await ws.send({"type": "prompt", "requestId": "p", "sessionId": sid, "message": "hello"})
        assert (await ws.expect("prompt_sent", wait_s=30))["sessionId"] == sid
        started = await ws.until(
            lambda fs: any(f["type"] == "session_started" and f["sessionId"] == sid for f in fs),
            wait_s=60,
        )
        assert started
        await _published(admin, keys, sid, "hostA")
        await ws.send({"type": "list_sessions", "requestId": "l1"})
        assert sid in [s["id"] for s in (await ws.expect("sessions"))["sessions"]]
    path = transcript_path(host.claude_dir, str(host.workdir), sid)
    await wait_for(lambda: texts(path, "assistant")[-1:] == ["Done: hello"], what="first reply")


async def test_prompts_disabled_on_the_machine(
    hosts: Callable[..., Host], gateways: Callable[..., Any], admin: aioredis.Redis, keys: Keys
) -> None:
    """A collector without RELAYBUS_ALLOW_PROMPTS answers prompts_disabled; nothing runs."""
    host = hosts("hostA", allow=False)
    sid, path = host.session()
    await _published(admin, keys, sid, "hostA")
    gw = await gateways()
    async with WsClient(gw.ws, token="full-token") as ws:
        await ws.hello()
        await ws.send({"type": "prompt", "requestId": "p", "sessionId": sid, "message": "hi"})
        err = await ws.expect("error", wait_s=30)
    assert (err["requestId"], err["code"]) == ("p", "prompts_disabled")
    assert texts(path, "user") == ["first question"]


async def test_host_offline_after_collector_sigkill(
    hosts: Callable[..., Host], gateways: Callable[..., Any], admin: aioredis.Redis, keys: Keys
) -> None:
    """Once a SIGKILLed collector's heartbeat expires, commands for its sessions get host_offline at once."""
    host = hosts("hostA")
    sid, _ = host.session()
    await _published(admin, keys, sid, "hostA")
    host.proc.kill()

    async def gone() -> bool:
        return not await admin.exists(keys.host("hostA"))

    await wait_for(gone, what="heartbeat expiry", timeout_s=30)
    gw = await gateways(timeout_s=60)
    async with WsClient(gw.ws, token="full-token") as ws:
        await ws.hello()
        await ws.send({"type": "prompt", "requestId": "p", "sessionId": sid, "message": "hi"})
        err = await ws.expect("error", wait_s=20)
    assert (err["requestId"], err["code"]) == ("p", "host_offline")


async def test_collector_killed_holding_commands_runs_none_twice(
    hosts: Callable[..., Host], gateways: Callable[..., Any], admin: aioredis.Redis, keys: Keys
) -> None:
    """SIGKILL at a random moment while prompts are in flight, restart: every request is answered, no prompt runs twice."""
    host = hosts("hostA")
    sessions = [host.session() for _ in range(6)]
    for sid, _ in sessions:
        await _published(admin, keys, sid, "hostA")
    gw = await gateways(timeout_s=30)
    async with WsClient(gw.ws, token="full-token") as ws:
        await ws.hello()
        for i, (sid, _) in enumerate(sessions):
            await ws.send(
                {"type": "prompt", "requestId": f"p{i}", "sessionId": sid, "message": f"job {i}"}
            )
        await asyncio.sleep(
            random.uniform(0.0, 0.3)
        )  # a random kill point, not a wait for a condition
        host.proc.kill()
        # Off the loop: start() waits for the heartbeat, and the in-process gateway must
        # keep serving the prompts meanwhile (a blocked loop times out its Redis connects).
        await asyncio.to_thread(host.proc.start)
        answers = await ws.until(
            lambda fs: (
                len({f.get("requestId") for f in fs if f["type"] in ("prompt_sent", "error")}) >= 6
            ),
            wait_s=90,
        )
    replies = [f for f in answers if f["type"] in ("prompt_sent", "error")]
    assert sorted(f["requestId"] for f in replies) == [f"p{i}" for i in range(6)]
    for f in replies:
        assert f["type"] == "prompt_sent" or f["code"] in ("unknown_outcome", "timeout"), f
    for i, (_sid, path) in enumerate(sessions):
        ran = texts(path, "user").count(f"job {i}")
        sent = any(f["type"] == "prompt_sent" and f["requestId"] == f"p{i}" for f in replies)
        if sent:
            await wait_for(
                lambda: f"Done: job {i}" in texts(path, "assistant"),  # noqa: B023  # awaited before the loop moves on
                what="run",
            )
            ran = texts(path, "user").count(f"job {i}")
            assert ran == 1
        assert ran <= 1


async def test_live_tmux_session_is_driven_through_its_pane(
    hosts: Callable[..., Host], gateways: Callable[..., Any], admin: aioredis.Redis, keys: Keys
) -> None:
    """An interactive session in tmux: the prompt is typed into the pane, busy while working, Escape interrupts."""
    host = hosts("hostA")
    tmux = TmuxServer()
    try:
        sid = str(uuid.uuid4())
        env = {
            "CLAUDE_CONFIG_DIR": str(host.claude_dir),
            "PYTHONPATH": str(REPO),
            "PATH": os.environ["PATH"],
        }
        tmux.start(
            interactive_argv(sid),
            cwd=host.workdir,
            env=env,
        )
        await _published(admin, keys, sid, "hostA")
        path = transcript_path(host.claude_dir, str(host.workdir), sid)
        gw = await gateways()
        async with WsClient(gw.ws, token="full-token") as ws:
            await ws.hello(FULL)
            await ws.send(
                {"type": "prompt", "requestId": "p1", "sessionId": sid, "message": "hi pane"}
            )
            await ws.expect("prompt_sent", wait_s=30)
            await wait_for(
                lambda: "Done: hi pane" in texts(path, "assistant"), what="typed prompt ran"
            )
            await ws.until(
                lambda fs: "working" in _states(ws, sid) and _states(ws, sid)[-1] == "idle",
                wait_s=60,
            )
            await ws.send(
                {"type": "prompt", "requestId": "p2", "sessionId": sid, "message": "LONG pane"}
            )
            await ws.expect("prompt_sent", wait_s=30)
            await ws.until(lambda fs: _states(ws, sid)[-1:] == ["working"], wait_s=60)
            await ws.send({"type": "prompt", "requestId": "p3", "sessionId": sid, "message": "x"})
            err = await ws.expect("error", wait_s=30)
            assert (err["requestId"], err["code"]) == ("p3", "busy")
            await ws.send({"type": "interrupt_request", "requestId": "i", "sessionId": sid})
            ack = await ws.expect("interrupt_ack", wait_s=30)
            assert (ack["requestId"], ack["ok"]) == ("i", True)
            await ws.until(lambda fs: _states(ws, sid)[-1:] == ["idle"], wait_s=60)
        assert texts(path, "user") == ["hi pane", "LONG pane", INTERRUPTED]
    finally:
        tmux.kill()
