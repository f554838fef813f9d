"""What Claude asks, answered from the page: questions, "always allow", plans, reject and stop.

The permission frames are published into the real log (the shape the collector publishes,
with the additive fields of issue 27) and the page's answers are read off its real WebSocket.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import orjson
import redis.asyncio as aioredis
from playwright.sync_api import Locator, Page, WebSocket, expect

from relaybus.shared.store.appendlog import AppendBatch, OutEvent
from relaybus.shared.store.keys import Keys
from relaybus.shared.wire import frames
from tests.support import web as w
from tests.support.gateway_publish import Publisher
from tests.support.wait import poll
from tests.web.conftest import Stack, artifacts_dir, open_app

QUESTIONS: list[dict[str, Any]] = [
    {
        "question": "Which database should we use?",
        "header": "Database",
        "multiSelect": False,
        "options": [
            {"label": "Postgres", "description": "A server, for many writers"},
            {"label": "SQLite", "description": "One file, no server"},
        ],
    },
    {
        "question": "Which checks should run?",
        "header": "Checks",
        "multiSelect": True,
        "options": [
            {"label": "Lint", "description": ""},
            {"label": "Types", "description": "mypy --strict"},
            {"label": "Tests", "description": ""},
        ],
    },
]
NPM_SUGGESTION = {
    "type": "addRules",
    "rules": [{"toolName": "Bash", "ruleContent": "npm test *"}],
    "behavior": "allow",
    "destination": "localSettings",
}
PLAN = "# Plan\n\n1. Add the `users` table\n2. Write the migration\n\nThen run **all** tests."


def _record_sent(page: Page) -> list[dict[str, Any]]:
    """Every frame the page sends on any WebSocket, decoded."""
    sent: list[dict[str, Any]] = []

    def on_ws(ws: WebSocket) -> None:
        ws.on("framesent", lambda payload: sent.append(json.loads(payload)))

    page.on("websocket", on_ws)
    return sent


def _decisions(sent: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The first ``n`` decisions the page sent, without their random ids."""
    found = poll(
        lambda: (
            [f for f in sent if f["type"] in ("accept_diff", "reject_diff")][:n]
            if sum(f["type"] in ("accept_diff", "reject_diff") for f in sent) >= n
            else None
        )
    )
    return [{k: v for k, v in f.items() if k not in ("requestId", "traceId")} for f in found]


def _publish(stack: Stack, sid: str, *frames_: dict[str, Any]) -> None:
    """Append session-stream frames to the real log (as the collector's approvals do)."""

    async def run() -> None:
        client = aioredis.from_url(stack.server.url)
        try:
            events = [
                OutEvent(f["type"], orjson.dumps({**f, "sessionId": sid})[:-1], True)
                for f in frames_
            ]
            await Publisher(client, Keys(stack.namespace))._append(AppendBatch(sid, events))
        finally:
            await client.aclose()

    # Playwright's sync API owns this thread's event loop: run the publish beside it.
    failed: list[BaseException] = []
    thread = threading.Thread(target=lambda: _run(run(), failed))
    thread.start()
    thread.join(30)
    assert not thread.is_alive() and not failed, failed


def _run(coro: Any, failed: list[BaseException]) -> None:
    try:
        asyncio.run(coro)
    except BaseException as exc:  # reported to the test's thread
        failed.append(exc)


def _request(key: str, name: str, tool_input: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "type": frames.PERMISSION_REQUEST,
        "requestKey": key,
        "name": name,
        "input": tool_input,
        "expiresAt": 4_000_000_000_000,
        **extra,
    }


def _resolved(key: str, decision: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": frames.PERMISSION_RESOLVED,
        "requestKey": key,
        "decision": decision,
        **extra,
    }


