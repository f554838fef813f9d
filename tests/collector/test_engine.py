"""The collector engine on a real server: every line once, in order, whatever the file does."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from relaybus.shared.transcript import projection
from tests.conftest import FIXTURES, make_settings
from tests.support.collector_records import append, assistant_line, transcript, user_line
from tests.support.collector_rig import Rig, RigFactory
from tests.support.servers import RedisServer


@pytest.fixture
async def make_rig(
    each_server: RedisServer, namespace: str, claude_dir: Path
) -> AsyncIterator[RigFactory]:
    """Engines on every available server kind (redis-server and Valkey)."""
    rigs: list[Rig] = []

    def make(**overrides: Any) -> Rig:
        rig = Rig.build(make_settings(each_server.url, namespace, claude_dir, **overrides))
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        await rig.close()


def texts(frames: list[dict[str, Any]]) -> list[str]:
    out = []
    for f in frames:
        blocks = f["event"]["blocks"]
        out.append(blocks[0].get("text", "") if blocks else f["event"]["type"])
    return out


def published_count(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(
            1 for line in f if line.endswith(b"\n") and projection.project_line(line).publish
        )


async def test_every_fixture_line_is_published_once_in_order(
    make_rig: RigFactory, claude_dir: Path
) -> None:
    """Fixture transcripts (and a sub-agent file) appear line by line in their session streams."""
    rig = make_rig()
    await rig.engine.start()
    sids = {}
    for src in sorted(FIXTURES.glob("*.jsonl")):
        if "agent-" in src.name:
            continue
        sid = src.stem.split("__")[-1]
        sids[sid] = transcript(claude_dir, sid)
        shutil.copy(src, sids[sid])
    parent = "4d5611e5-241a-462a-8d15-5122611a9569"
    agent = sids[parent].parent / parent / "subagents" / "agent-a2898e3.jsonl"
    agent.parent.mkdir(parents=True)
    shutil.copy(FIXTURES / "marot__spotter__agent-a2898e3.jsonl", agent)
    await rig.engine.sync_all()

    for sid, path in sids.items():
        events = await rig.events(sid)
        expected = published_count(path) + (published_count(agent) if sid == parent else 0)
        assert len(events) == expected, sid  # title records are lines too; none is invented
        assert [f["sessionSeq"] for f in events] == list(range(1, len(events) + 1))
        seqs = [f["seqId"] for f in events]
        assert seqs == sorted(seqs)
        committed = await rig.client.hget(
            rig.keys.offsets("testhost"), path.relative_to(claude_dir).as_posix()
        )
        assert isinstance(committed, bytes) and int(committed.split(b":")[0]) == path.stat().st_size
    side = [f for f in await rig.events(parent) if f["event"].get("sidechain")]
    assert len(side) == published_count(agent)
    assert {f["event"]["agentId"] for f in side} == {"a2898e3"}
    assert await rig.client.exists(rig.keys.session("a2898e3")) == 0
    assert rig.metric("relaybus_collector_lines_dropped_total", reason="progress") > 0


async def test_bad_bytes_and_huge_lines_are_published_as_neutral_events(
    make_rig: RigFactory, claude_dir: Path
) -> None:
    """Non-UTF-8, malformed JSON and oversize lines become `unknown` events; nothing stops."""
    rig = make_rig(max_line_bytes=4096)
    await rig.engine.start()
    path = transcript(claude_dir, "s1")
    path.write_bytes(
        user_line("s1", "ok")
        + b"\xff\xfe\x00not utf8\n"
        + b"{broken json\n"
        + b'{"x":"'
        + b"y" * 100_000
        + b'"}\n'
        + assistant_line("s1", "still here")
    )
    await rig.engine.sync_path(path)
    events = [f["event"] for f in await rig.events("s1") if f["event"]["type"] != "ai-title"]
    assert [e["type"] for e in events] == ["user", "unknown", "unknown", "unknown", "assistant"]
    assert events[3]["oversize"] is True and events[3]["data"]["bytes"] == 100_008
    assert rig.metric("relaybus_collector_lines_malformed_total") == 2
    assert rig.metric("relaybus_collector_lines_read_total") == 5


async def test_partial_line_then_truncation_then_replacement(
    make_rig: RigFactory, claude_dir: Path
) -> None:
    """A partial line waits; a truncated or replaced file is read again from its start."""
    rig = make_rig()
    await rig.engine.start()
    path = transcript(claude_dir, "s1")
    line = user_line("s1", "one")
    path.write_bytes(line + line[:20])
    await rig.engine.sync_path(path)
    assert texts(await rig.events("s1"))[0] == "one"
    append(path, line[20:])
    await rig.engine.sync_path(path)
    assert texts(await rig.events("s1")).count("one") == 2

    path.write_bytes(user_line("s1", "after-truncate"))
    await rig.engine.sync_path(path)
    assert texts(await rig.events("s1"))[-1] == "after-truncate"

    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(user_line("s1", "r1") + user_line("s1", "r2") + user_line("s1", "r3"))
    os.replace(tmp, path)
    await rig.engine.sync_path(path)
    assert texts(await rig.events("s1"))[-3:] == ["r1", "r2", "r3"]
    path.unlink()
    await rig.engine.sync_all()
    assert rig.engine.files == {}


async def test_backfill_publishes_the_last_events_of_a_recent_file(
    make_rig: RigFactory, claude_dir: Path
) -> None:
    """A recent file seen for the first time publishes its last N events, then every new line."""
    path = transcript(claude_dir, "s1")
    path.write_bytes(
        b"".join(user_line("s1", f"q{i}") + assistant_line("s1", f"a{i}") for i in range(20))
    )
    rig = make_rig(backfill_events=5)
    await rig.engine.start()
    frames = await rig.events("s1")
    assert texts(frames) == ["a17", "q18", "a18", "q19", "a19"]
    append(path, user_line("s1", "new"))
    await rig.engine.sync_path(path)
    assert texts(await rig.events("s1"))[-1] == "new"
    assert len(await rig.events("s1")) == 6
    log = await rig.frames(rig.keys.log)
    assert [f["type"] for f in log][-2:] == ["session_event", "turn_status"]


async def test_old_file_is_registered_not_replayed(make_rig: RigFactory, claude_dir: Path) -> None:
    """A file older than the backfill window publishes nothing; once resumed, its history precedes the new lines."""
    path = transcript(claude_dir, "s1")
    path.write_bytes(user_line("s1", "ancient") + b'{"type":"future","content":')
    old = time.time() - 48 * 3600
    os.utime(path, (old, old))
    rig = make_rig(backfill_max_age_hours=24)
    await rig.engine.start()
    assert await rig.events("s1") == []
    committed = await rig.client.hget(
        rig.keys.offsets("testhost"), "projects/-home-dev-project/s1.jsonl"
    )
    assert isinstance(committed, bytes) and int(committed.split(b":")[0]) == len(
        user_line("s1", "ancient")
    )
    append(path, b'"x"}\n' + user_line("s1", "fresh"))
    await rig.engine.sync_path(path)
    frames = await rig.events("s1")
    assert [f["event"]["type"] for f in frames][:3] == ["user", "future", "user"]
    assert texts(frames)[0] == "ancient"  # the history, published once, before the new lines
    assert await rig.client.hget(rig.keys.session("s1"), "historyLoaded") == b"1"


async def test_a_collector_that_lost_a_reply_adopts_the_committed_offset(
    make_rig: RigFactory, claude_dir: Path
) -> None:
    """Two cursors at the same offset: the second is refused and catches up without duplicates."""
    path = transcript(claude_dir, "s1")
    rig_a, rig_b = make_rig(), make_rig()
    await rig_a.engine.start()
    await rig_b.engine.start()
    for i in range(3):
        append(path, user_line("s1", f"l{i}a") + user_line("s1", f"l{i}b"))
        first, second = (rig_a, rig_b) if i % 2 == 0 else (rig_b, rig_a)
        await first.engine.sync_path(path)
        await second.engine.sync_path(path)
    names = texts(await rig_a.events("s1"))
    assert names == ["l0a", "l0b", "l1a", "l1b", "l2a", "l2b"]


async def test_legacy_agent_sibling_goes_to_its_parent_session(
    make_rig: RigFactory, claude_dir: Path
) -> None:
    """agent-<id>.jsonl beside sessions: its lines join the parent (from sessionId) as sidechain."""
    rig = make_rig()
    await rig.engine.start()
    main = transcript(claude_dir, "p1")
    main.write_bytes(user_line("p1", "parent prompt"))
    agent = main.parent / "agent-x9.jsonl"
    agent.write_bytes(user_line("p1", "agent prompt", isSidechain=True, agentId="x9"))
    await rig.engine.sync_all()
    frames = await rig.events("p1")
    side = [f for f in frames if f["event"].get("sidechain")]
    assert texts(side) == ["agent prompt"] and side[0]["event"]["agentId"] == "x9"
    assert (await rig.client.hget(rig.keys.session("p1"), "firstPrompt")) == b"parent prompt"


async def test_data_loss_gets_a_new_epoch_and_recent_history(
    make_rig: RigFactory, claude_dir: Path
) -> None:
    """When the namespace's keys vanish, a new epoch is made and recent history republished."""
    rig = make_rig(backfill_events=3)
    await rig.engine.start()
    path = transcript(claude_dir, "s1")
    path.write_bytes(b"".join(user_line("s1", f"m{i}") for i in range(6)))
    await rig.engine.sync_path(path)
    old_epoch = rig.engine.pub.epoch
    async for key in rig.client.scan_iter(match=f"{rig.keys.prefix}*"):
        await rig.client.delete(key)
    assert await rig.engine.pub.epoch_changed()
    rig.engine.reset()
    await rig.engine.start()
    assert rig.engine.pub.epoch != old_epoch
    frames = await rig.events("s1")
    assert texts(frames) == ["m3", "m4", "m5"]
    assert frames[0]["seqId"] == 2  # 1 is session_started


