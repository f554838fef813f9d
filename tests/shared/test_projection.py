"""Projection rules: drops, titles, turn signals, record facts, data, malformed lines."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from relaybus.shared.transcript.projection import RULES, Projected, oversize_line, project_line

SID = "5e551011-0000-4000-8000-000000000001"


def line(rtype: str, **fields: Any) -> bytes:
    rec = {
        "type": rtype,
        "sessionId": SID,
        "cwd": "/home/u/my.project",
        "entrypoint": "cli",
        "isSidechain": False,
        "timestamp": "2026-02-12T16:02:25.227Z",
        "uuid": "u-1",
        **fields,
    }
    return orjson.dumps(rec) + b"\n"


def user(content: Any, **fields: Any) -> bytes:
    return line("user", message={"role": "user", "content": content}, **fields)


def assistant(content: list[dict[str, Any]], stop: str | None = None, **fields: Any) -> bytes:
    message = {"id": "msg_1", "role": "assistant", "content": content, "stop_reason": stop}
    return line("assistant", message=message, **fields)


def encoded(result: Projected) -> dict[str, Any]:
    assert result.event is not None
    decoded: dict[str, Any] = orjson.loads(orjson.dumps(result.event))
    return decoded


def test_record_facts_are_lifted() -> None:
    """sessionId, cwd (as written, never decoded), entrypoint and the timestamp in ms come out."""
    result = project_line(user("hello"))
    assert result.session_id == SID
    assert result.cwd == "/home/u/my.project"
    assert result.entrypoint == "cli"
    assert result.timestamp_ms == 1770912145227
    assert not result.is_sidechain
    assert result.agent_id is None
    assert not result.malformed


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (line("progress", data={"type": "hook_progress"}), "progress"),
        (line("file-history-snapshot", snapshot={}), "file-history-snapshot"),
        (line("queue-operation", operation="enqueue", content="<task-…>"), "queue-operation"),
        (line("last-prompt", lastPrompt="x"), "last-prompt"),
        (line("mode", mode="normal"), "mode"),
        (line("permission-mode", permissionMode="default"), "permission-mode"),
        (line("cost-state", costUSD=1.5), "cost-state"),
        (line("attachment", attachment={"type": "skill_listing", "content": "…"}), "attachment"),
        (line("attachment", attachment={"type": "deferred_tools_delta"}), "attachment"),
        (user("expanded skill prompt", isMeta=True), "meta"),
        (user("<local-command-caveat>Caveat: …</local-command-caveat>"), "meta"),
        (line("system", subtype="turn_duration", durationMs=5), "turn-duration"),
        (line("system", subtype="stop_hook_summary", hookCount=1), "stop-hook-summary"),
        (line("summary", summary="A summary", leafUuid="u-0"), "summary"),
        (line("api-request", params={"model": "m"}), "api-request"),
        (line("api-request-shape", shape={"tools": []}), "api-request-shape"),
        (line("api-request-blob", message={"role": "user", "content": "x"}), "api-request-blob"),
        (line("atis-latch", atis=""), "atis-latch"),
        (line("tools-used", tools=["Bash"]), "tools-used"),
        (line("file-history-delta", delta={}), "file-history-delta"),
        (user("Warmup", isSidechain=True, parentUuid=None), "warmup"),
        (b"\n", "blank"),
    ],
)
def test_bookkeeping_is_dropped_with_reason(raw: bytes, reason: str) -> None:
    """Bookkeeping lines are not published and say why (the collector counts the reason)."""
    result = project_line(raw)
    assert not result.publish
    assert result.drop_reason == reason
    assert result.event is None


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (
            line(
                "system",
                subtype="local_command",
                content="<command-name>/model</command-name>\n"
                "<command-message>model</command-message>\n<command-args></command-args>",
            ),
            "/model",
        ),
        (
            line("system", subtype="compact_boundary", content="Conversation compacted"),
            "Conversation compacted",
        ),
        (line("system", subtype="away_summary", content="Goal: ship it."), "Goal: ship it."),
        (line("system", subtype="some_future_subtype", content="news"), "news"),
    ],
)
def test_system_content_is_published_as_text(raw: bytes, text: str) -> None:
    """System lines a person wants to see are published with their content as a text block."""
    event = encoded(project_line(raw))
    assert event["type"] == "system"
    assert event["blocks"] == [{"kind": "text", "text": text}]
    assert event["subtype"]


def test_every_rule_key_names_its_type() -> None:
    """The rule table is keyed by record type, refined as type/detail."""
    for key, rule in RULES.items():
        assert key.split("/")[0] in RULES
        assert rule.drop is None or rule.drop


def test_unknown_record_type_with_content_passes_through_neutral() -> None:
    """An unknown record type that may hold something to show is published, no blocks."""
    result = project_line(line("pr-link", prUrl="https://example.invalid/pr/1", content="PR #1"))
    assert result.publish
    event = encoded(result)
    assert event["type"] == "pr-link"
    assert event["blocks"] == []
    assert event["data"]["prUrl"] == "https://example.invalid/pr/1"
    assert project_line(line("future", message={"role": "user", "content": []})).publish


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (line("pr-link", prUrl="https://example.invalid/pr/1"), "pr-link"),
        (line("Weird Type!", content="  "), "weird-type-"),
        (line("x" * 100), "x" * 40),
        (b'{"hello": 1}\n', "unknown"),
        (line("system", subtype="agents_killed"), "system-agents_killed"),
    ],
)
def test_unknown_bookkeeping_is_dropped_under_its_type(raw: bytes, reason: str) -> None:
    """A type nobody knows, with no message and nothing displayable, is dropped: the reason is
    its type as a bounded label (40 characters of [a-z0-9_-])."""
    result = project_line(raw)
    assert (result.publish, result.drop_reason, result.event) == (False, reason, None)
    assert not result.malformed


@pytest.mark.parametrize(
    "raw", [b"{not json\n", b'\xff\xfe{"type":"user"}\n', b"[1, 2]\n", b'"a string"\n', b"42"]
)
def test_malformed_lines_become_unknown_events(raw: bytes) -> None:
    """Non-JSON, non-UTF-8 and non-object lines are published as "unknown" and flagged."""
    result = project_line(raw)
    assert result.malformed
    assert result.publish
    event = encoded(result)
    assert event["type"] == "unknown"
    assert event["blocks"] == []
    assert event["data"] == {"type": "unknown", "malformed": True, "bytes": len(raw.rstrip(b"\n"))}


@pytest.mark.parametrize(
    ("raw", "rank", "text"),
    [
        (line("custom-title", customTitle="Mine"), 5, "Mine"),
        (line("agent-name", agentName="reviewer"), 4, "reviewer"),
        (line("ai-title", aiTitle="Fix the parser"), 3, "Fix the parser"),
        (line("summary", summary="Old summary", leafUuid="x"), 2, "Old summary"),
        (user("  Make the\n\ntests   pass  "), 1, "Make the tests pass"),
        (
            user([{"type": "text", "text": "With a picture"}, {"type": "image", "source": {}}]),
            1,
            "With a picture",
        ),
        (
            user(
                "<command-message>orchestrator is running…</command-message>\n<command-name>"
                "/orchestrator</command-name>\n<command-args>build it</command-args>"
            ),
            0,
            "/orchestrator build it",
        ),
    ],
)
def test_title_candidates_with_ranks(raw: bytes, rank: int, text: str) -> None:
    """Title records and real prompts give (rank, text) candidates, whitespace collapsed."""
    assert project_line(raw).title == (rank, text)


@pytest.mark.parametrize(
    "raw",
    [
        user("sub-agent task prompt", isSidechain=True),
        user("[Request interrupted by user]"),
        user("This session is being continued…", isCompactSummary=True),
        user("<command-name>/clear</command-name>\n<command-args></command-args>"),
        user([{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]),
        user("<local-command-stdout>Compacted</local-command-stdout>"),
        line("custom-title", customTitle="   "),
        assistant([{"type": "text", "text": "an answer"}], stop="end_turn"),
    ],
)
def test_lines_that_are_no_title(raw: bytes) -> None:
    """Sidechain prompts, interrupts, summaries, bare commands, results and blanks give no title."""
    assert project_line(raw).title is None


def test_long_prompt_title_is_bounded() -> None:
    """A rank-1 title is cut to 200 characters."""
    title = project_line(user("word " * 10_000)).title
    assert title is not None
    assert title[0] == 1
    assert len(title[1]) == 200


@pytest.mark.parametrize(
    ("raw", "turn"),
    [
        (user("please fix it"), "working"),
        (user([{"type": "text", "text": "look"}, {"type": "image", "source": {}}]), "working"),
        (user("<command-name>/compact</command-name>"), "working"),
        (user("<local-command-stdout>Compacted </local-command-stdout>"), "idle"),
        (user([{"type": "text", "text": "[Request interrupted by user for tool use]"}]), "idle"),
        (user("[Request interrupted by user]"), "idle"),
        (line("system", subtype="turn_duration", durationMs=5), "idle"),
        (assistant([{"type": "text", "text": "done"}], stop="end_turn"), "idle"),
        (assistant([{"type": "text", "text": "done"}], stop="stop_sequence"), "idle"),
        (assistant([{"type": "text", "text": "done"}], stop="max_tokens"), "idle"),
        (assistant([{"type": "text", "text": "no"}], stop="refusal"), "idle"),
        (assistant([{"type": "text", "text": "…"}], stop=None), None),
        (
            assistant(
                [{"type": "tool_use", "id": "t", "name": "Bash", "input": {}}], stop="tool_use"
            ),
            None,
        ),
        (user([{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]), None),
        (user("expanded", isMeta=True), None),
        (user("sub-agent prompt", isSidechain=True), None),
        (assistant([{"type": "text", "text": "ok"}], stop="end_turn", isSidechain=True), None),
        (user("summary", isCompactSummary=True), None),
    ],
)
def test_turn_signals(raw: bytes, turn: str | None) -> None:
    """Real prompts start a turn; terminal stops, turn_duration and interrupts end it."""
    assert project_line(raw).turn == turn


def test_meta_lines_dropped_even_when_they_look_like_prompts() -> None:
    """An isMeta user line is neither published nor a prompt."""
    result = project_line(user("Split complex tasks…", isMeta=True))
    assert (result.publish, result.turn, result.title) == (False, None, None)


def test_command_and_output_lines_are_shown_clean() -> None:
    """Slash commands and their local output are published as plain text, tags removed."""
    command = encoded(
        project_line(
            user(
                "<command-name>/compact</command-name>\n  <command-message>compact</command-message>\n"
                "  <command-args></command-args>"
            )
        )
    )
    assert command["blocks"] == [{"kind": "text", "text": "/compact"}]
    output = encoded(project_line(user("<local-command-stdout>Compacted </local-command-stdout>")))
    assert output["blocks"] == [{"kind": "text", "text": "Compacted"}]
    bash = encoded(project_line(user("<bash-input>ls -la</bash-input>")))
    assert bash["blocks"] == [{"kind": "text", "text": "! ls -la"}]


def test_compact_summary_is_published_and_marked() -> None:
    """The compaction summary is content: a text block on an event marked compactSummary."""
    event = encoded(project_line(user("This session is being continued…", isCompactSummary=True)))
    assert event["compactSummary"] is True
    assert event["blocks"] == [{"kind": "text", "text": "This session is being continued…"}]


def test_data_is_the_raw_line_when_small() -> None:
    """``data`` is the raw line itself (an orjson Fragment, no re-encoding) up to the cap."""
    raw = user("hi")
    result = project_line(raw)
    assert result.event is not None
    assert isinstance(result.event["data"], orjson.Fragment)
    assert encoded(result)["data"] == orjson.loads(raw)


def test_data_above_cap_is_a_stand_in() -> None:
    """Above data_max_bytes, ``data`` is a small stand-in giving type and size."""
    raw = user("x" * 5000)
    event = encoded(project_line(raw, data_max_bytes=1000))
    assert event["data"] == {"type": "user", "truncated": True, "bytes": len(raw) - 1}
    assert event["blocks"][0]["text"] == "x" * 5000


def test_sidechain_events_are_marked() -> None:
    """Sidechain lines carry sidechain and agentId on the event and in the result."""
    raw = assistant([{"type": "text", "text": "x"}], isSidechain=True, agentId="a1")
    result = project_line(raw)
    assert result.is_sidechain and result.agent_id == "a1"
    event = encoded(result)
    assert event["sidechain"] is True
    assert event["agentId"] == "a1"
    legacy = encoded(project_line(user("inline task prompt", isSidechain=True)))
    assert legacy["sidechain"] is True
    assert "agentId" not in legacy


def test_assistant_event_carries_message_id() -> None:
    """Split lines of one API message share ``messageId`` so clients can group them."""
    event = encoded(project_line(assistant([{"type": "text", "text": "x"}])))
    assert event["messageId"] == "msg_1"
    assert event["uuid"] == "u-1"


def test_oversize_line_stand_in() -> None:
    """A line above the collector's cap becomes a published "unknown" stand-in with its size."""
    result = oversize_line(5_000_000)
    assert result.publish and not result.malformed
    event = encoded(result)
    assert event["type"] == "unknown"
    assert event["blocks"] == []
    assert event["data"] == {"type": "unknown", "truncated": True, "bytes": 5_000_000}