def _open_session(
    page: Page, stack: Stack, *tools: tuple[str, str, dict[str, Any]]
) -> tuple[str, Path]:
    """A session whose transcript asked for ``tools`` ((id, name, input)…), opened in the page."""
    sid, path = stack.new_session()
    uses = [w.tool_use(sid, tool_id, name, tool_input) for tool_id, name, tool_input in tools]
    stack.write(path, w.prompt(sid, "set up the database"), *uses)
    open_app(page, stack)
    page.locator(f'.srow[data-session-id="{sid}"] a').click()
    expect(page.locator("#messages .bubble.user")).to_have_text(["set up the database"])
    expect(page.locator("#messages .tool")).to_have_count(len(tools))
    return sid, path


def _card(page: Page, key: str) -> Locator:
    return page.locator(f'.permission[data-key="{key}"]')


def test_question_card_sends_every_answer_in_one_accept_diff(page: Page, stack: Stack) -> None:
    """AskUserQuestion renders as radio and checkbox choices plus "Other"; Send answers stays disabled until each is answered, then sends one accept_diff with all answers."""
    sent = _record_sent(page)
    sid, _ = _open_session(page, stack)
    _publish(stack, sid, _request("k-ask", "AskUserQuestion", {}, questions=QUESTIONS))
    card = _card(page, "k-ask")
    expect(card.locator(".ptitle")).to_have_text("Claude asks")
    expect(card.locator(".pq .qtext")).to_have_text([q["question"] for q in QUESTIONS])
    expect(card.locator(".pq").nth(0).locator("input[type=radio]")).to_have_count(3)
    expect(card.locator(".pq").nth(1).locator("input[type=checkbox]")).to_have_count(4)
    expect(card.locator(".pq").nth(0).locator(".odesc")).to_have_text(
        ["A server, for many writers", "One file, no server"]
    )
    send = card.locator("button", has_text="Send answers")
    expect(send).to_be_disabled()
    card.get_by_text("SQLite", exact=True).click()
    expect(send).to_be_disabled()  # the second question is still open
    card.get_by_text("Types", exact=True).click()
    card.get_by_text("Lint", exact=True).click()
    expect(send).to_be_enabled()
    card.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts_dir() / "web-mobile-question.png"), full_page=True)
    send.click()
    assert _decisions(sent, 1) == [
        {
            "type": "accept_diff",
            "sessionId": sid,
            "requestKey": "k-ask",
            "answers": {
                "Which database should we use?": "SQLite",
                "Which checks should run?": ["Lint", "Types"],
            },
        }
    ]
    _publish(stack, sid, _resolved("k-ask", "allow"))
    expect(card.locator(".decision")).to_have_text("Answered")
    expect(card.locator("button")).to_have_count(0)


def test_other_is_sent_as_the_typed_answer(page: Page, stack: Stack) -> None:
    """Typing in "Other" selects it and sends the free text (trimmed) as that question's answer."""
    sent = _record_sent(page)
    sid, _ = _open_session(page, stack)
    _publish(stack, sid, _request("k-other", "AskUserQuestion", {}, questions=QUESTIONS[:1]))
    card = _card(page, "k-other")
    card.get_by_text("Postgres", exact=True).click()
    card.locator(".pother").fill("  DuckDB, embedded  ")
    expect(card.locator(".pq input[type=radio]").nth(2)).to_be_checked()
    expect(card.locator(".pq input[type=radio]").nth(0)).not_to_be_checked()
    card.locator("button", has_text="Send answers").click()
    assert _decisions(sent, 1)[0]["answers"] == {
        "Which database should we use?": "DuckDB, embedded"
    }