async def test_a_replaced_copy_with_more_continues_where_it_was(
    make_rig: RigFactory, claude_dir: Path
) -> None:
    """A transcript replaced (new inode) by its own content plus more: only the new lines are
    published, and the committed offset names the new inode."""
    rig = make_rig()
    await rig.engine.start()
    path = transcript(claude_dir, "s1")
    path.write_bytes(user_line("s1", "q1") + assistant_line("s1", "a1"))
    await rig.engine.sync_path(path)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(path.read_bytes() + user_line("s1", "q2"))
    os.replace(tmp, path)
    await rig.engine.sync_path(path)
    assert texts(await rig.events("s1")) == ["q1", "a1", "q2"]
    committed = await rig.client.hget(
        rig.keys.offsets("testhost"), path.relative_to(claude_dir).as_posix()
    )
    st = path.stat()
    assert committed == f"{st.st_size}:{st.st_dev}:{st.st_ino}".encode()


async def test_a_replaced_file_with_other_content_is_announced(
    make_rig: RigFactory, claude_dir: Path
) -> None:
    """A transcript replaced by content that does not hold what was published is read again
    from its start after a ``relaybus_transcript_reset`` event saying so."""
    rig = make_rig()
    await rig.engine.start()
    path = transcript(claude_dir, "s1")
    path.write_bytes(user_line("s1", "q1") + assistant_line("s1", "a1"))
    await rig.engine.sync_path(path)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(user_line("s1", "other") + assistant_line("s1", "a1") + user_line("s1", "q2"))
    os.replace(tmp, path)
    await rig.engine.sync_path(path)
    events = [f["event"] for f in await rig.events("s1")]
    assert [e.get("subtype") for e in events[2:3]] == ["relaybus_transcript_reset"]
    assert events[2]["reason"].startswith("replaced")
    assert texts(await rig.events("s1"))[3:] == ["other", "a1", "q2"]
