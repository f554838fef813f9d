"""The tmux driver against a stand-in interactive claude in a real tmux server (own socket)."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from relaybus.collector.drivers.control import Controller
from relaybus.collector.drivers.live import find_live
from relaybus.collector.drivers.tmux import TmuxDriver
from relaybus.shared.aio import now_ms
from relaybus.shared.store.connection import connect
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire import commands as c
from relaybus.shared.wire.commands import Command
from tests.conftest import make_settings
from tests.support.commands_env import RecordingHooks, TmuxServer, texts
from tests.support.fake_claude import INTERRUPTED, REPO, interactive_argv, transcript_path
from tests.support.servers import RedisServer
from tests.support.wait import wait_for


@pytest.fixture
def tmux() -> Iterator[TmuxServer]:
    srv = TmuxServer()
    yield srv
    srv.kill()


def _start_interactive(tmux: TmuxServer, claude_dir: Path, workdir: Path, sid: str) -> None:
    """The stand-in interactive CLI in a pane of the private server."""
    env = {
        "CLAUDE_CONFIG_DIR": str(claude_dir),
        "PYTHONPATH": str(REPO),
        "PATH": os.environ.get("PATH", ""),
    }
    tmux.start(
        interactive_argv(sid),
        cwd=workdir,
        env=env,
    )


async def _live_pid(claude_dir: Path, sid: str) -> int:
    live = await wait_for(lambda: find_live(claude_dir, sid), what="live-process file")
    return live.pid


async def test_the_pane_named_by_the_live_file_is_used(
    tmux: TmuxServer, claude_dir: Path, workdir: Path
) -> None:
    """The live file's ``tmux`` field ("main:@0.%N") names the pane; a wrong name is no pane."""
    sid = str(uuid.uuid4())
    _start_interactive(tmux, claude_dir, workdir, sid)
    pid = await _live_pid(claude_dir, sid)
    pane_id = tmux.run("list-panes", "-t", "main", "-F", "#{pane_id}").split()[0]
    window = tmux.run("list-panes", "-t", "main", "-F", "#{window_id}").split()[0]
    pane = await TmuxDriver().named_pane(pid, f"main:{window}.{pane_id}")
    assert pane is not None and pane.pane_id == pane_id and pane.socket.endswith(tmux.name)
    assert await TmuxDriver().named_pane(pid, "main:@99.%999") is None


async def test_find_pane_walks_the_process_tree(
    tmux: TmuxServer, claude_dir: Path, workdir: Path
) -> None:
    """The pane is found from the live process's ancestors; a process outside tmux has none."""
    sid = str(uuid.uuid4())
    _start_interactive(tmux, claude_dir, workdir, sid)
    pid = await _live_pid(claude_dir, sid)
    pane = await TmuxDriver().find_pane(pid)
    assert pane is not None and pane.pane_id.startswith("%")
    assert pane.socket.endswith(tmux.name)
    assert await TmuxDriver().find_pane(os.getpid()) is None


@pytest.fixture
async def admin(server: RedisServer, namespace: str) -> AsyncIterator[aioredis.Redis]:
    client = connect(make_settings(server.url, namespace))
    yield client
    await client.aclose()


def _cmd(type_: str, sid: str, **payload: object) -> Command:
    return Command(str(uuid.uuid4()), type_, sid, "gw", now_ms() + 30_000, dict(payload))


async def test_prompt_and_interrupt_through_the_pane(
    tmux: TmuxServer,
    claude_dir: Path,
    workdir: Path,
    server: RedisServer,
    namespace: str,
    admin: aioredis.Redis,
) -> None:
    """A live session in tmux gets prompts typed into its pane and Escape as interrupt."""
    sid = str(uuid.uuid4())
    keys = Keys(namespace)
    _start_interactive(tmux, claude_dir, workdir, sid)
    await _live_pid(claude_dir, sid)
    await admin.hset(
        keys.session(sid), mapping={"host": "testhost", "cwd": str(workdir), "state": "idle"}
    )
    settings = make_settings(
        server.url, namespace, claude_dir, allow_prompts=True, claude_bin="/nonexistent"
    )
    hooks = RecordingHooks()
    controller = Controller(settings, admin, hooks)
    path = transcript_path(claude_dir, str(workdir), sid)

    reply = await controller.execute(_cmd(c.PROMPT, sid, message="hello 'tmux' -l; $HOME"))
    assert reply.ok and reply.data == {"driver": "tmux"}
    await wait_for(
        lambda: texts(path, "assistant")[-1:] == ["Done: hello 'tmux' -l; $HOME"], what="reply"
    )
    assert texts(path, "user") == ["hello 'tmux' -l; $HOME"]
    assert hooks.calls == [("started", sid, None)]

    reply = await controller.execute(_cmd(c.INTERRUPT, sid))
    assert (reply.ok, reply.code) == (False, "no_active_turn")

    assert (await controller.execute(_cmd(c.PROMPT, sid, message="two\nlines"))).ok
    await wait_for(
        lambda: texts(path, "assistant")[-1:] == ["Done: two\nlines"], what="pasted reply"
    )
    assert texts(path, "user")[-1] == "two\nlines"

    assert (await controller.execute(_cmd(c.PROMPT, sid, message="a LONG one"))).ok
    await wait_for(lambda: "a LONG one" in texts(path, "user"), what="long turn")
    await admin.hset(keys.session(sid), "state", "working")
    reply = await controller.execute(_cmd(c.PROMPT, sid, message="meanwhile"))
    assert (reply.ok, reply.code) == (False, "busy")
    reply = await controller.execute(_cmd(c.INTERRUPT, sid))
    assert reply.ok and reply.data == {"driver": "tmux"}
    await wait_for(lambda: texts(path, "user")[-1] == INTERRUPTED, what="interruption")
    assert "meanwhile" not in texts(path, "user")


async def test_control_characters_never_reach_the_pane(
    tmux: TmuxServer,
    claude_dir: Path,
    workdir: Path,
    server: RedisServer,
    namespace: str,
    admin: aioredis.Redis,
) -> None:
    """\\r, ^C, ESC and an early paste end are refused whole; paste markers alone are stripped."""
    sid = str(uuid.uuid4())
    keys = Keys(namespace)
    _start_interactive(tmux, claude_dir, workdir, sid)
    await _live_pid(claude_dir, sid)
    await admin.hset(
        keys.session(sid), mapping={"host": "testhost", "cwd": str(workdir), "state": "idle"}
    )
    settings = make_settings(
        server.url, namespace, claude_dir, allow_prompts=True, claude_bin="/nonexistent"
    )
    controller = Controller(settings, admin, RecordingHooks())
    path = transcript_path(claude_dir, str(workdir), sid)
    for attack in ["look\rrm -rf ~", "a\x03b", "x\x1b", "one\ntwo\x1b[201~\rthree", "c1\x9b2~"]:
        reply = await controller.execute(_cmd(c.PROMPT, sid, message=attack))
        assert (reply.ok, reply.code) == (False, "invalid_message"), attack
    ok = await controller.execute(_cmd(c.PROMPT, sid, message="\x1b[200~safe\r\nend\x1b[201~"))
    assert ok.ok
    await wait_for(
        lambda: texts(path, "assistant")[-1:] == ["Done: safe\nend"], what="clean prompt"
    )
    assert texts(path, "user") == ["safe\nend"]
