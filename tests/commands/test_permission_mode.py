"""``set_permission_mode``: validated and refused at the gateway, routed to the session's
machine, carried out by Shift+Tab in a real tmux pane (a stand-in CLI drawing the footer)
or as the next headless run's ``--permission-mode``."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from relaybus.collector.drivers import DriverError
from relaybus.collector.drivers.tmux import Pane, TmuxDriver, mode_on_screen
from relaybus.shared.store.connection import connect
from relaybus.shared.store.keys import Keys
from tests.conftest import make_settings
from tests.support.collector_proc import CollectorProc
from tests.support.commands_env import TmuxServer
from tests.support.fake_claude import Transcript, transcript_path
from tests.support.gateway_client import FULL, WsClient
from tests.support.gateway_server import RunningGateway, running_gateway
from tests.support.servers import RedisServer
from tests.support.wait import wait_for

#: A stand-in for the CLI's input footer: draws the mode, Shift+Tab (ESC [ Z) cycles it,
#: each press is appended to the file argv[2]; with no modes it shows a dialog instead.
FOOTER = r"""
import os, sys, termios, tty
labels = {"default": "manual mode on", "acceptEdits": "accept edits on",
          "plan": "plan mode on", "auto": "auto mode on"}
cycle = [m for m in sys.argv[1].split(",") if m]
log = sys.argv[2]
tty.setraw(0)
i = 0
def draw():
    text = f"  {labels[cycle[i]]} (shift+tab to cycle)" if cycle else "Exit plan mode? 1. Yes 2. No"
    os.write(1, b"\x1b[2J\x1b[H> \r\n" + text.encode())
draw()
buf = b""
while True:
    buf += os.read(0, 16)
    while b"\x1b[Z" in buf:
        buf = buf.replace(b"\x1b[Z", b"", 1)
        with open(log, "a") as f:
            f.write("press\n")
        if cycle:
            i = (i + 1) % len(cycle)
        draw()
