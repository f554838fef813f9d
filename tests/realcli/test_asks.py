"""What Claude asks beyond yes/no, answered from a client: questions, "always allow",
reject-and-stop and plans, with the real interactive CLI in tmux and relaybus's hook."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.realcli import checks
from tests.realcli.observe import Recorder
from tests.realcli.rig import Rig, rig
from tests.realcli.terminals import Tmux
from tests.realcli.test_tmux import wait_ready
from tests.support.netns import run_isolated

pytestmark = pytest.mark.realcli

DB = "Which database should we use?"
FEATURES = "Which features?"
QUESTIONS = [
    {
        "question": DB,
        "header": "Database",
        "multiSelect": False,
        "options": [
            {"label": "Postgres", "description": "a server"},
            {"label": "SQLite", "description": "a file"},
        ],
    },
    {
        "question": FEATURES,
        "header": "Features",
        "multiSelect": True,
        "options": [
            {"label": "Auth", "description": "log in"},
            {"label": "Search", "description": "find"},
            {"label": "Cache", "description": "fast"},
        ],
    },
]
NPM = "npm test --silent"
PLAN = "# Plan\n\n1. Add the table\n2. Write the tests"
PLAN2 = "# Plan\n\n1. Add the table\n2. Add a migration\n3. Write the tests"
NOTE = "Add a migration step first"


def _tool(name: str, tool_input: dict[str, Any], text: str | None = None) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    return {"content": [*content, {"type": "tool_use", "name": name, "input": tool_input}]}


def _say(text: str, prompt: str | None = None) -> dict[str, Any]:
    turn: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if prompt is not None:
        turn["prompt"] = prompt
    return turn


async def _start(r: Rig, *args: str) -> tuple[Tmux, Recorder, Recorder]:
    observer = await r.client("observer", auto_watch=False)
    watcher = await r.client("watcher")
    term = r.start_interactive(*args)
    await wait_ready(term)
    await term.type_keys("go ahead")
    return term, observer, watcher


async def _request(watcher: Recorder, n: int) -> dict[str, Any]:
    """The ``n``-th permission_request (1-based) the watcher got."""
    found: dict[str, Any] = await watcher.until(
        lambda fs: next(iter(checks.of_type(fs, "permission_request")[n - 1 : n]), None),
        30,
        f"permission_request {n}",
    )
    return found


async def _decide(watcher: Recorder, frame: dict[str, Any]) -> dict[str, Any]:
    await watcher.send(frame)
    ack: dict[str, Any] = await watcher.reply(frame["requestId"])
    return ack


async def question(root: Path) -> dict[str, Any]:
    """Inside: Claude asks two questions; the client answers; the terminal shows the answers."""
    turns = [_tool("AskUserQuestion", {"questions": QUESTIONS}), _say("Thanks for answering.")]
    async with rig(root, turns, hook=True) as r:
        term, _observer, watcher = await _start(r, "--permission-mode", "default")
        request = await _request(watcher, 1)
        dialog = await term.screen_until(lambda s: "Type something" in s, 20, "the CLI's dialog")
        ack = await _decide(
            watcher,
            {
                "type": "accept_diff",
                "requestId": "answer",
                "requestKey": request["requestKey"],
                "answers": {DB: "SQLite", FEATURES: ["Auth", "Cache"]},
            },
        )
        screen = await term.screen_until(
            lambda s: "Thanks for answering." in s, 30, "Claude going on"
        )
        return r.report(request=request, ack=ack, dialog=dialog, screen=screen)


def test_question_answered_from_a_client(tmp_path: Path) -> None:
    """AskUserQuestion reaches the client with its questions as typed data; the client's
    answers (one label, a multi-select list) are what the terminal shows Claude was told,
    and Claude goes on."""
    report = run_isolated(f"{__name__}:question", tmp_path)
    assert report["request"]["name"] == "AskUserQuestion"
    assert report["request"]["questions"] == QUESTIONS
    assert report["ack"]["type"] == "decision_ack", report["ack"]
    screen = report["screen"]
    assert f"{DB} → SQLite" in screen, screen
    assert f"{FEATURES} → Auth, Cache" in screen, screen
    assert "Type something" not in screen


async def bash_rules(root: Path) -> dict[str, Any]:
    """Inside: ``npm test`` asked once and allowed always from the client; asked again by a
    second prompt; then a call rejected with "stop Claude"."""
    turns = [
        _tool("Bash", {"command": NPM, "description": "run the tests"}),
        _say("First run done."),
        _tool("Bash", {"command": NPM, "description": "run the tests"}),
        _say("Second run done."),
        _tool("Bash", {"command": "touch zzz.txt", "description": "make a file"}),
        _say("Went on after the reject."),
    ]
    async with rig(root, turns, hook=True) as r:
        term, _observer, watcher = await _start(r, "--permission-mode", "default")
        first = await _request(watcher, 1)
        always = await _decide(
            watcher,
            {
                "type": "accept_diff",
                "requestId": "always",
                "requestKey": first["requestKey"],
                "suggestion": 0,
            },
        )
        await term.screen_until(lambda s: "First run done." in s, 30, "the first run")
        await wait_ready(term)
        await term.type_keys("again")
        await term.screen_until(
            lambda s: (
                "Second run done." in s
                or len(checks.of_type(watcher.frames, "permission_request")) > 1
            ),
            30,
            "the second run (or its request)",
        )
        between = checks.of_type(watcher.frames, "permission_request")
        if len(between) > 1:  # asked again: the rule was not written
            return r.report(first=first, always=always, between=len(between))
        await wait_ready(term)
        await term.type_keys("touch it")
        touch = await _request(watcher, 2)
        stop = await _decide(
            watcher,
            {
                "type": "reject_diff",
                "requestId": "stop",
                "requestKey": touch["requestKey"],
                "reason": "not now",
                "interrupt": True,
            },
        )
        screen = await term.screen_until(lambda s: "Interrupted" in s, 30, "the interrupt")
        local = r.workdir / ".claude" / "settings.local.json"
        return r.report(
            first=first,
            always=always,
            between=len(between),
            touch=touch,
            stop=stop,
            screen=screen,
            local=json.loads(local.read_text()) if local.exists() else None,
            touched=(r.workdir / "zzz.txt").exists(),
        )


def test_always_allow_then_reject_and_stop(tmp_path: Path) -> None:
    """The CLI's suggestion reaches the client in words; choosing it writes the rule, and the
    second identical command runs without a hook call; a reject with interrupt stops Claude:
    the tool does not run and the model is not asked again."""
    report = run_isolated(f"{__name__}:bash_rules", tmp_path)
    first = report["first"]
    assert first["suggestions"][0]["text"] == "Always allow `npm test *` in this project"
    assert report["always"]["type"] == "decision_ack", report["always"]
    assert report["between"] == 1, "the second npm test was asked again"
    assert report["local"] == {"permissions": {"allow": ["Bash(npm test *)"]}}
    assert report["stop"]["type"] == "decision_ack", report["stop"]
    assert not report["touched"]
    turns = [q for q in report["requests"] if q.get("kind") == "turn"]
    assert turns[-1]["last_user"]["texts"][-1:] == ["touch it"], turns[-1]
    assert "Went on after the reject." not in report["screen"]


async def plan(root: Path) -> dict[str, Any]:
    """Inside: in plan mode Claude proposes a plan; the client keeps it planning with a note;
    Claude proposes another; the client approves it; Claude proceeds."""
    turns = [
        _tool("ExitPlanMode", {"plan": PLAN}, "Here is my plan."),
        {**_tool("ExitPlanMode", {"plan": PLAN2}, "A new plan."), "prompt": NOTE},
        _say("Proceeding with the plan."),
    ]
    async with rig(root, turns, hook=True) as r:
        term, _observer, watcher = await _start(r, "--permission-mode", "plan")
        first = await _request(watcher, 1)
        await term.screen_until(lambda s: "Exit plan mode?" in s, 20, "the plan dialog")
        keep = await _decide(
            watcher,
            {
                "type": "reject_diff",
                "requestId": "keep",
                "requestKey": first["requestKey"],
                "reason": NOTE,
            },
        )
        second = await _request(watcher, 2)
        await term.screen_until(lambda s: "Exit plan mode?" in s, 20, "the second plan dialog")
        approve = await _decide(
            watcher,
            {"type": "accept_diff", "requestId": "approve", "requestKey": second["requestKey"]},
        )
        screen = await term.screen_until(
            lambda s: "Proceeding with the plan." in s, 30, "Claude proceeding"
        )
        return r.report(first=first, keep=keep, second=second, approve=approve, screen=screen)


def test_plan_kept_then_approved_from_a_client_through_tmux(tmp_path: Path) -> None:
    """ExitPlanMode reaches the client with the plan's Markdown and answerable; "keep
    planning" with a note types No and then the note, which Claude gets as the next prompt;
    the next plan's Approve selects Yes in the terminal's dialog and Claude proceeds."""
    report = run_isolated(f"{__name__}:plan", tmp_path)
    first, second = report["first"], report["second"]
    assert (first["name"], first.get("plan"), first.get("answerable", True)) == (
        "ExitPlanMode",
        PLAN,
        True,
    )
    assert second.get("plan") == PLAN2
    assert report["keep"]["type"] == report["approve"]["type"] == "decision_ack"
    noted = [
        q
        for q in report["requests"]
        if q.get("kind") == "turn" and any(NOTE in t for t in q["last_user"]["texts"])
    ]
    assert noted, "the note never reached Claude as a prompt"
    assert "Proceeding with the plan." in report["screen"]
    resolved = checks.of_type(report["clients"]["watcher"], "permission_resolved")
    assert [f["decision"] for f in resolved] == ["deny", "allow"]
