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
