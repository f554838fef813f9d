"""What a phone sees, end to end through a real collector and server: real CLI transcripts
publish content only, sub-agents by id after their Task, titles only from title records."""

from __future__ import annotations

import logging
import re
import shutil
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.collector_records import append, transcript, user_line
from tests.support.collector_rig import RigFactory

CLI = Path(__file__).resolve().parents[1] / "data" / "claude-cli-2.1.332"
JSONL = Path(__file__).resolve().parents[1] / "data" / "claude-jsonl"
PRINT_SID = "5bbaef86-2e70-4548-8aa6-91403e6659d5"
AGENT = "aea44ec78cd97dba1"
PARENT_TOOL = "toolu_fake050a927951044cada8c2"  # the .meta.json's toolUseId


def line(rec: dict[str, Any]) -> bytes:
    return orjson.dumps(rec) + b"\n"


def copy_print_run(claude_dir: Path) -> Path:
    """The real `-p` run with its sub-agent folder (transcript + .meta.json)."""
    main = transcript(claude_dir, PRINT_SID)
    shutil.copy(CLI / "print-tools" / f"{PRINT_SID}.jsonl", main)
    shutil.copytree(CLI / "print-tools" / PRINT_SID, main.parent / PRINT_SID)
    return main


async def test_backfill_of_a_real_run_publishes_content_task_first_subagent_by_id(
    make_rig: RigFactory, claude_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A real 2.1.332 run found at start: no bookkeeping event, the main transcript before its
    sub-agent, whose events name their agent and the Agent call that started it."""
    copy_print_run(claude_dir)
    rig = make_rig(backfill_events=1000)
    with caplog.at_level(logging.INFO, logger="relaybus.collector.metrics"):
        await rig.engine.start()
    frames = await rig.events(PRINT_SID)
    assert frames and all(f["event"]["blocks"] for f in frames)
    assert {f["event"]["type"] for f in frames} == {"user", "assistant"}
    side = [f for f in frames if f["event"].get("sidechain")]
    main = [f for f in frames if not f["event"].get("sidechain")]
    assert len(side) == 5 and len(main) == 21
    assert max(f["seqId"] for f in main) < min(f["seqId"] for f in side)
    assert all(f["event"]["agentId"] == AGENT for f in side)
    assert all(f["event"]["parentToolUseId"] == PARENT_TOOL for f in side)
    blocks = [b for f in main for b in f["event"]["blocks"]]
    agent_call = next(b for b in blocks if b["kind"] == "tool" and b["name"] == "Agent")
    result = next(
        b
        for b in blocks
        if b.get("toolUseId") == agent_call["toolUseId"] and b["kind"] == "tool_result"
    )
    assert agent_call["toolUseId"] == PARENT_TOOL and result["agentId"] == AGENT
    assert rig.metric("relaybus_collector_lines_dropped_total", reason="api-request") == 10
    noted = [r.getMessage() for r in caplog.records if "'api-request'" in r.getMessage()]
    assert len(noted) == 1


async def test_drop_reasons_are_bounded(make_rig: RigFactory, claude_dir: Path) -> None:
    """Hundreds of unknown bookkeeping types use at most 64 labels plus "other"."""
    rig = make_rig()
    await rig.engine.start()
    path = transcript(claude_dir, "s1")
    append(path, b"".join(line({"type": f"kind-{i}", "sessionId": "s1"}) for i in range(100)))
    await rig.engine.sync_path(path)
    samples = [
        s
        for m in rig.metrics.registry.collect()
        for s in m.samples
        if s.name == "relaybus_collector_lines_dropped_total"
    ]
    assert len(samples) == 65
    assert rig.metric("relaybus_collector_lines_dropped_total", reason="other") == 36
    assert await rig.events("s1") == []


async def test_titles_come_only_from_title_records(make_rig: RigFactory, claude_dir: Path) -> None:
    """The first prompt is firstPrompt; a summary of another session is no title; an ai-title
    is published as written and announced with session_updated; custom-title stays."""
    rig = make_rig()
    await rig.engine.start()
    path = transcript(claude_dir, "s1")
    foreign = line({"type": "summary", "summary": "Other session", "leafUuid": "elsewhere"})
    own = line({"type": "summary", "summary": "Own work", "leafUuid": "u-own"})
    append(path, foreign + own + user_line("s1", "please fix it"))
    await rig.engine.sync_path(path)
    h = await rig.client.hgetall(rig.keys.session("s1"))
    assert h[b"firstPrompt"] == b"please fix it" and b"title" not in h
    append(path, user_line("s1", "more", uuid="u-own"))
    await rig.engine.sync_path(path)
    assert await rig.client.hget(rig.keys.session("s1"), "title") == b"Own work"
    append(path, line({"type": "ai-title", "aiTitle": "Fixing it", "sessionId": "s1"}))
    append(path, line({"type": "custom-title", "customTitle": "Mine", "sessionId": "s1"}))
    append(path, line({"type": "ai-title", "aiTitle": "Later AI", "sessionId": "s1"}))
    await rig.engine.sync_path(path)
    assert await rig.client.hget(rig.keys.session("s1"), "title") == b"Mine"
    events = [f["event"] for f in await rig.events("s1")]
    titles = [(e["type"], e["data"]) for e in events if e["type"] not in {"user", "assistant"}]
    assert titles == [
        ("ai-title", {"type": "ai-title", "aiTitle": "Fixing it", "sessionId": "s1"}),
        ("custom-title", {"type": "custom-title", "customTitle": "Mine", "sessionId": "s1"}),
        ("ai-title", {"type": "ai-title", "aiTitle": "Later AI", "sessionId": "s1"}),
    ]
    updates = [f for f in await rig.frames(rig.keys.log) if f["type"] == "session_updated"]
    assert [u["session"].get("title") for u in updates] == ["Own work", "Mine"]
    assert updates[-1]["session"]["firstPrompt"] == "please fix it"
    assert updates[-1]["session"]["live"] is True and updates[-1]["sessionId"] == "s1"


async def test_cwd_learned_later_is_announced(make_rig: RigFactory, claude_dir: Path) -> None:
    """Current CLIs begin with lines carrying no cwd: whatever starts the session, clients
    learn its cwd and entrypoint (session_started, or session_updated right after)."""
    rig = make_rig()
    await rig.engine.start()
    src = (CLI / "interactive-tmux" / "5c1de74c-e5ce-48cf-94e6-491b2115c20b.jsonl").read_bytes()
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()).encode()
    src = re.sub(rb'"timestamp":"[^"]*"', b'"timestamp":"' + now + b'"', src)  # recent lines
    lines = src.splitlines(keepends=True)
    path = transcript(claude_dir, "5c1de74c-e5ce-48cf-94e6-491b2115c20b")
    append(path, b"".join(lines[:4]))  # mode, permission-mode, atis-latch, snapshot: no cwd
    await rig.engine.sync_path(path)
    append(path, b"".join(lines[4:]))
    await rig.engine.sync_path(path)
    log = await rig.frames(rig.keys.log)
    infos = [
        {"cwd": f["cwd"], "entrypoint": f["entrypoint"]}
        if f["type"] == "session_started"
        else f["session"]
        for f in log
        if f["type"] in {"session_started", "session_updated"}
    ]
    assert infos and (infos[-1]["cwd"], infos[-1]["entrypoint"]) == ("/home/dev/proj", "cli")


async def test_warmup_agents_are_not_published(make_rig: RigFactory, claude_dir: Path) -> None:
    """A 2.0.x cache warm-up sub-agent (prompt "Warmup") publishes nothing; a real one does."""
    rig = make_rig()
    await rig.engine.start()
    main = transcript(claude_dir, "p1")
    append(main, user_line("p1", "parent prompt"))
    warm = main.parent / "agent-w1.jsonl"
    base = {"sessionId": "p1", "isSidechain": True, "agentId": "w1", "cwd": "/home/dev/project"}
    append(
        warm,
        line(
            {
                **base,
                "type": "user",
                "parentUuid": None,
                "uuid": "w-a",
                "message": {"role": "user", "content": "Warmup"},
            }
        ),
    )
    append(
        warm,
        line(
            {
                **base,
                "type": "assistant",
                "parentUuid": "w-a",
                "uuid": "w-b",
                "message": {
                    "id": "m",
                    "role": "assistant",
                    "content": [{"type": "text", "text": "Ready to help."}],
                },
            }
        ),
    )
    real = main.parent / "agent-r1.jsonl"
    append(real, user_line("p1", "real task", isSidechain=True, agentId="r1", parentUuid=None))
    await rig.engine.sync_all()
    side = [f["event"] for f in await rig.events("p1") if f["event"].get("sidechain")]
    assert [e["agentId"] for e in side] == ["r1"]
    assert rig.metric("relaybus_collector_lines_dropped_total", reason="warmup") == 2


async def test_has_content_is_the_listing_verdict(make_rig: RigFactory, claude_dir: Path) -> None:
    """A session of /goal status lines and title records only is hasContent 0; a prompt makes 1."""
    rig = make_rig()
    await rig.engine.start()
    path = transcript(claude_dir, "g1")
    goal = {
        "type": "attachment",
        "sessionId": "g1",
        "cwd": "/home/dev/project",
        "attachment": {
            "type": "goal_status",
            "met": False,
            "sentinel": True,
            "condition": "tests pass",
        },
    }
    append(path, line(goal) + line({"type": "ai-title", "aiTitle": "T", "sessionId": "g1"}))
    await rig.engine.sync_path(path)
    assert len(await rig.events("g1")) == 2
    assert await rig.client.hget(rig.keys.session("g1"), "hasContent") == b"0"
    append(path, user_line("g1", "now work"))
    await rig.engine.sync_path(path)
    assert await rig.client.hget(rig.keys.session("g1"), "hasContent") == b"1"


async def test_legacy_sub_agent_is_linked_through_progress_lines(
    make_rig: RigFactory, claude_dir: Path
) -> None:
    """CLI 2.1.39 writes no .meta.json: the main transcript's agent_progress lines link the
    sub-agent to its Task call, and its events carry that parentToolUseId."""
    sid = "4d5611e5-241a-462a-8d15-5122611a9569"
    main = transcript(claude_dir, sid)
    shutil.copy(JSONL / f"marot__spotter__{sid}.jsonl", main)
    (main.parent / sid / "subagents").mkdir(parents=True)
    shutil.copy(
        JSONL / "marot__spotter__agent-a2898e3.jsonl",
        main.parent / sid / "subagents" / "agent-a2898e3.jsonl",
    )
    rig = make_rig(backfill_events=2000)
    await rig.engine.start()
    frames = await rig.events(sid)
    side = [f["event"] for f in frames if f["event"].get("sidechain")]
    tasks = [
        b
        for f in frames
        for b in f["event"]["blocks"]
        if b["kind"] == "tool" and b["name"] == "Task"
    ]
    assert side and {e["parentToolUseId"] for e in side} == {"toolu_017pLRuPHYTX5t99EnLyV53m"}
    assert "toolu_017pLRuPHYTX5t99EnLyV53m" in [t["toolUseId"] for t in tasks]
    result = next(b for f in frames for b in f["event"]["blocks"] if b.get("agentId") == "a2898e3")
    assert (result["kind"], result["toolUseId"]) == (
        "tool_result",
        "toolu_017pLRuPHYTX5t99EnLyV53m",
    )
