"""The session list at a glance, older sessions, the header's freshness and New conversation."""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.support import web as w
from tests.support.servers import RedisServer
from tests.web.conftest import Stack, _stack, artifacts_dir, open_app
from tests.web.test_history import _old_transcript


def _ago(minutes: float) -> str:
    t = datetime.now(UTC) - timedelta(minutes=minutes)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.fixture
def list_stack(
    server: RedisServer, namespace: str, claude_dir: Path, tmp_path: Path
) -> Iterator[tuple[Stack, str]]:
    """A 2-day-old session on disk before the collector starts; a long turn backstop."""
    old_sid, _path, _texts = _old_transcript(claude_dir)
    env = {"RELAYBUS_TURN_BACKSTOP_SECONDS": "3600"}
    for stack in _stack(server, namespace, claude_dir, tmp_path, env=env):
        yield stack, old_sid


@pytest.fixture
def sleepers() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes standing in for running claude processes (their pids name live sessions)."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def _sleeper(procs: list[subprocess.Popen[bytes]]) -> int:
    p = subprocess.Popen(["sleep", "300"])
    procs.append(p)
    return p.pid


def _row(page: Page, sid: str) -> object:
    return page.locator(f'.srow[data-session-id="{sid}"]')


def test_each_row_says_its_state_and_older_sessions_come_last(
    page: Page, list_stack: tuple[Stack, str], sleepers: list[subprocess.Popen[bytes]]
) -> None:
    """Working (for how long, and stale), waiting (what for), idle and ended rows; the 2-day-old session under 'Older sessions', its history loaded when opened."""
    stack, old_sid = list_stack
    working, path = stack.new_session()
    stack.write(path, w.prompt(working, "Refactor the parser"))
    stale, path = stack.new_session()
    stack.write(path, w.prompt(stale, "Run the whole build", timestamp=_ago(10)))
    waiting, path = stack.new_session()
    stack.write(path, w.prompt(waiting, "Edit app.py"))
    stack.live_process(waiting, "waiting", "approve Edit: app.py", pid=_sleeper(sleepers))
    idle, path = stack.new_session()
    stack.write(path, w.prompt(idle, "Say hi"), w.reply(idle, "Hi!"))
    stack.live_process(idle, "idle", pid=_sleeper(sleepers))
    ended, path = stack.new_session()
    stack.write(path, w.prompt(ended, "Done soon"), w.reply(ended, "Done."))
    ended_pid = _sleeper(sleepers)
    gone = stack.live_process(ended, "idle", pid=ended_pid)

    open_app(page, stack)
    for sid in (working, stale, waiting, idle, ended, old_sid):
        expect(page.locator(f'.srow[data-session-id="{sid}"]')).to_be_visible()
    sleepers[-1].kill()  # the process exits and its live file goes: the session ends
    sleepers[-1].wait()
    gone.unlink()
    expect(page.locator(f'.srow[data-session-id="{ended}"]')).to_have_attribute(
        "data-state", "ended"
    )

    row = page.locator(f'.srow[data-session-id="{working}"]')
    expect(row).to_have_attribute("data-state", "working")
    expect(row.locator(".badge.working")).to_have_text(re.compile(r"^working \d+s$"))
    row = page.locator(f'.srow[data-session-id="{stale}"]')
    expect(row.locator(".badge.working.stale")).to_be_visible()
    expect(row.locator(".sdetail")).to_have_text(re.compile(r"^no output for (9|10|11) min$"))
    row = page.locator(f'.srow[data-session-id="{waiting}"]')
    expect(row.locator(".badge.waiting")).to_have_text("waiting for you")
    expect(row.locator(".sdetail")).to_have_text("approve Edit: app.py")
    row = page.locator(f'.srow[data-session-id="{idle}"]')
    expect(row.locator(".sstate.idle")).to_have_text("idle")
    expect(page.locator(f'.srow[data-session-id="{ended}"] .badge.ended')).to_have_text("ended")

    # The old session is the last row, under its heading, and says its history loads when opened.
    items = page.locator("#sessions > li")
    expect(items.last).to_have_attribute("data-session-id", old_sid)
    head = page.locator("#sessions .older-head")
    expect(head).to_have_text("Older sessions")
    ids = items.evaluate_all("els => els.map(e => e.dataset.sessionId || 'HEAD')")
    assert ids.index("HEAD") == len(ids) - 2
    old_row = page.locator(f'.srow[data-session-id="{old_sid}"]')
    expect(old_row.locator(".snote")).to_contain_text("history loads when opened")
    expect(old_row.locator(".sago")).to_contain_text("2 d ago")
    page.screenshot(path=str(artifacts_dir() / "list-states.png"), scale="css")

    old_row.locator("a").click()
    bubbles = page.locator("#messages .bubble")
    expect(bubbles).to_have_count(200)
    expect(bubbles.first).to_have_text("question 50")
    expect(bubbles.last).to_have_text("answer 149")
    expect(page.locator("#history-note")).to_be_hidden()