@pytest.mark.parametrize("stamp", ["2026-02-12T16:02:25.227+00:00", "2026-02-12T16:02:25.227"])
def test_timestamp_forms(stamp: str) -> None:
    """Offsets and naive (UTC) timestamps parse to the same epoch ms; junk gives None."""
    assert project_line(user("x", timestamp=stamp)).timestamp_ms == 1770912145227
    assert project_line(user("x", timestamp="yesterday")).timestamp_ms is None


def test_text_beside_a_tool_result_is_no_prompt() -> None:
    """A user line holding a tool_result and extra text neither starts a turn nor titles."""
    result = project_line(
        user(
            [
                {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                {"type": "text", "text": "hook says hi"},
            ]
        )
    )
    assert (result.turn, result.title) == (None, None)
    assert [b["kind"] for b in encoded(result)["blocks"]] == ["tool_result", "text"]


def test_ide_context_blocks_are_not_the_title() -> None:
    """IDE context text before the typed prompt is published but the prompt is the title."""
    result = project_line(
        user(
            [
                {"type": "text", "text": "<ide_opened_file>The user opened a.py</ide_opened_file>"},
                {"type": "text", "text": "explain this file"},
            ]
        )
    )
    assert result.title == (1, "explain this file")
    assert result.turn == "working"
    assert len(encoded(result)["blocks"]) == 2


def test_fast_path_objects_equal_constructed_ones() -> None:
    """Results built on the fast path compare equal to ones built by the dataclass."""
    result = project_line(line("mode", mode="normal"))
    expected = Projected(
        False,
        "mode",
        None,
        SID,
        "/home/u/my.project",
        "cli",
        1770912145227,
        False,
        None,
        None,
        None,
        False,
    )
    assert result == expected


def test_fixture_timestamps_match_fromisoformat() -> None:
    """The cached-minute timestamp path agrees with datetime.fromisoformat on every fixture line."""
    fixtures = Path(__file__).resolve().parents[1] / "data" / "claude-jsonl"
    checked = 0
    for path in sorted(fixtures.glob("*.jsonl")):
        for raw in path.read_bytes().splitlines():
            stamp = orjson.loads(raw).get("timestamp")
            if isinstance(stamp, str):
                expected = round(datetime.fromisoformat(stamp).timestamp() * 1000)
                assert project_line(raw).timestamp_ms == expected
                checked += 1
    assert checked > 1000


@pytest.mark.parametrize("stamp", ["2026-02-12T16:02:2x.227Z", "2026-02-12T16:02:²5.227Z"])
def test_odd_timestamps_do_not_raise(stamp: str) -> None:
    """Timestamps in the usual shape but with junk digits give None, never an exception."""
    assert project_line(user("x", timestamp=stamp)).timestamp_ms is None


def test_task_notification_delivered_as_user_line() -> None:
    """Older CLIs deliver a task notification as a user line: a notification, never a title."""
    text = "<task-notification>\n<status>completed</status>\n<summary>Tests passed</summary>\n"
    result = project_line(user(text + "</task-notification>"))
    assert result.title is None
    assert result.turn == "working"
    [block] = encoded(result)["blocks"]
    assert block["kind"] == "notification"
    assert block["source"] == "task-notification"
    assert block["summary"] == "Tests passed"
