"""The web client in headless Chromium against a real gateway, collector and Redis."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.support import web as w
from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import append, transcript
from tests.support.web import TOKEN
from tests.web.conftest import Stack, open_app


def test_token_link_list_open_and_live_event(page: Page, stack: Stack) -> None:
    """A ?token= link signs in once (then leaves the URL), lists the session, opens it, and shows a live event."""
    sid, path = stack.new_session()
    stack.write(path, w.prompt(sid, "Please fix the login bug"), w.reply(sid, "On it."))
    open_app(page, stack)
    assert "token=" not in page.url
    assert page.evaluate("localStorage.getItem('relaybus.token')") == TOKEN
    row = page.locator(f'.srow[data-session-id="{sid}"]')
    expect(row.locator(".stitle")).to_have_text("Please fix the login bug")
    expect(row.locator(".host")).to_have_text("testhost")
    expect(row.locator(".cwd")).to_have_text("/home/dev/project")
    row.locator("a").click()
    expect(page).to_have_url(re.compile(f"#/s/{sid}$"))
    expect(page.locator(".item.user .bubble")).to_have_text(["Please fix the login bug"])
    expect(page.locator(".item.assistant .bubble")).to_have_text(["On it."])
    stack.write(path, w.reply(sid, "Found it: the session check was inverted."))
    expect(page.locator(".item.assistant .bubble")).to_have_text(
        ["On it.", "Found it: the session check was inverted."]
    )
    page.reload()  # the token is kept on the device, not in the URL
    expect(page.locator(".item.assistant .bubble")).to_have_count(2)
    assert "token=" not in page.url


def test_tool_rows_results_diffs_and_neutral_blocks(page: Page, stack: Stack) -> None:
    """Tool rows get client labels, results attach by toolUseId, edits show a coloured diff, errors stand out, unknown kinds render neutral."""
    sid, path = stack.new_session()
    stack.write(
        path,
        w.prompt(sid, "fix app.py"),
        w.thinking(sid, "Probably the session check."),
        w.tool_use(sid, "tu_read", "Read", {"file_path": "/home/dev/project/src/foo.tsx"}),
        w.tool_result(sid, "tu_read", "line one\nline two\n"),
        w.tool_use(
            sid,
            "tu_edit",
            "Edit",
            {
                "file_path": "/home/dev/project/app.py",
                "old_string": "pass",
                "new_string": "return ok",
            },
        ),
        w.edit_result(
            sid,
            "tu_edit",
            "/home/dev/project/app.py",
            [
                {
                    "oldStart": 3,
                    "lines": [" def login():", "-    pass", "+    return ok", "+    # checked"],
                }
            ],
        ),
        w.tool_use(sid, "tu_bash", "Bash", {"command": "npm test", "description": "Run tests"}),
        w.tool_result(sid, "tu_bash", "<tool_use_error>npm: not found</tool_use_error>"),
        w.tool_use(sid, "tu_task", "Task", {"description": "Explore the repo", "prompt": "go"}),
        w.sidechain(sid, "agent7", "Looking through src/"),
        w.tool_use(sid, "tu_shot", "mcp__browser__screenshot", {}),
        w.image_result(sid, "tu_shot", 20_000),
        w.unknown_item(sid, "hologram", "a block kind from the future"),
        w.unknown_record(sid, "brand-new-record"),
        w.tool_use(sid, "tu_pending", "Grep", {"pattern": "TODO"}),
    )
    open_app(page, stack)
    page.locator(f'.srow[data-session-id="{sid}"] a').click()

    edit = page.locator('.tool[data-tool-use-id="tu_edit"]')
    expect(edit.locator(".label")).to_have_text("Edit: app.py")
    expect(edit).to_have_class(re.compile(r"\bdone\b"))
    expect(edit.locator(".delta")).to_have_text("Added 2 lines, removed 1 line")
    expect(edit.locator(".drow.add .code")).to_have_text(["    return ok", "    # checked"])
    expect(edit.locator(".drow.del .code")).to_have_text(["    pass"])
    expect(edit.locator("details.input")).not_to_have_attribute("open", "")
    assert edit.locator(".drow.add").first.evaluate("e => getComputedStyle(e).backgroundColor") != (
        edit.locator(".drow.ctx").first.evaluate("e => getComputedStyle(e).backgroundColor")
    )

    read = page.locator('.tool[data-tool-use-id="tu_read"]')
    expect(read.locator(".label")).to_have_text("Read: foo.tsx")
    expect(read.locator(".result summary")).to_have_text("Output · 3 lines")

    bash = page.locator('.tool[data-tool-use-id="tu_bash"]')
    expect(bash.locator(".label")).to_have_text("Bash: npm test")
    expect(bash).to_have_class(re.compile(r"\bfailed\b"))
    expect(bash.locator(".result.error .out")).to_have_text("npm: not found")

    task = page.locator('.tool[data-tool-use-id="tu_task"]')
    expect(task.locator(".label")).to_have_text("Task: Explore the repo")
    expect(task.locator(".agent-group .bubble")).to_have_text("Looking through src/")

    shot = page.locator('.tool[data-tool-use-id="tu_shot"]')
    expect(shot.locator(".label")).to_have_text("mcp__browser__screenshot")
    expect(shot.locator(".image-ph")).to_have_text("Image · image/png · 20 KB")

    pending = page.locator('.tool[data-tool-use-id="tu_pending"]')
    expect(pending).to_have_class(re.compile(r"\bpending\b"))
    expect(pending.locator("details.input")).to_have_attribute("open", "")

    expect(page.locator(".neutral", has_text="hologram")).to_contain_text(
        "a block kind from the future"
    )
    expect(page.locator(".neutral", has_text="unknown event type: brand-new-record")).to_have_count(
        1
    )
    thinking = page.locator("details.thinking")
    expect(thinking).not_to_have_attribute("open", "")
    thinking.locator("summary").click()
    expect(thinking.locator(".ttext")).to_have_text("Probably the session check.")
    # Every result was attached to its row: no orphan result rows.
    expect(page.locator(".tool.orphan")).to_have_count(0)


def test_session_list_updates_live_and_sorts_by_activity(page: Page, stack: Stack) -> None:
    """With the list open, a new session appears on top, a prompt shows 'working' and moves its row up, and an ai-title renames it."""
    first, first_path = stack.new_session()
    stack.write(first_path, w.prompt(first, "older work"), w.reply(first, "ok"))
    open_app(page, stack)
    rows = page.locator("#sessions .srow")
    expect(rows).to_have_count(1)

    second, second_path = stack.new_session()
    stack.write(second_path, w.prompt(second, "newer work"), w.reply(second, "ok"))
    expect(rows).to_have_count(2)
    expect(rows.first).to_have_attribute("data-session-id", second)

    stack.write(first_path, w.prompt(first, "back to the older one"))
    expect(rows.first).to_have_attribute("data-session-id", first)
    expect(rows.first.locator(".badge.working")).to_be_visible()
    expect(page.locator(f'.srow[data-session-id="{second}"] .badge')).to_have_count(0)

    stack.write(first_path, w.ai_title(first, "Refactor the billing module"))
    page.locator(f'.srow[data-session-id="{first}"] a').click()
    expect(page.locator("#chat-title")).to_have_text("Refactor the billing module")
    page.locator("#back").click()
    expect(rows.first.locator(".stitle")).to_have_text("Refactor the billing module")


def test_sessions_from_two_machines_share_one_list(
    page: Page, stack: Stack, tmp_path: Path
) -> None:
    """A second machine's collector adds its sessions to the same list, each row naming its host."""
    other_dir = tmp_path / "laptop-claude"
    (other_dir / "projects").mkdir(parents=True)
    (other_dir / "sessions").mkdir()
    laptop = CollectorProc(
        redis_url=stack.server.url,
        namespace=stack.namespace,
        claude_dir=other_dir,
        host_id="laptop",
        log_path=tmp_path / "collector-laptop.log",
    )
    try:
        laptop.start()
        here, here_path = stack.new_session()
        stack.write(here_path, w.prompt(here, "on the team server"))
        there = str(uuid.uuid4())
        append(transcript(other_dir, there, "-home-me-app"), w.prompt(there, "on my laptop"))
        open_app(page, stack)
        expect(page.locator(f'.srow[data-session-id="{here}"] .host')).to_have_text("testhost")
        expect(page.locator(f'.srow[data-session-id="{there}"] .host')).to_have_text("laptop")
        page.locator(f'.srow[data-session-id="{there}"] a').click()
        expect(page.locator("#chat-sub")).to_have_text("laptop · /home/dev/project")
        expect(page.locator("#messages .bubble")).to_have_text(["on my laptop"])
    finally:
        laptop.stop()
