"""Approve / Reject from the page: Claude Code's PermissionRequest hook, held until a tap."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.support.approvals import RELAYBUS, hook_input, session_with_tool
from tests.web.conftest import Stack, artifacts_dir, open_app

EDIT = {"old_string": "x = 1", "new_string": "x = 2\ny = 3"}


class Hook:
    """``relaybus hook permission-request`` run as Claude Code runs it (JSON on stdin)."""

    def __init__(self, stack: Stack, payload: dict[str, Any], workdir: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYBUS_")}
        env["RELAYBUS_APPROVAL_PORT"] = str(stack.approval_port)
        env["RELAYBUS_APPROVAL_TIMEOUT_SECONDS"] = "90"
        stdin = workdir / f"hook-input-{len(list(workdir.glob('hook-input-*')))}.json"
        stdin.write_text(json.dumps(payload))
        with open(stdin, "rb") as fed:
            self.proc = subprocess.Popen(
                [str(RELAYBUS), "hook", "permission-request"],
                stdin=fed,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
            )

    def decision(self, timeout_s: float = 60) -> dict[str, Any]:
        out, _ = self.proc.communicate(timeout=timeout_s)
        assert self.proc.returncode == 0
        answer: dict[str, Any] = json.loads(out)["hookSpecificOutput"]["decision"]
        return answer

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=10)  # reaps it and closes its pipes


@pytest.fixture
def hooks() -> Iterator[list[Hook]]:
    started: list[Hook] = []
    yield started
    for hook in started:
        hook.stop()


def _edit_session(stack: Stack, tmp_path: Path) -> tuple[str, Path, dict[str, Any]]:
    workdir = tmp_path / "work"
    workdir.mkdir()
    target = workdir / "app.py"
    target.write_text("import os\nx = 1\nprint(x)\n")
    tool_input = {"file_path": str(target), **EDIT}
    sid, path, _tool_use_id = session_with_tool(stack.claude_dir, workdir, "Edit", tool_input)
    return sid, path, tool_input


@pytest.mark.parametrize("choice", ["Approve", "Reject"])
def test_permission_request_is_answered_from_the_page(
    page: Page, approval_stack: Stack, tmp_path: Path, hooks: list[Hook], choice: str
) -> None:
    """A held Edit shows its label, diff preview and Approve/Reject; the tap reaches Claude Code's hook as allow/deny and the card shows the outcome."""
    stack = approval_stack
    sid, path, tool_input = _edit_session(stack, tmp_path)
    open_app(page, stack)
    page.locator(f'.srow[data-session-id="{sid}"] a').click()
    expect(page.locator(".tool .label")).to_have_text(["Edit: app.py"])
    # The page is watching: the collector now holds the request instead of falling through.
    payload = hook_input(sid, path, str(tmp_path / "work"), "Edit", tool_input)
    hooks.append(Hook(stack, payload, tmp_path))
    card = page.locator(".permission")
    expect(card.locator(".ptitle")).to_have_text("Permission needed: Edit: app.py")
    expect(card.locator(".delta")).to_have_text("Added 2 lines, removed 1 line")
    expect(card.locator(".drow.add .code")).to_have_text(["x = 2", "y = 3"])
    expect(card.locator(".drow.del .code")).to_have_text(["x = 1"])
    expect(page.locator("#indicator .verb")).to_have_text("Waiting: approve Edit")
    card.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts_dir() / "web-mobile-approval.png"))
    card.get_by_role("button", name=choice, exact=True).click()
    decision = hooks[0].decision()
    assert decision["behavior"] == ("allow" if choice == "Approve" else "deny")
    expect(card.locator(".decision")).to_have_text(
        "Approved" if choice == "Approve" else "Rejected"
    )
    expect(card.locator("button")).to_have_count(0)


def test_card_shows_which_member_approved(
    page: Page, approval_stack: Stack, tmp_path: Path, hooks: list[Hook]
) -> None:
    """A member's Approve reaches the hook and the card says who, from which device, when."""
    stack = approval_stack
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYBUS_")}
    env |= {"RELAYBUS_REDIS_URL": stack.server.url, "RELAYBUS_NAMESPACE": stack.namespace}
    made = subprocess.run(
        [sys.executable, "-m", "relaybus.cli", "token", "add", "dana", "--all-hosts", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    token = json.loads(made.stdout)["token"]
    sid, path, tool_input = _edit_session(stack, tmp_path)
    page.goto(f"{stack.gateway.url}?token={token}")
    page.locator(f'.srow[data-session-id="{sid}"] a').click()
    expect(page.locator(".tool .label")).to_have_text(["Edit: app.py"])
    hooks.append(
        Hook(stack, hook_input(sid, path, str(tmp_path / "work"), "Edit", tool_input), tmp_path)
    )
    card = page.locator(".permission")
    card.get_by_role("button", name="Approve", exact=True).click()
    assert hooks[0].decision()["behavior"] == "allow"
    expect(card.locator(".decision")).to_have_text(
        re.compile(r"^Approved by dana · Linux · \d\d:\d\d$")
    )
