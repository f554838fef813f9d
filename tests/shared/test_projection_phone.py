"""What a phone sees: no bookkeeping noise, readable notices, real titles, sub-agents by id."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from relaybus.shared.transcript.projection import Projected, project_line
from tests.shared.test_projection import assistant, encoded, line, user

CLI = Path(__file__).resolve().parents[1] / "data" / "claude-cli-2.1.332"
CLI_FILES = sorted(p for p in CLI.glob("*/*.jsonl") if len(p.stem) == 36) + sorted(
    CLI.glob("*/*/subagents/*.jsonl")
)
PRINT_TOOLS = CLI / "print-tools" / "5bbaef86-2e70-4548-8aa6-91403e6659d5.jsonl"
SUBAGENT = CLI / "print-tools" / "5bbaef86-2e70-4548-8aa6-91403e6659d5" / "subagents"
#: Record types of the 2.1.332 files that carry nothing a person reads.
BOOKKEEPING = {
    "api-request",
    "api-request-shape",
    "api-request-blob",
    "atis-latch",
    "tools-used",
    "cost-state",
    "last-prompt",
    "mode",
    "permission-mode",
    "queue-operation",
    "file-history-snapshot",
}


def _project(path: Path) -> list[tuple[dict[str, Any], Projected]]:
    out = []
    for raw in path.read_bytes().splitlines():
        out.append((orjson.loads(raw), project_line(raw)))
    return out


def test_real_cli_files_present() -> None:
    """The four transcripts of the real CLI 2.1.332 are there (else the tests pass vacuously)."""
    assert len(CLI_FILES) == 4


@pytest.mark.parametrize("path", CLI_FILES, ids=lambda p: p.parent.name + "/" + p.name[:12])
def test_real_cli_bookkeeping_never_reaches_clients(path: Path) -> None:
    """Every bookkeeping record of the real CLI is dropped under its own type; nothing
    published is empty or of an unknown type."""
    for rec, result in _project(path):
        if rec["type"] in BOOKKEEPING:
            assert (result.publish, result.drop_reason) == (False, rec["type"])
        if result.publish:
            assert result.event is not None
            assert result.event["type"] in {"user", "assistant", "system", "attachment"}
            assert result.event["blocks"], rec


def test_real_cli_print_run_publishes_content_only() -> None:
    """The `-p` run with a --resume turn: 21 content events out of 62 lines."""
    results = _project(PRINT_TOOLS)
    published = [r for _, r in results if r.publish]
    dropped = Counter(r.drop_reason for _, r in results if not r.publish)
    assert len(published) == 21
    assert dropped["api-request"] == 8 and dropped["tools-used"] == 6
    assert dropped["attachment"] == 10 and sum(dropped.values()) == 62 - 21
    assert all(r.event and r.event["type"] in {"user", "assistant"} for r in published)


def test_agent_id_is_lifted_onto_the_agent_tool_result() -> None:
    """The Agent call's tool_result names the sub-agent; its events carry the same agentId."""
    events = [r.event for _, r in _project(PRINT_TOOLS) if r.event]
    tools = {
        b["toolUseId"]: b["name"]
        for event in events
        for b in event["blocks"]
        if b["kind"] == "tool"
    }
    agent_results = [
        b
        for event in events
        for b in event["blocks"]
        if b["kind"] == "tool_result" and tools.get(b["toolUseId"]) == "Agent"
    ]
    assert [b["agentId"] for b in agent_results] == ["aea44ec78cd97dba1"]
    sub = [r for _, r in _project(next(SUBAGENT.glob("*.jsonl"))) if r.publish]
    assert sub and all(r.event and r.event["agentId"] == "aea44ec78cd97dba1" for r in sub)


def test_api_error_retry_is_a_readable_notice() -> None:
    """system/api_error (no content) becomes "API error 529 — retrying, 1/10"."""
    raw = line(
        "system",
        subtype="api_error",
        level="error",
        retryAttempt=1,
        maxRetries=10,
        retryInMs=500,
        error={"status": 529, "message": "overloaded"},
    )
    event = encoded(project_line(raw))
    assert event["blocks"] == [
        {
            "kind": "notification",
            "source": "api_error",
            "status": 529,
            "attempt": 1,
            "maxRetries": 10,
            "text": "API error 529 — retrying, 1/10",
        }
    ]
    bare = encoded(project_line(line("system", subtype="api_error", error={"message": "down"})))
    assert bare["blocks"][0]["text"] == "API error: down"


def test_api_error_reply_carries_an_error_flag() -> None:
    """An assistant line flagged isApiErrorMessage / error: rate_limit is marked as an error."""
    raw = assistant(
        [{"type": "text", "text": "API Error: 429"}],
        isApiErrorMessage=True,
        apiErrorStatus=429,
        error="rate_limit",
    )
    event = encoded(project_line(raw))
    assert (event["error"], event["errorCode"], event["errorStatus"]) == (True, "rate_limit", 429)
    assert "error" not in encoded(project_line(assistant([{"type": "text", "text": "fine"}])))


