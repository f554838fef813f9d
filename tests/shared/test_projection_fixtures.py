"""Projection over the real Claude Code transcripts in tests/data/claude-jsonl."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import orjson
import pytest

from relaybus.shared.transcript.projection import Projected, project_line

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "claude-jsonl"
FILES = sorted(FIXTURES.glob("*.jsonl"))
CUT_FILE = "marot__spotter__4d5611e5-241a-462a-8d15-5122611a9569.jsonl"


def _project(path: Path) -> list[Projected]:
    return [project_line(line) for line in path.read_bytes().splitlines(keepends=True)]


def test_fixture_files_present() -> None:
    """The six fixture transcripts are there (the other tests would pass vacuously)."""
    assert len(FILES) == 6


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name[:40])
def test_every_line_projects_and_serialises(path: Path) -> None:
    """Every fixture line projects without error to a well-formed, JSON-encodable result."""
    for result in _project(path):
        assert not result.malformed
        assert result.publish == (result.drop_reason is None)
        if result.publish:
            assert result.event is not None
            assert isinstance(result.event["type"], str)
            assert isinstance(result.event["blocks"], list)
            encoded = orjson.loads(orjson.dumps(result.event))
            assert isinstance(encoded["data"], dict)
        else:
            assert result.event is None


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name[:40])
def test_every_tool_block_pairs_with_its_result(path: Path) -> None:
    """Each tool block has exactly one tool_result by toolUseId (cut file: all but the last)."""
    tools: list[str] = []
    results: Counter[str] = Counter()
    for result in _project(path):
        for block in result.event["blocks"] if result.event else []:
            if block["kind"] == "tool":
                tools.append(block["toolUseId"])
            elif block["kind"] == "tool_result":
                results[block["toolUseId"]] += 1
    unpaired = [tid for tid in tools if results[tid] != 1]
    # The cut file ends mid-turn: its last Bash call has no result yet (see README).
    expected = [tools[-1]] if path.name == CUT_FILE else []
    assert unpaired == expected
    assert set(results) <= set(tools)


def test_fixture_drop_reasons_and_block_kinds() -> None:
    """Across all fixtures, bookkeeping is dropped by type and every block kind appears."""
    reasons: Counter[str | None] = Counter()
    kinds: Counter[str] = Counter()
    for path in FILES:
        for result in _project(path):
            reasons[result.drop_reason] += 1
            for block in result.event["blocks"] if result.event else []:
                kinds[block["kind"]] += 1
    assert reasons["progress"] == 560
    assert reasons["file-history-snapshot"] == 22
    assert reasons["queue-operation"] == 21
    assert reasons["summary"] == 1 and reasons["title"] == 0
    assert {"last-prompt", "mode", "permission-mode", "attachment", "meta"} <= set(reasons)
    assert {"text", "thinking", "tool", "tool_result", "image"} <= set(kinds)


def test_sub_agent_file_is_sidechain_with_agent_id() -> None:
    """The sub-agent transcript is all sidechain, carries its agent id and signals no turns."""
    results = _project(FIXTURES / "marot__spotter__agent-a2898e3.jsonl")
    published = [r for r in results if r.publish]
    assert published
    assert all(r.is_sidechain and r.agent_id == "a2898e3" for r in results)
    for r in published:
        assert r.event is not None
        assert r.event["sidechain"] is True
        assert r.event["agentId"] == "a2898e3"
    assert all(r.turn is None and r.title is None for r in results)


def test_tool_use_errors_are_dewrapped_in_fixture() -> None:
    """No tool_result text in any fixture still carries the <tool_use_error> wrapper."""
    errors = 0
    for path in FILES:
        for result in _project(path):
            for block in result.event["blocks"] if result.event else []:
                if block["kind"] == "tool_result":
                    assert "<tool_use_error>" not in block.get("text", "")
                    errors += block["isError"]
    assert errors >= 35


def test_compacted_session_titles_and_turns() -> None:
    """The compacted session yields ai-title candidates, prompt titles and balanced turns."""
    results = _project(FIXTURES / "tugtool__tugtool__0967f3f0-013d-4849-b967-4b66dc702146.jsonl")
    titles = [r.title for r in results if r.title]
    assert (3, "Generate fun fact about number one") in titles
    assert titles[0] == (1, "Say a one-sentence fun fact about the number 1.")
    turns = [r.turn for r in results if r.turn]
    assert turns[0] == "working"
    assert turns[-1] == "idle"
    summary = [r for r in results if r.event and r.event.get("compactSummary")]
    assert len(summary) == 1
    assert summary[0].turn is None
    assert summary[0].title is None


_ODD_VALUES: list[object] = [
    None,
    True,
    0,
    -1,
    1.5,
    "",
    "x" * 70_000,
    [],
    {},
    [None],
    {"": None},
    "<tool_use_error>",
    "<command-name>",
    "[Request interrupted by user",
    "2026-13-45T99:99:99.999Z",
]


def _deep() -> object:
    value: object = {}
    for _ in range(300):
        value = {"d": [value]}
    return value


def _mutations(rec: object, rng: random.Random) -> object:
    """``rec`` with one value somewhere replaced by an odd one (wrong type, huge, deep)."""
    if isinstance(rec, dict) and rec:
        key = rng.choice(list(rec))
        out = dict(rec)
        out[key] = _mutations(rec[key], rng) if rng.random() < 0.6 else rng.choice(_ODD_VALUES)
        return out
    if isinstance(rec, list) and rec:
        i = rng.randrange(len(rec))
        return [*rec[:i], _mutations(rec[i], rng), *rec[i + 1 :]]
    return _deep() if rng.random() < 0.05 else rng.choice(_ODD_VALUES)


def test_mutated_fixture_lines_never_raise_and_always_encode() -> None:
    """Fixture lines with odd values anywhere project without error and the event encodes."""
    rng = random.Random(20261130)
    lines = [line for path in FILES for line in path.read_bytes().splitlines()]
    checked = 0
    for raw in rng.sample(lines, 400):
        rec = orjson.loads(raw)
        for _ in range(5):
            try:
                mutated = orjson.dumps(_mutations(rec, rng))
            except TypeError:  # too deep for orjson to write: not a line Claude Code can produce
                continue
            result = project_line(mutated)
            if result.event is not None:
                assert len(orjson.dumps(result.event)) < 4 * 16_384 + 2 * 65_536 + 10_000
            checked += 1
    assert checked > 1500


def test_signature_only_thinking_is_kept_empty() -> None:
    """The 17 signature-only thinking items of the basic session stay as empty thinking blocks."""
    results = _project(FIXTURES / "tugtool__tugtool__session-transcript-basic.jsonl")
    thinking = [
        block
        for result in results
        for block in (result.event["blocks"] if result.event else [])
        if block["kind"] == "thinking"
    ]
    assert len(thinking) == 17
    assert all(block["text"] == "" for block in thinking)