def test_always_allow_offers_each_cli_suggestion_and_sends_its_index(
    page: Page, stack: Stack
) -> None:
    """Each of the CLI's suggestions is a button with its rule in words; a tap sends accept_diff with that suggestion's index, and the whole command stays visible."""
    sent = _record_sent(page)
    command = "npm test --silent && npm run lint -- --max-warnings=0 --format=stylish src/ tests/"
    sid, _ = _open_session(page, stack, ("tu1", "Bash", {"command": command}))
    suggestions = [
        {**NPM_SUGGESTION, "text": "Always allow `npm test *` in this project"},
        {
            "type": "addDirectories",
            "directories": ["/srv/data"],
            "destination": "session",
            "text": "Always allow access to `/srv/data` in this session",
        },
    ]
    _publish(
        stack,
        sid,
        _request("k-bash", "Bash", {"command": command}, toolUseId="tu1", suggestions=suggestions),
    )
    card = _card(page, "k-bash")
    always = card.locator("button.always")
    expect(always).to_have_text(
        [
            "Always allow npm test * in this project",
            "Always allow access to /srv/data in this session",
        ]
    )
    expect(always.nth(0).locator("code")).to_have_text("npm test *")
    expect(card).to_contain_text(command)
    card.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts_dir() / "web-mobile-always-allow.png"), full_page=True)
    always.nth(1).click()
    assert _decisions(sent, 1) == [
        {"type": "accept_diff", "sessionId": sid, "requestKey": "k-bash", "suggestion": 1}
    ]


def test_plan_card_renders_markdown_and_approves_or_keeps_planning_with_a_note(
    page: Page, stack: Stack
) -> None:
    """A plan shows as Markdown with Approve and Keep planning; Keep planning sends reject_diff with the note, Approve a bare accept_diff."""
    sent = _record_sent(page)
    sid, _ = _open_session(page, stack)
    _publish(stack, sid, _request("k-plan1", "ExitPlanMode", {}, plan=PLAN))
    card = _card(page, "k-plan1")
    expect(card.locator(".plan .mdh")).to_have_text("Plan")
    expect(card.locator(".plan ol li")).to_have_text(["Add the users table", "Write the migration"])
    expect(card.locator(".plan ol li code")).to_have_text("users")
    expect(card.locator(".plan strong").last).to_have_text("all")
    card.scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts_dir() / "web-mobile-plan.png"), full_page=True)
    card.locator(".preason").fill("Use SQLite, not Postgres")
    card.locator("button", has_text="Keep planning").click()
    _publish(stack, sid, _resolved("k-plan1", "deny"))
    # Under a parallel suite the published resolution can take a while to reach the page.
    expect(card.locator(".decision")).to_have_text("Kept planning", timeout=45_000)
    _publish(stack, sid, _request("k-plan2", "ExitPlanMode", {}, plan=PLAN + "\n3. SQLite"))
    _card(page, "k-plan2").locator("button", has_text="Approve").click()
    assert _decisions(sent, 2) == [
        {
            "type": "reject_diff",
            "sessionId": sid,
            "requestKey": "k-plan1",
            "reason": "Use SQLite, not Postgres",
        },
        {"type": "accept_diff", "sessionId": sid, "requestKey": "k-plan2"},
    ]


def test_reject_and_stop_claude_sends_interrupt_with_the_reason(page: Page, stack: Stack) -> None:
    """Under "Reject with a reason, or stop Claude": Reject with reason sends reject_diff{reason}; Reject and stop Claude adds interrupt: true."""
    sent = _record_sent(page)
    sid, _ = _open_session(
        page,
        stack,
        ("tu1", "Bash", {"command": "rm -rf build"}),
        ("tu2", "Bash", {"command": "ls"}),
    )
    _publish(stack, sid, _request("k-1", "Bash", {"command": "rm -rf build"}, toolUseId="tu1"))
    first = _card(page, "k-1")
    first.locator(".pmore summary").click()
    first.locator(".preason").fill("  keep the build  ")
    first.locator("button", has_text="Reject with reason").click()
    _publish(stack, sid, _request("k-2", "Bash", {"command": "ls"}, toolUseId="tu2"))
    second = _card(page, "k-2")
    second.locator(".pmore summary").click()
    second.locator("button", has_text="Reject and stop Claude").click()
    assert _decisions(sent, 2) == [
        {"type": "reject_diff", "sessionId": sid, "requestKey": "k-1", "reason": "keep the build"},
        {"type": "reject_diff", "sessionId": sid, "requestKey": "k-2", "interrupt": True},
    ]