"""


@pytest.fixture
def tmux() -> Iterator[TmuxServer]:
    srv = TmuxServer()
    yield srv
    srv.kill()


def _footer_pane(tmux: TmuxServer, tmp_path: Path, cycle: str) -> tuple[Pane, Path]:
    presses = tmp_path / "presses"
    tmux.start([sys.executable, "-c", FOOTER, cycle, str(presses)], tmp_path, {})
    pane_id, socket = tmux.run(
        "display-message", "-p", "-t", "main", "#{pane_id} #{socket_path}"
    ).split()
    return Pane(socket, pane_id), presses


def _presses(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_footer_text_names_the_mode() -> None:
    """The 2.1.332 footers map to their modes; a quoted footer far above the input does not."""
    assert mode_on_screen("❯\n──\n  ⏸ manual mode on · ? for shortcuts") == "default"
    assert mode_on_screen("x\n  ⏵⏵ accept edits on (shift+tab to cycle)\n") == "acceptEdits"
    assert mode_on_screen("plan mode on\n1\n2\n3\n4\n5") is None


async def test_shift_tab_until_the_mode_shows(tmux: TmuxServer, tmp_path: Path) -> None:
    """From default, plan is two presses away: exactly two are sent and the modes passed are
    reported; asking for the mode shown sends none."""
    pane, presses = _footer_pane(tmux, tmp_path, "default,acceptEdits,plan,auto")
    driver = TmuxDriver()
    await wait_for(lambda: _shows(tmux, "manual mode on"), what="the footer")
    assert await driver.switch_mode(pane, "plan") == ["default", "acceptEdits", "plan"]
    assert _presses(presses) == 2
    assert await driver.switch_mode(pane, "plan") == ["plan"]
    assert _presses(presses) == 2


async def test_a_mode_outside_the_cycle_is_refused_after_one_round(
    tmux: TmuxServer, tmp_path: Path
) -> None:
    """bypassPermissions not in the cycle: one full round (4 presses), back where it was,
    then ``mode_unavailable`` naming the modes seen."""
    pane, presses = _footer_pane(tmux, tmp_path, "default,acceptEdits,plan,auto")
    await wait_for(lambda: _shows(tmux, "manual mode on"), what="the footer")
    with pytest.raises(DriverError) as err:
        await TmuxDriver().switch_mode(pane, "bypassPermissions")
    assert err.value.code == "mode_unavailable"
    assert "default → acceptEdits → plan → auto → default" in err.value.message
    assert _presses(presses) == 4
    assert _shows(tmux, "manual mode on")


async def test_no_footer_no_key(tmux: TmuxServer, tmp_path: Path) -> None:
    """A pane showing a dialog instead of a mode is ``busy``; no key reaches it."""
    pane, presses = _footer_pane(tmux, tmp_path, "")
    await wait_for(lambda: _shows(tmux, "Exit plan mode?"), what="the dialog")
    with pytest.raises(DriverError) as err:
        await TmuxDriver().switch_mode(pane, "plan")
    assert err.value.code == "busy"
    assert _presses(presses) == 0


def _shows(tmux: TmuxServer, text: str) -> bool:
    return text in tmux.run("capture-pane", "-p", "-t", "main")


@pytest.fixture
async def stack(
    server: RedisServer, namespace: str, claude_dir: Path, workdir: Path, claude_bin: Path
) -> AsyncIterator[tuple[RunningGateway, Path, Path, aioredis.Redis]]:
    """A collector (commands on, the stand-in claude) and an in-process gateway."""
    (claude_dir / "projects").mkdir(parents=True, exist_ok=True)
    (claude_dir / "sessions").mkdir(exist_ok=True)
    proc = CollectorProc(
        redis_url=server.url,
        namespace=namespace,
        claude_dir=claude_dir,
        host_id="hostA",
        env={"RELAYBUS_ALLOW_PROMPTS": "true", "RELAYBUS_CLAUDE_BIN": str(claude_bin)},
    )
    proc.start()
    admin = connect(make_settings(server.url, namespace))
    try:
        settings = make_settings(server.url, namespace, command_timeout_seconds=20)
        async with running_gateway(settings) as gw:
            yield gw, claude_dir, workdir, admin
    finally:
        await admin.aclose()
        proc.stop()


async def test_headless_session_switch_routes_and_applies_to_the_next_run(
    stack: tuple[RunningGateway, Path, Path, aioredis.Redis], namespace: str, tmp_path: Path
) -> None:
    """A session without a process: ``permission_mode_ack`` (headless, next run), the mode
    listed, and the next prompt's run gets ``--permission-mode=plan``."""
    gw, claude_dir, workdir, admin = stack
    sid = str(uuid.uuid4())
    t = Transcript(transcript_path(claude_dir, str(workdir), sid), sid, str(workdir), "cli")
    t.user("first question")
    t.reply("first question")
    keys = Keys(namespace)
    await wait_for(lambda: admin.hget(keys.session(sid), "host"), what="the session published")
    async with WsClient(gw.ws, token="full-token") as ws:
        await ws.hello(FULL)
        await ws.send(
            {"type": "set_permission_mode", "requestId": "m", "sessionId": sid, "mode": "plan"}
        )
        ack = await ws.expect("permission_mode_ack")
        assert (ack["ok"], ack["mode"], ack["driver"], ack["requestId"]) == (
            True,
            "plan",
            "headless",
            "m",
        )
        assert ack["appliesTo"] == "next_run"
        await wait_for(lambda: _hash_mode(admin, keys, sid), what="the mode stored", timeout_s=10)
        await ws.send({"type": "list_sessions", "requestId": "l"})
        listed = await ws.expect("sessions")
        assert [s.get("permissionMode") for s in listed["sessions"] if s["id"] == sid] == ["plan"]
        await ws.send({"type": "prompt", "requestId": "p", "sessionId": sid, "message": "go"})
        assert (await ws.expect("prompt_sent"))["requestId"] == "p"
    log = tmp_path / "fake-claude.log"
    await wait_for(lambda: log.exists() and "go" in log.read_text(), what="the run")
    argv = json.loads(log.read_text().splitlines()[-1])["argv"]
    assert "--permission-mode=plan" in argv and argv.index("--permission-mode=plan") < argv.index(
        "--"
    )


async def _hash_mode(admin: aioredis.Redis, keys: Keys, sid: str) -> bool:
    return await admin.hget(keys.session(sid), "permissionMode") == b"plan"


async def test_gateway_refuses_bad_modes_and_read_only_tokens(
    stack: tuple[RunningGateway, Path, Path, aioredis.Redis],
) -> None:
    """An unknown mode is ``invalid_field``, a read-only token ``forbidden``, an unknown
    session ``unknown_session``: nothing reaches a machine."""
    gw, _claude_dir, _workdir, _admin = stack
    sid = str(uuid.uuid4())
    async with WsClient(gw.ws, token="full-token") as ws:
        await ws.hello(FULL)
        await ws.send(
            {"type": "set_permission_mode", "requestId": "a", "sessionId": sid, "mode": "yolo"}
        )
        assert (await ws.expect("error"))["code"] == "invalid_field"
        await ws.send(
            {"type": "set_permission_mode", "requestId": "b", "sessionId": sid, "mode": "plan"}
        )
        assert (await ws.expect("error"))["code"] == "unknown_session"
    async with WsClient(gw.ws, token="ro-token") as ro:
        await ro.hello(FULL)
        await ro.send(
            {"type": "set_permission_mode", "requestId": "c", "sessionId": sid, "mode": "plan"}
        )
        assert (await ro.expect("error"))["code"] == "forbidden"
