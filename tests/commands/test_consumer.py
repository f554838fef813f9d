"""The collector's command consumer against a real Redis and the stand-in CLI."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from relaybus.collector.commands import CommandConsumer
from relaybus.collector.drivers.control import Controller
from relaybus.collector.metrics import CollectorMetrics
from relaybus.gateway.frames import client_frame
from relaybus.shared.aio import now_ms
from relaybus.shared.store.command_streams import ensure_group, session_route
from relaybus.shared.store.connection import connect
from relaybus.shared.store.keys import GROUP, Keys
from relaybus.shared.wire import commands as c
from relaybus.shared.wire.commands import Command, Reply
from relaybus.shared.wire.errors import ErrorCode
from tests.conftest import make_settings
from tests.support.collector_records import Entries
from tests.support.commands_env import RecordingHooks, texts
from tests.support.fake_claude import INTERRUPTED, Transcript, transcript_path
from tests.support.servers import RedisServer
from tests.support.wait import wait_for

GW = "gw-test"


@dataclass
class Bus:
    """A running consumer plus a gateway's view of the streams."""

    client: aioredis.Redis
    keys: Keys
    hooks: RecordingHooks
    registry: CollectorRegistry
    workdir: Path
    claude_dir: Path
    log: Path
    seen: int = 0

    def command(self, type_: str, sid: str = "", **payload: Any) -> Command:
        return Command(
            id=str(uuid.uuid4()),
            type=type_,
            session_id=sid,
            gateway_id=GW,
            deadline_ms=now_ms() + 30_000,
            payload=payload,
            request_id="r-1",
            trace_id="t-1",
        )

    async def send(self, cmd: Command) -> None:
        stream = self.keys.cmd("testhost")
        await ensure_group(self.client, stream)
        await self.client.xadd(stream, cmd.fields())  # type: ignore[arg-type]  # redis-py: invariant dict of its EncodableT

    async def replies(self) -> list[Reply]:
        entries = cast(Entries, await self.client.xrange(self.keys.reply(GW)))
        return [Reply.from_fields(f) for _id, f in entries]

    async def reply_to(self, cmd: Command) -> Reply:
        async def probe() -> Reply | None:
            return next((r for r in await self.replies() if r.command_id == cmd.id), None)

        return await wait_for(probe, what=f"reply to {cmd.type}")

    async def call(self, type_: str, sid: str = "", **payload: Any) -> Reply:
        cmd = self.command(type_, sid, **payload)
        await self.send(cmd)
        return await self.reply_to(cmd)

    def runs(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(x) for x in self.log.read_text().splitlines()]

    async def session(self, sid: str | None = None, host: str = "testhost") -> tuple[str, Path]:
        """A known session of ``host`` with a transcript in the work dir."""
        sid = sid or str(uuid.uuid4())
        path = transcript_path(self.claude_dir, str(self.workdir), sid)
        t = Transcript(path, sid, str(self.workdir), "cli")
        t.user("first")
        t.reply("first")
        await self.client.hset(
            self.keys.session(sid),
            mapping={"host": host, "cwd": str(self.workdir), "state": "idle"},
        )
        return sid, path

    def count(self, type_: str, outcome: str) -> float:
        value = self.registry.get_sample_value(
            "relaybus_collector_commands_total", {"type": type_, "outcome": outcome}
        )
        return value or 0.0