def test_read_only_token_and_unanswerable_requests_show_no_buttons(
    page: Page, stack: Stack
) -> None:
    """A read-only token sees the question card with no buttons and says why; an answerable:false plan says its reason, read-only, to every client."""
    sid, path = stack.new_session()
    stack.write(path, w.prompt(sid, "plan it"))
    _publish(
        stack,
        sid,
        _request("k-q", "AskUserQuestion", {}, questions=QUESTIONS[:1]),
        _request(
            "k-p",
            "ExitPlanMode",
            {},
            plan=PLAN,
            answerable=False,
            answerableReason="This plan must be approved at the terminal.",
        ),
    )
    page.goto(f"{stack.gateway.url}?token={w.READ_TOKEN}")
    page.locator(f'.srow[data-session-id="{sid}"] a').click()
    for key in ("k-q", "k-p"):
        expect(_card(page, key).locator(".ptitle")).to_be_visible()
        expect(_card(page, key).locator("button")).to_have_count(0)
    expect(_card(page, "k-q").locator(".pnote")).to_have_text(
        "This access token can watch but not answer."
    )
    expect(_card(page, "k-q").locator("input[type=radio]").first).to_be_disabled()
    expect(_card(page, "k-p").locator(".pnote")).to_have_text(
        "This plan must be approved at the terminal."
    )
    page.goto(f"{stack.gateway.url}?token={w.TOKEN}")
    page.locator(f'.srow[data-session-id="{sid}"] a').click()
    expect(_card(page, "k-q").locator("button", has_text="Send answers")).to_be_visible()
    expect(_card(page, "k-p").locator(".plan ol li")).to_have_count(2)
    expect(_card(page, "k-p").locator("button")).to_have_count(0)
    expect(_card(page, "k-p").locator(".pnote")).to_have_text(
        "This plan must be approved at the terminal."
    )


CLI_REJECTED = (
    "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it"
    " was a file edit, the new_string was NOT written to the file). To tell you how to proceed,"
    " the user said:\nuse yarn instead"
)


def test_interrupts_and_rejections_show_as_what_they_are(page: Page, stack: Stack) -> None:
    """The CLI's interrupt line is a notice, not a user bubble; a tool rejected in the terminal or from a phone is a Rejected row with who and why, not an error."""
    sid, path = _open_session(
        page, stack, ("tu1", "Bash", {"command": "npm i"}), ("tu2", "Bash", {"command": "git push"})
    )
    _publish(stack, sid, _request("k-2", "Bash", {"command": "git push"}, toolUseId="tu2"))
    _publish(stack, sid, _resolved("k-2", "deny", message="not on main"))
    stack.write(
        path,
        w.tool_result(sid, "tu1", CLI_REJECTED, error=True),
        w.tool_result(sid, "tu2", "not on main", error=True),
        w.prompt(sid, "[Request interrupted by user for tool use]"),
    )
    tools = page.locator("#messages .tool")
    expect(tools.locator(".rej-label")).to_have_text(
        ["Rejected in the terminal: use yarn instead", "Rejected from relaybus: not on main"]
    )
    expect(tools.locator(".err-label")).to_have_count(0)
    expect(page.locator("#messages .tool.rejected")).to_have_count(2)
    expect(page.locator("#messages .interrupt")).to_have_text(
        ["Interrupted while a tool was waiting"]
    )
    expect(page.locator("#messages .bubble.user")).to_have_text(["set up the database"])
    page.screenshot(path=str(artifacts_dir() / "web-mobile-outcomes.png"), full_page=True)


def test_header_without_a_title_falls_back_to_the_cwd_basename(page: Page, stack: Stack) -> None:
    """With no title the session header names the cwd's last folder (as the seed says), not the first prompt or the id."""
    _open_session(page, stack)
    expect(page.locator("#chat-title")).to_have_text("project")
