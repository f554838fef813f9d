"""Questions, "always allow", reject-and-stop and plans: the hook, a collector, a gateway, a client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest
import redis.asyncio as aioredis

from relaybus.shared.store.keys import Keys
from relaybus.shared.wire import approvals as ap
from tests.approvals.conftest import Machine, published
from tests.conftest import make_settings
from tests.support.approvals import HookRun, HookStarter, hook_input, session_with_tool
from tests.support.gateway_client import FULL, Frame, WsClient
from tests.support.gateway_server import RunningGateway, running_gateway
from tests.support.servers import RedisServer
from tests.support.wait import wait_for

DB = "Which database should we use?"
FEATURES = "Which features?"
QUESTIONS = [
    {
        "question": DB,
        "header": "Database",
        "options": [
            {"label": "Postgres", "description": "a server"},
            {"label": "SQLite", "description": "a file"},
        ],
        "multiSelect": False,
    },
    {
        "question": FEATURES,
        "header": "Features",
        "options": [
            {"label": "Auth", "description": "log in"},
            {"label": "Search", "description": "find"},
            {"label": "Cache", "description": "fast"},
        ],
        "multiSelect": True,
    },
]
RULE = {
    "type": "addRules",
    "rules": [{"toolName": "Bash", "ruleContent": "npm test *"}],
    "behavior": "allow",
    "destination": "localSettings",
}
PLAN = "# Plan\n\n1. Add the table\n2. Write the tests"


@pytest.fixture
async def gateway(server: RedisServer, namespace: str) -> AsyncIterator[RunningGateway]:
    async with AsyncExitStack() as stack:
        yield await stack.enter_async_context(running_gateway(make_settings(server.url, namespace)))


async def _ask(
    m: Machine,
    admin: aioredis.Redis,
    keys: Keys,
    hooks: HookStarter,
    ws: WsClient,
    name: str,
    tool_input: dict[str, Any],
    *,
    call_input: dict[str, Any] | None = None,
    **extra: Any,
) -> tuple[HookRun, Frame]:
    """A session whose last call is ``name``; a client watches; the hook asks."""
    sid, path, _tid = session_with_tool(m.claude_dir, m.workdir, name, call_input or tool_input)
    await published(admin, keys, sid)
    await ws.hello(FULL)
    await ws.watch(sid, requestId="w")

    async def counted() -> bool:
        return bool(await admin.hgetall(keys.session_watchers(sid)))

    await wait_for(counted, what="the watcher counted")
    payload = {**hook_input(sid, path, str(m.workdir), name, tool_input), **extra}
    run = await hooks(payload, env=m.hook_env())
    return run, await ws.expect("permission_request", wait_s=30)


async def _refused(ws: WsClient, frame: dict[str, Any]) -> str:
    """Send a decision that must be refused; the error's message."""
    await ws.send(frame)
    err = await ws.expect("error")
    assert (err["requestId"], err["code"]) == (frame["requestId"], "invalid_field"), err
    return str(err["message"])


async def _decision(run: HookRun) -> dict[str, Any]:
    rc, out, _ = await run.result()
    assert rc == 0
    decision: dict[str, Any] = json.loads(out)["hookSpecificOutput"]["decision"]
    return decision


async def test_question_answered_from_a_client(
    hooks: HookStarter,
    machine: Callable[..., Machine],
    gateway: RunningGateway,
    admin: aioredis.Redis,
    keys: Keys,
) -> None:
    """AskUserQuestion goes out with its questions as typed data; answers naming unknown
    questions or labels, a list for a single choice, or a missing answer are invalid_field;
    valid ones (a label, a multi-select list, free text) reach the CLI as updatedInput."""
    m = machine()
    async with WsClient(gateway.ws, token="full-token") as ws:
        run, req = await _ask(
            m, admin, keys, hooks, ws, "AskUserQuestion", {"questions": QUESTIONS}
        )
        assert req["questions"] == QUESTIONS
        assert "answerable" not in req and "suggestions" not in req
        base = {"type": "accept_diff", "requestKey": req["requestKey"]}
        bad = [
            {},
            {DB: "SQLite", FEATURES: ["Auth"], "Which colour?": "Red"},
            {DB: ["SQLite"], FEATURES: ["Auth"]},
            {DB: "SQLite", FEATURES: ["Auth", "Nope"]},
            {DB: "SQLite", FEATURES: ["Auth", "Auth"]},
            {DB: "SQLite"},
            {DB: "x" * (ap.MAX_FREE_TEXT_CHARS + 1), FEATURES: ["Auth"]},
        ]
        for i, answers in enumerate(bad):
            await _refused(ws, {**base, "requestId": f"bad{i}", "answers": answers})
        await _refused(ws, {**base, "requestId": "none"})
        answers = {DB: "DuckDB, in memory", FEATURES: ["Auth", "Cache"]}
        await ws.send({**base, "requestId": "ok", "answers": answers})
        ack = await ws.expect("decision_ack")
        assert (ack["requestId"], ack["decision"]) == ("ok", "allow")
    assert await _decision(run) == {
        "behavior": "allow",
        "updatedInput": {
            "questions": QUESTIONS,
            "answers": {DB: "DuckDB, in memory", FEATURES: "Auth, Cache"},
        },
    }