@pytest.fixture
async def start_bus(
    server: RedisServer,
    namespace: str,
    claude_dir: Path,
    claude_bin: Path,
    workdir: Path,
    tmp_path: Path,
) -> AsyncIterator[Callable[..., Any]]:
    """Start consumers (``allow_prompts`` on unless overridden); all stopped at teardown."""
    running: list[tuple[asyncio.Event, asyncio.Task[None], Controller, aioredis.Redis]] = []
    admin = connect(make_settings(server.url, namespace))

    async def start(*, begin: bool = True, **overrides: Any) -> Bus:
        kw: dict[str, Any] = {"allow_prompts": True, "claude_bin": str(claude_bin)}
        kw.update(overrides)
        settings = make_settings(server.url, namespace, claude_dir, **kw)
        client = connect(settings, block_ms=200)
        hooks = RecordingHooks()
        registry = CollectorRegistry()
        controller = Controller(settings, client, hooks)
        handlers = dict.fromkeys(c.COMMAND_TYPES, controller.execute)
        counter = CollectorMetrics(registry).commands
        consumer = CommandConsumer(client, settings, handlers, counter, block_ms=200)
        stop = asyncio.Event()
        if begin:
            task = asyncio.create_task(consumer.run(stop))
            running.append((stop, task, controller, client))
        bus = Bus(
            admin,
            Keys(namespace),
            hooks,
            registry,
            workdir,
            claude_dir,
            tmp_path / "fake-claude.log",
        )
        return bus

    yield start
    for stop, task, controller, client in running:
        stop.set()
        await asyncio.wait_for(task, 10)
        await controller.aclose()
        await client.aclose()
    await admin.aclose()


async def test_prompts_disabled_by_default(start_bus: Callable[..., Any]) -> None:
    """Without allow_prompts every command is refused and nothing runs."""
    bus: Bus = await start_bus(allow_prompts=False)
    sid, _ = await bus.session()
    reply = await bus.call(c.PROMPT, sid, message="hi")
    assert (reply.ok, reply.code) == (False, "prompts_disabled")
    reply = await bus.call(c.NEW_CONVERSATION)
    assert reply.code == "prompts_disabled"
    assert bus.runs() == []
    assert bus.count("prompt", "prompts_disabled") == 1


async def test_prompt_runs_once_and_turn_follows(start_bus: Callable[..., Any]) -> None:
    """A prompt is answered ok once the CLI started; it appends records and the turn ends."""
    bus: Bus = await start_bus()
    sid, path = await bus.session()
    reply = await bus.call(c.PROMPT, sid, message="what now?")
    assert reply.ok and reply.data == {"driver": "headless"}
    assert bus.hooks.calls[0] == ("started", sid, "t-1")
    await wait_for(lambda: ("ended", sid, None) in bus.hooks.calls, what="turn end")
    assert texts(path, "user")[-1] == "what now?"
    assert texts(path, "assistant")[-1] == "Done: what now?"
    assert [r["argv"][1] for r in bus.runs()] == [f"--resume={sid}"]
    assert bus.count("prompt", "ok") == 1


async def test_unknown_and_foreign_sessions_are_refused(start_bus: Callable[..., Any]) -> None:
    """A session this host does not have is unknown_session, and nothing runs."""
    bus: Bus = await start_bus()
    other, _ = await bus.session(host="elsewhere")
    assert (await bus.call(c.PROMPT, "nope", message="x")).code == "unknown_session"
    assert (await bus.call(c.PROMPT, other, message="x")).code == "unknown_session"
    assert bus.runs() == []


async def test_option_like_or_key_splicing_session_ids_are_refused(
    start_bus: Callable[..., Any],
) -> None:
    """A command whose session id reads as a CLI flag or holds ':' is invalid, even if Redis knows it."""
    bus: Bus = await start_bus()
    for bad in ("--dangerously-skip-permissions", "abc:events", "*"):
        await bus.client.hset(
            bus.keys.session(bad), mapping={"host": "testhost", "cwd": str(bus.workdir)}
        )
        assert (await bus.call(c.PROMPT, bad, message="x")).code == "invalid_message"
    assert bus.runs() == []


