"""The session header's permission-mode chip and switch, through the whole path: page ->
gateway -> collector (stand-in claude, no tmux: the next headless run's mode)."""

from __future__ import annotations

import uuid
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.support import fake_claude
from tests.support import web as w
from tests.web.conftest import Stack, open_app


def _session(stack: Stack, tmp_path: Path) -> str:
    """A session whose transcript says it runs in acceptEdits, in a real directory."""
    cwd = tmp_path / "project"
    cwd.mkdir()
    sid = str(uuid.uuid4())
    path = fake_claude.transcript_path(stack.claude_dir, str(cwd), sid)
    path.parent.mkdir(parents=True, exist_ok=True)
    stack.write(
        path,
        w.prompt(sid, "hello", cwd=str(cwd), permissionMode="acceptEdits"),
        w.reply(sid, "Hi!", cwd=str(cwd)),
    )
    return sid


def test_switch_shows_the_mode_and_changes_it(
    page: Page, command_stack: Stack, tmp_path: Path
) -> None:
    """A full-access client sees the session's mode in the header switch, picks Plan, and
    the session's machine confirms it (the switch settles enabled on Plan)."""
    sid = _session(command_stack, tmp_path)
    open_app(page, command_stack)
    page.locator(f'.srow[data-session-id="{sid}"] a').click()
    switch = page.locator("#chat-view .bar #pmode-switch")
    expect(switch).to_be_visible()
    expect(switch).to_have_value("acceptEdits")
    expect(page.locator("#pmode")).to_be_hidden()
    switch.select_option("plan")
    expect(switch).to_be_enabled()
    expect(switch).to_have_value("plan")
    expect(page.locator(".toast")).to_have_count(0)
    page.reload()  # the session's route again: its mode now comes from the listing
    expect(page.locator("#pmode-switch")).to_have_value("plan")


def test_read_only_client_keeps_the_chip_only(
    page: Page, command_stack: Stack, tmp_path: Path
) -> None:
    """A read-only token's switch is refused (``forbidden``, said in words): the switch goes
    away and the chip shows the mode, unchanged."""
    sid = _session(command_stack, tmp_path)
    page.goto(f"{command_stack.gateway.url}?token={w.READ_TOKEN}")
    page.locator(f'.srow[data-session-id="{sid}"] a').click()
    switch = page.locator("#pmode-switch")
    expect(switch).to_have_value("acceptEdits")
    switch.select_option("plan")
    expect(page.locator(".toast")).to_have_text("Your token isn't allowed to do that.")
    expect(switch).to_be_hidden()
    expect(page.locator("#pmode")).to_have_text("Accept edits")