def test_ansi_escapes_are_stripped_from_command_output() -> None:
    """/compact stdout arrives with raw ESC[2m: the text block holds none of it."""
    raw = user(
        "<local-command-stdout>\x1b[2mCompacted (ctrl+o to see full summary)\x1b[22m"
        "</local-command-stdout>"
    )
    assert encoded(project_line(raw))["blocks"] == [
        {"kind": "text", "text": "Compacted (ctrl+o to see full summary)"}
    ]
    sys_raw = line(
        "system",
        subtype="local_command",
        content="<local-command-stdout>\x1b]8;;http://x\x07link\x1b]8;;\x07 \x1b[1;31mred"
        "\x1b[0m</local-command-stdout>",
    )
    assert encoded(project_line(sys_raw))["blocks"][0]["text"] == "link red"


@pytest.mark.parametrize(
    ("rtype", "field", "rank"),
    [
        ("custom-title", "customTitle", 5),
        ("agent-name", "agentName", 4),
        ("ai-title", "aiTitle", 3),
    ],
)
def test_title_records_are_forwarded_with_raw_data(rtype: str, field: str, rank: int) -> None:
    """A title record is published as itself — type and raw data untouched — never rebuilt."""
    raw = line(rtype, **{field: "My  title"})
    result = project_line(raw)
    event = encoded(result)
    assert (event["type"], event["blocks"], event["title"]) == (rtype, [], "My  title")
    assert event["data"] == orjson.loads(raw)
    assert result.title == (rank, "My title")


def test_summary_is_a_title_only_for_its_leaf() -> None:
    """A summary is not published; its title candidate names the leaf line it belongs to."""
    result = project_line(line("summary", summary="Old work", leafUuid="leaf-1"))
    assert (result.publish, result.title, result.leaf_uuid) == (False, (2, "Old work"), "leaf-1")
    assert project_line(user("hi")).leaf_uuid is None


def test_warmup_agent_prompt_is_dropped() -> None:
    """The Warmup prompt of older CLIs' cache-warming sub-agents is not content."""
    result = project_line(user("Warmup", isSidechain=True, parentUuid=None, agentId="a1"))
    assert (result.publish, result.drop_reason, result.agent_id) == (False, "warmup", "a1")
    assert project_line(user("Warmup")).publish  # a person typing "Warmup" is a prompt
    assert project_line(user("Warmup", isSidechain=True, parentUuid="p")).publish


def test_compaction_agent_and_summary_are_flagged() -> None:
    """acompact-* sub-agent lines carry compaction; the compact summary is marked collapsed."""
    event = encoded(
        project_line(
            assistant(
                [{"type": "text", "text": "summary"}], isSidechain=True, agentId="acompact-1f2e"
            )
        )
    )
    assert (event["sidechain"], event["agentId"], event["compaction"]) == (
        True,
        "acompact-1f2e",
        True,
    )
    summary = encoded(project_line(user("This session is being continued…", isCompactSummary=True)))
    assert (summary["compactSummary"], summary["collapsed"]) == (True, True)


def test_ask_user_question_answers_are_surfaced() -> None:
    """AskUserQuestion's answers are lifted onto its tool_result block."""
    raw = user(
        [
            {
                "type": "tool_result",
                "tool_use_id": "t1",
                "content": 'Your questions have been answered: "Which color?"="Blue".',
            }
        ],
        toolUseResult={
            "questions": [{"question": "Which color?"}],
            "answers": {"Which color?": "Blue"},
        },
    )
    block = encoded(project_line(raw))["blocks"][0]
    assert (block["kind"], block["answers"]) == ("tool_result", {"Which color?": "Blue"})


@pytest.mark.parametrize(
    ("attachment", "text", "met"),
    [
        (
            {"type": "goal_status", "met": False, "sentinel": True, "condition": "tests pass"},
            "Goal set: tests pass",
            False,
        ),
        (
            {"type": "goal_status", "met": False, "condition": "tests pass", "reason": "2 fail"},
            "Goal not met yet: tests pass — 2 fail",
            False,
        ),
        (
            {"type": "goal_status", "met": True, "condition": "tests pass"},
            "Goal met: tests pass",
            True,
        ),
    ],
)
def test_goal_status_attachments_are_surfaced(
    attachment: dict[str, Any], text: str, met: bool
) -> None:
    """A /goal status attachment becomes a goal_status block with a readable text."""
    result = project_line(line("attachment", attachment=attachment))
    block = encoded(result)["blocks"][0]
    assert (block["kind"], block["text"], block["met"]) == ("goal_status", text, met)
    assert result.title is None and result.turn is None


def test_ansi_escapes_are_stripped_from_tool_results() -> None:
    """Bash output with colour codes reaches the tool_result text without them."""
    raw = user(
        [
            {
                "type": "tool_result",
                "tool_use_id": "t1",
                "content": "\x1b[32mPASS\x1b[0m 3 tests\x1b[K",
            }
        ]
    )
    assert encoded(project_line(raw))["blocks"][0]["text"] == "PASS 3 tests"


def test_no_empty_event_in_any_fixture_but_title_records() -> None:
    """Across every real transcript (CLI 1.0.98 to 2.1.332), a published event without
    blocks is a title record (shown as the session's name, never as a row)."""
    files = sorted((CLI.parent / "claude-jsonl").glob("*.jsonl")) + CLI_FILES
    empty: Counter[str] = Counter()
    for path in files:
        for _rec, result in _project(path):
            if result.event is not None and not result.event["blocks"]:
                empty[result.event["type"]] += 1
    assert set(empty) == {"ai-title"} and empty["ai-title"] == 11