async def test_cwd_outside_allow_list_is_refused(
    start_bus: Callable[..., Any], tmp_path: Path
) -> None:
    """prompt_cwd_allow limits where prompts and new conversations may run."""
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    bus: Bus = await start_bus(prompt_cwd_allow=f" {allowed} ,/nonexistent-prefix")
    sid, _ = await bus.session()
    assert (await bus.call(c.PROMPT, sid, message="x")).code == "cwd_not_allowed"
    assert (await bus.call(c.NEW_CONVERSATION, cwd=str(bus.workdir))).code == "cwd_not_allowed"
    reply = await bus.call(c.NEW_CONVERSATION)
    assert reply.ok and reply.data["cwd"] == str(allowed)
    assert bus.runs() == []


async def test_expired_command_is_answered_not_run(start_bus: Callable[..., Any]) -> None:
    """A command past its deadline gets timeout and never runs."""
    bus: Bus = await start_bus()
    sid, _ = await bus.session()
    cmd = bus.command(c.PROMPT, sid, message="late")
    cmd = dataclasses.replace(cmd, deadline_ms=1)
    await bus.send(cmd)
    reply = await bus.reply_to(cmd)
    assert (reply.ok, reply.code) == (False, "timeout")
    assert bus.runs() == []


async def test_new_conversation_then_first_prompt_uses_session_id(
    start_bus: Callable[..., Any],
) -> None:
    """new_conversation reserves an id; its first prompt starts it with --session-id, later ones resume."""
    bus: Bus = await start_bus()
    reply = await bus.call(c.NEW_CONVERSATION, cwd=str(bus.workdir))
    assert reply.ok and reply.data["host"] == "testhost" and reply.data["cwd"] == str(bus.workdir)
    sid = reply.data["sessionId"]
    assert await session_route(bus.client, bus.keys, sid) == ("testhost", str(bus.workdir))
    assert (await bus.call(c.PROMPT, sid, message="hello new")).ok
    await wait_for(lambda: ("ended", sid, None) in bus.hooks.calls, what="first run")
    path = transcript_path(bus.claude_dir, str(bus.workdir), sid)
    assert texts(path, "user") == ["hello new"]
    assert (await bus.call(c.PROMPT, sid, message="again")).ok
    await wait_for(lambda: len(texts(path, "user")) == 2, what="second run")
    assert [r["argv"][1] for r in bus.runs()] == [f"--session-id={sid}", f"--resume={sid}"]


async def test_busy_and_interrupt_through_the_stream(start_bus: Callable[..., Any]) -> None:
    """A second prompt during a long turn is busy; an interrupt stops it; then idle interrupts are no_active_turn."""
    bus: Bus = await start_bus()
    sid, path = await bus.session()
    assert (await bus.call(c.INTERRUPT, sid)).code == "no_active_turn"
    assert (await bus.call(c.PROMPT, sid, message="LONG task")).ok
    assert (await bus.call(c.PROMPT, sid, message="other")).code == "busy"
    await wait_for(lambda: "LONG task" in texts(path, "user"), what="long turn")
    reply = await bus.call(c.INTERRUPT, sid)
    assert reply.ok
    await wait_for(lambda: ("ended", sid, None) in bus.hooks.calls, what="interrupted run end")
    assert texts(path, "user")[-1] == INTERRUPTED
    assert (await bus.call(c.INTERRUPT, sid)).code == "no_active_turn"
    assert len(bus.runs()) == 1


async def test_live_session_outside_tmux_cannot_be_interrupted(
    start_bus: Callable[..., Any],
) -> None:
    """A live interactive process that is not in tmux yields interrupt_unavailable."""
    bus: Bus = await start_bus()
    sid, _ = await bus.session()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import time; time.sleep(120)"
    )
    try:
        (bus.claude_dir / "sessions" / f"{proc.pid}.json").write_text(
            json.dumps({"pid": proc.pid, "sessionId": sid, "cwd": str(bus.workdir)})
        )
        reply = await bus.call(c.INTERRUPT, sid)
        assert (reply.ok, reply.code) == (False, "interrupt_unavailable")
    finally:
        proc.kill()
        await proc.wait()


