"""Transcript paths map to sessions; sub-agent files to their parent session."""

from __future__ import annotations

from pathlib import Path

from relaybus.collector.paths import TranscriptPath, classify

ROOT = Path("/c")


def test_main_transcript() -> None:
    """projects/<enc>/<sid>.jsonl is session <sid>, keyed relative to the claude dir."""
    got = classify(ROOT, ROOT / "projects/-home-x/abc-1.jsonl")
    assert got == TranscriptPath("projects/-home-x/abc-1.jsonl", "abc-1", None)


def test_subagent_transcript_belongs_to_its_parent() -> None:
    """<sid>/subagents/agent-<id>.jsonl goes to <sid>, marked with the agent id."""
    got = classify(ROOT, ROOT / "projects/-home-x/abc-1/subagents/agent-a28.jsonl")
    assert got == TranscriptPath("projects/-home-x/abc-1/subagents/agent-a28.jsonl", "abc-1", "a28")


def test_legacy_agent_sibling_has_its_session_resolved_later() -> None:
    """agent-<id>.jsonl next to sessions: the parent comes from its records."""
    got = classify(ROOT, ROOT / "projects/-home-x/agent-77.jsonl")
    assert got == TranscriptPath("projects/-home-x/agent-77.jsonl", None, "77")


def test_other_files_are_not_transcripts() -> None:
    """Anything else under the claude dir is ignored."""
    for p in [
        "projects/-x/notes.txt",
        "projects/-x/a/b/c.jsonl",
        "todos/x.jsonl",
        "projects/x.jsonl",
        "projects/-x/.jsonl",
    ]:
        assert classify(ROOT, ROOT / p) is None, p
    assert classify(ROOT, Path("/elsewhere/projects/-x/s.jsonl")) is None


def test_names_outside_the_session_id_shape_are_not_transcripts() -> None:
    """Ids that would splice Redis keys, read as options or escape a path are refused."""
    for p in [
        "projects/-x/abc:events.jsonl",
        "projects/-x/--dangerously-skip-permissions.jsonl",
        "projects/-x/-r.jsonl",
        "projects/-x/a b.jsonl",
        "projects/-x/" + "a" * 65 + ".jsonl",
        "projects/-x/agent-x:y.jsonl",
        "projects/-x/s:1/subagents/agent-a.jsonl",
        "projects/-x/s1/subagents/agent-.jsonl",
    ]:
        assert classify(ROOT, ROOT / p) is None, p
    uuid_name = "projects/-x/5c1de74c-e5ce-48cf-94e6-491b2115c20b.jsonl"
    assert classify(ROOT, ROOT / uuid_name) is not None