async def test_always_allow_answers_with_the_cli_suggestion(
    hooks: HookStarter,
    machine: Callable[..., Machine],
    gateway: RunningGateway,
    admin: aioredis.Redis,
    keys: Keys,
) -> None:
    """The CLI's permission_suggestions go out in words (a type not known is left out);
    a suggestion out of range or answers on a non-question are invalid_field; the chosen
    one reaches the CLI as updatedPermissions, unchanged."""
    m = machine()
    odd = {"type": "someFutureKind", "destination": "session"}
    async with WsClient(gateway.ws, token="full-token") as ws:
        run, req = await _ask(
            m,
            admin,
            keys,
            hooks,
            ws,
            "Bash",
            {"command": "npm test --silent"},
            permission_suggestions=[RULE, odd],
        )
        assert req["suggestions"] == [{**RULE, "text": "Always allow `npm test *` in this project"}]
        base = {"type": "accept_diff", "requestKey": req["requestKey"]}
        await _refused(ws, {**base, "requestId": "far", "suggestion": 1})
        await _refused(ws, {**base, "requestId": "ans", "answers": {DB: "SQLite"}})
        await ws.send({**base, "requestId": "ok", "suggestion": 0})
        await ws.expect("decision_ack")
    assert await _decision(run) == {"behavior": "allow", "updatedPermissions": [RULE]}


async def test_reject_and_stop(
    hooks: HookStarter,
    machine: Callable[..., Machine],
    gateway: RunningGateway,
    admin: aioredis.Redis,
    keys: Keys,
) -> None:
    """reject_diff with interrupt answers the CLI deny with interrupt: true and the reason."""
    m = machine()
    async with WsClient(gateway.ws, token="full-token") as ws:
        run, req = await _ask(m, admin, keys, hooks, ws, "Bash", {"command": "rm -rf build"})
        await ws.send(
            {
                "type": "reject_diff",
                "requestId": "stop",
                "requestKey": req["requestKey"],
                "reason": "not now",
                "interrupt": True,
            }
        )
        await ws.expect("decision_ack")
    assert await _decision(run) == {"behavior": "deny", "message": "not now", "interrupt": True}


async def test_plan_outside_tmux_is_not_answerable(
    hooks: HookStarter,
    machine: Callable[..., Machine],
    gateway: RunningGateway,
    admin: aioredis.Redis,
    keys: Keys,
) -> None:
    """ExitPlanMode (the hook's input is {}) goes out with the plan from the transcript's call
    and, in a session relaybus cannot type into, answerable: false with a reason; accepting
    or rejecting it is invalid_field."""
    m = machine()
    async with WsClient(gateway.ws, token="full-token") as ws:
        run, req = await _ask(
            m, admin, keys, hooks, ws, "ExitPlanMode", {}, call_input={"plan": PLAN}
        )
        assert req["plan"] == PLAN
        assert req["answerable"] is False
        assert "terminal" in req["answerableReason"]
        base = {"requestKey": req["requestKey"]}
        await _refused(ws, {**base, "type": "accept_diff", "requestId": "acc"})
        await _refused(ws, {**base, "type": "reject_diff", "requestId": "rej"})
        run.kill()


@pytest.mark.parametrize(
    ("suggestion", "text"),
    [
        (RULE, "Always allow `npm test *` in this project"),
        (
            {
                "type": "addRules",
                "rules": [{"toolName": "WebFetch"}],
                "behavior": "allow",
                "destination": "userSettings",
            },
            "Always allow WebFetch in all projects",
        ),
        (
            {"type": "addDirectories", "directories": ["/w/x"], "destination": "session"},
            "Allow access to `/w/x` for this session",
        ),
        (
            {"type": "setMode", "mode": "acceptEdits", "destination": "session"},
            "Switch to accept edits mode for this session",
        ),
        ({"type": "setMode", "mode": "someNewMode", "destination": "session"}, None),
        ({**RULE, "destination": "somewhereElse"}, None),
        ({**RULE, "behavior": "sometimes"}, None),
    ],
)
def test_suggestion_text(suggestion: dict[str, Any], text: str | None) -> None:
    """Each known suggestion shape reads as the rule it writes; an unknown one gets no words."""
    assert ap.suggestion_text(suggestion) == text


def test_questions_are_bounded_never_cut() -> None:
    """Questions within bounds pass as typed data (a long description is cut); a question
    too long, too many options, two alike or a malformed one make the whole set unsendable."""
    long_desc = [{**QUESTIONS[0], "options": [{"label": "A", "description": "d" * 5000}]}]
    assert ap.questions_of({"questions": long_desc}) == [
        {
            "question": DB,
            "header": "Database",
            "multiSelect": False,
            "options": [{"label": "A", "description": "d" * ap.MAX_DESCRIPTION_CHARS}],
        }
    ]
    many = [{"label": f"o{i}", "description": ""} for i in range(ap.MAX_OPTIONS + 1)]
    for bad in (
        [{**QUESTIONS[0], "question": "q" * (ap.MAX_QUESTION_CHARS + 1)}],
        [{**QUESTIONS[0], "options": many}],
        [QUESTIONS[0], QUESTIONS[0]],
        [{**QUESTIONS[0], "options": [{"description": "no label"}]}],
        ["not an object"],
        [],
    ):
        assert ap.questions_of({"questions": bad}) is None, bad