def test_header_says_reconnecting_then_how_many_events_it_catches_up(
    page: Page, stack: Stack
) -> None:
    """While the gateway is down the header says so; on resume it says how many missed events it replays."""
    page.add_init_script(
        """
        window.__connTexts = [];
        new MutationObserver(() => {
          const el = document.querySelector('#conn-text');
          const box = document.querySelector('#conn');
          if (el && box && !box.hidden) window.__connTexts.push(el.textContent);
        }).observe(document, {subtree: true, childList: true, characterData: true, attributes: true});
        """
    )
    sid, path = stack.new_session()
    stack.write(path, w.prompt(sid, "first"), w.reply(sid, "ok"))
    open_app(page, stack)
    stack.gateway.kill()
    expect(page.locator("#conn-text")).to_contain_text(re.compile("Connection lost|Reconnecting"))
    others = []
    for i in range(5):  # each starts a session and a turn: broadcast events missed meanwhile
        other, opath = stack.new_session()
        stack.write(opath, w.prompt(other, f"meanwhile {i}"))
        others.append(other)
    stack.gateway.start()
    for other in others:
        expect(page.locator(f'.srow[data-session-id="{other}"]')).to_be_visible()
    expect(page.locator("#conn")).to_be_hidden()
    texts: list[str] = page.evaluate("window.__connTexts")
    caught = [t for t in texts if t.startswith("Catching up")]
    assert caught, texts
    assert re.fullmatch(r"Catching up: \d+ events…", caught[0]), caught
    assert int(caught[0].split()[2]) >= 10, caught  # 5 session_started + 5 turn_status at least


def test_new_conversation_picks_a_machine_and_a_recent_directory_and_streams_the_reply(
    page: Page, command_stack: Stack, tmp_path: Path
) -> None:
    """New conversation: the machine that takes prompts, a directory from its recent sessions, the first prompt; the reply streams into the reserved session."""
    cwd = tmp_path / "project"
    cwd.mkdir()
    from tests.support import fake_claude

    sid = str(uuid.uuid4())
    path = fake_claude.transcript_path(command_stack.claude_dir, str(cwd), sid)
    path.parent.mkdir(parents=True, exist_ok=True)
    command_stack.write(
        path, w.prompt(sid, "hello", cwd=str(cwd)), w.reply(sid, "Hi!", cwd=str(cwd))
    )
    open_app(page, command_stack)
    page.locator("#new-conv").click()
    expect(page.locator("#newconv-view")).to_be_visible()
    expect(page.locator("#nc-host")).to_have_value("testhost")
    expect(page.locator("#nc-cwd")).to_have_value(str(cwd))
    page.locator("#nc-prompt").fill("write the README")
    page.locator("#nc-start").click()
    expect(page.locator("#chat-view")).to_be_visible()
    new_sid = page.evaluate("decodeURIComponent(location.hash.slice(4))")
    assert new_sid and new_sid != sid
    expect(page.locator("#messages .bubble", has_text="Done: write the README")).to_have_count(1)
    expect(page.locator("#messages .item.user .bubble")).to_have_text(["write the README"])
    expect(page.locator("#composer")).to_be_visible()
    page.screenshot(path=str(artifacts_dir() / "new-conversation.png"))
