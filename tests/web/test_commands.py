"""Prompt and Stop through the whole path: page -> gateway -> collector -> stand-in claude."""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.support import fake_claude
from tests.support import web as w
from tests.web.conftest import Stack, open_app


def _session_in(stack: Stack, tmp_path: Path) -> tuple[str, Path, str]:
    """A session whose cwd is a real directory, where the stand-in claude can run."""
    cwd = tmp_path / "project"
    cwd.mkdir()
    sid = str(uuid.uuid4())
    path = fake_claude.transcript_path(stack.claude_dir, str(cwd), sid)
    path.parent.mkdir(parents=True, exist_ok=True)
    stack.write(path, w.prompt(sid, "hello", cwd=str(cwd)), w.reply(sid, "Hi!", cwd=str(cwd)))
    return sid, path, str(cwd)


def test_prompt_echo_is_replaced_by_the_real_event_once(
    page: Page, command_stack: Stack, tmp_path: Path
) -> None:
    """A sent prompt shows at once, is confirmed, and when Claude Code writes it the page still shows it exactly once."""
    sid, _path, _cwd = _session_in(command_stack, tmp_path)
    open_app(page, command_stack)
    page.locator(f'.srow[data-session-id="{sid}"] a').click()
    expect(page.locator("#messages .bubble")).to_have_text(["hello", "Hi!"])
    page.locator("#prompt").fill("add a docstring")
    page.locator("#composer button[type=submit]").click()
    mine = page.locator(".bubble", has_text=re.compile("^add a docstring$"))
    expect(mine).to_have_count(1)  # the optimistic echo, before any round trip completes
    expect(page.locator("#messages .bubble", has_text="Done: add a docstring")).to_have_count(1)
    expect(page.locator(".echo")).to_have_count(0)
    expect(mine).to_have_count(1)
    expect(page.locator("#messages .item.user .bubble", has_text="add a docstring")).to_have_count(
        1
    )
    expect(page.locator("#messages .bubble")).to_have_text(
        ["hello", "Hi!", "add a docstring", "Looking at: add a docstring", "Done: add a docstring"]
    )


def test_stop_interrupts_a_running_turn(page: Page, command_stack: Stack, tmp_path: Path) -> None:
    """While a prompt runs, Stop is offered; tapping it interrupts the turn and the indicator goes away."""
    sid, _path, _cwd = _session_in(command_stack, tmp_path)
    open_app(page, command_stack)
    page.locator(f'.srow[data-session-id="{sid}"] a').click()
    page.locator("#prompt").fill("a LONG refactor")
    page.locator("#composer button[type=submit]").click()
    expect(page.locator("#indicator")).to_be_visible()
    expect(page.locator("#messages .bubble", has_text="Starting a long task")).to_have_count(1)
    expect(page.locator(".bubble", has_text=re.compile("^a LONG refactor$"))).to_have_count(1)
    page.locator("#stop").click()
    expect(page.locator(".toast", has_text="Stop requested.")).to_be_visible()
    # The CLI's interrupt line is a notice, not a message the person typed.
    expect(page.locator("#messages .interrupt")).to_have_text(["Interrupted"])
    expect(page.locator("#messages .bubble", has_text=fake_claude.INTERRUPTED)).to_have_count(0)
    expect(page.locator("#indicator")).to_be_hidden()
    expect(page.locator("#stop")).to_be_hidden()


def test_stop_is_disabled_when_the_session_cannot_be_interrupted(
    page: Page, command_stack: Stack, tmp_path: Path
) -> None:
    """A working session run outside tmux answers Stop with interrupt_unavailable: the page says so and disables Stop."""
    sid, _path, cwd = _session_in(command_stack, tmp_path)
    sleeper = subprocess.Popen(["sleep", "300"], env={"PATH": "/usr/bin:/bin"})
    try:
        command_stack.live_process(sid, "busy", pid=sleeper.pid, cwd=cwd)
        open_app(page, command_stack)
        page.locator(f'.srow[data-session-id="{sid}"] a').click()
        expect(page.locator("#indicator")).to_be_visible()
        stop = page.locator("#stop")
        expect(stop).to_be_enabled()
        stop.click()
        expect(page.locator(".toast")).to_have_text("Stopping isn't supported for this session.")
        expect(stop).to_be_disabled()
        expect(stop).to_be_visible()
    finally:
        sleeper.kill()
        sleeper.wait(10)