async def test_command_held_by_a_crashed_collector_runs_once(start_bus: Callable[..., Any]) -> None:
    """An entry read but never acknowledged is redelivered to the restarted consumer and runs once."""
    bus: Bus = await start_bus(begin=False)
    sid, path = await bus.session()
    cmd = bus.command(c.PROMPT, sid, message="held")
    await bus.send(cmd)
    stream = bus.keys.cmd("testhost")
    # RESP2: [[stream, entries]], not the RESP3 dict redis-py also types it as
    held = cast(
        list[tuple[bytes, Entries]],
        await bus.client.xreadgroup(GROUP, "testhost", {stream: ">"}, count=10),
    )
    assert len(held[0][1]) == 1
    await start_bus()
    reply = await bus.reply_to(cmd)
    assert reply.ok
    await wait_for(lambda: texts(path, "assistant")[-1] == "Done: held", what="run")
    assert texts(path, "user").count("held") == 1
    assert (await bus.client.xpending(stream, GROUP))["pending"] == 0


async def test_command_that_started_before_a_crash_is_not_run_again(
    start_bus: Callable[..., Any],
) -> None:
    """A redelivered entry whose idempotency record says running is answered, not re-run."""
    bus: Bus = await start_bus(begin=False)
    sid, _ = await bus.session()
    cmd = bus.command(c.PROMPT, sid, message="maybe ran")
    await bus.send(cmd)
    stream = bus.keys.cmd("testhost")
    await bus.client.xreadgroup(GROUP, "testhost", {stream: ">"}, count=10)
    await bus.client.set(bus.keys.command_done(cmd.id), "running")
    await start_bus()
    reply = await bus.reply_to(cmd)
    assert (reply.ok, reply.code) == (False, "unknown_outcome")
    assert bus.runs() == []


async def test_same_command_twice_runs_once_and_answers_twice(
    start_bus: Callable[..., Any],
) -> None:
    """A command id seen again is answered with the stored reply, never executed again."""
    bus: Bus = await start_bus()
    sid, path = await bus.session()
    cmd = bus.command(c.PROMPT, sid, message="once")
    await bus.send(cmd)
    first = await bus.reply_to(cmd)
    await wait_for(lambda: ("ended", sid, None) in bus.hooks.calls, what="run end")
    await bus.send(cmd)
    await wait_for(lambda: bus.count("prompt", "duplicate") == 1, what="duplicate handled")
    answers = [r for r in await bus.replies() if r.command_id == cmd.id]
    assert answers == [first, first]
    assert texts(path, "user").count("once") == 1


async def test_a_run_that_fails_at_once_is_answered_with_its_reason(
    start_bus: Callable[..., Any], tmp_path: Path
) -> None:
    """claude -p exits 1 ("No conversation found") before taking the prompt: prompt_failed."""
    bus: Bus = await start_bus()
    sid, _ = await bus.session()
    elsewhere = tmp_path / "elsewhere"  # the CLI looks for the conversation under this cwd
    elsewhere.mkdir()
    await bus.client.hset(bus.keys.session(sid), "cwd", str(elsewhere))
    reply = await bus.call(c.PROMPT, sid, message="hello?")
    assert (reply.ok, reply.code) == (False, ErrorCode.PROMPT_FAILED)
    assert reply.message is not None and "No conversation found" in reply.message
    await wait_for(lambda: any(k == "failed" for k, *_ in bus.hooks.calls), what="failure hook")


async def test_a_run_that_fails_after_taking_the_prompt_sends_a_late_reply(
    start_bus: Callable[..., Any],
) -> None:
    """The run took the prompt (prompt_sent), then exits 1: a second, late reply names why."""
    bus: Bus = await start_bus()
    sid, _ = await bus.session()
    cmd = bus.command(c.PROMPT, sid, message="FAIL please")
    await bus.send(cmd)
    first = await bus.reply_to(cmd)
    assert first.ok

    async def late() -> Reply | None:
        return next(
            (r for r in await bus.replies() if r.command_id == cmd.id and r.data.get(c.LATE)), None
        )

    second = await wait_for(late, what="the late failure")
    assert (second.ok, second.code) == (False, ErrorCode.PROMPT_FAILED)
    assert second.message is not None and "stand-in refusal" in second.message
    assert client_frame(cmd, second)["type"] == "error"


async def test_a_prompt_while_the_interrupted_run_exits_is_queued(
    start_bus: Callable[..., Any],
) -> None:
    """Right after an interrupt the next prompt waits for the run to end, then runs: not busy."""
    bus: Bus = await start_bus()
    sid, path = await bus.session()
    assert (await bus.call(c.PROMPT, sid, message="LONG task")).ok
    await wait_for(lambda: "LONG task" in texts(path, "user"), what="long turn")
    interrupt = bus.command(c.INTERRUPT, sid)
    follow = bus.command(c.PROMPT, sid, message="follow-up")
    await bus.send(interrupt)
    await bus.send(follow)
    assert (await bus.reply_to(interrupt)).ok
    reply = await bus.reply_to(follow)
    assert reply.ok, reply
    await wait_for(lambda: "Done: follow-up" in texts(path, "assistant"), what="follow-up answer")
    assert texts(path, "user")[-2:] == [INTERRUPTED, "follow-up"]
    assert len(bus.runs()) == 2


async def test_a_live_session_outside_tmux_refuses_prompts(start_bus: Callable[..., Any]) -> None:
    """A Claude Code process relaybus cannot type into owns the session: not_controllable."""
    bus: Bus = await start_bus()
    sid, _ = await bus.session()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import time; time.sleep(120)"
    )
    try:
        (bus.claude_dir / "sessions" / f"{proc.pid}.json").write_text(
            json.dumps({"pid": proc.pid, "sessionId": sid, "cwd": str(bus.workdir)})
        )
        reply = await bus.call(c.PROMPT, sid, message="hi")
        assert (reply.ok, reply.code) == (False, ErrorCode.NOT_CONTROLLABLE)
        assert bus.runs() == []  # no second writer
    finally:
        proc.kill()
        await proc.wait()


async def test_an_interrupt_of_a_session_shown_working_is_never_no_active_turn(
    start_bus: Callable[..., Any],
) -> None:
    """Shown working, nothing here to stop: interrupt_unavailable; shown idle: no_active_turn."""
    bus: Bus = await start_bus()
    sid, _ = await bus.session()
    assert (await bus.call(c.INTERRUPT, sid)).code == ErrorCode.NO_ACTIVE_TURN
    await bus.client.hset(bus.keys.session(sid), "state", "working")
    assert (await bus.call(c.INTERRUPT, sid)).code == ErrorCode.INTERRUPT_UNAVAILABLE


async def test_an_interrupt_is_not_held_up_by_a_starting_prompt(
    start_bus: Callable[..., Any], claude_bin: Path, tmp_path: Path
) -> None:
    """A prompt waits for its slow-starting run to take it; the session's interrupt, sent
    right after, is answered meanwhile (commands run in tasks, in order per session)."""
    slow = tmp_path / "slow-claude"
    slow.write_text(f'#!/bin/sh\nsleep 8\nexec {claude_bin} "$@"\n')
    slow.chmod(0o755)
    bus: Bus = await start_bus(claude_bin=str(slow))
    sid, _ = await bus.session()
    prompt = bus.command(c.PROMPT, sid, message="hello")
    interrupt = bus.command(c.INTERRUPT, sid)
    sent = time.monotonic()
    await bus.send(prompt)
    await bus.send(interrupt)
    ack = await bus.reply_to(interrupt)
    assert time.monotonic() - sent < 6  # not after the 8 s start the prompt waits for
    assert ack.ok and ack.data == {"driver": "headless"}
    reply = await bus.reply_to(prompt)
    assert reply.ok  # interrupted before it began: not a failure
