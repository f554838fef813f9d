"""What the real CLI 2.1.332 wrote, replayed with its timing into a real collector."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import redis

from relaybus.collector import backfill
from relaybus.shared.store.keys import Keys
from tests.support.cli_replay import DATA, Replay, timeline, write_transcript_live
from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import frames_of
from tests.support.servers import RedisServer
from tests.support.wait import poll


def _session_frames(client: redis.Redis, keys: Keys, sid: str) -> list[dict[str, Any]]:
    return [f for f in frames_of(client, keys.log) if f.get("sessionId") == sid]


def test_replayed_runs_start_once_turn_once_and_end_after_exit(
    server: RedisServer, namespace: str, claude_dir: Path
) -> None:
    """Two real runs: each one session_started, one working then idle, ended within 2 s of exit."""
    keys = Keys(namespace)
    client = server.client()
    replay = Replay(claude_dir)
    proc = CollectorProc(redis_url=server.url, namespace=namespace, claude_dir=claude_dir)
    try:
        proc.start()
        replay.run()
        ended = poll(
            lambda: client.hget(keys.session(replay.sid), "live") == b"0" and time.monotonic(),
            timeout_s=10,
        )
        assert ended - replay.exits[-1] < 2.0
        frames = _session_frames(client, keys, replay.sid)
        life = [
            (f["type"], f.get("state") or f.get("reason") or "")
            for f in frames
            if f["type"] in ("session_started", "session_ended", "turn_status")
        ]
        assert life == [
            ("session_started", ""),
            ("turn_status", "working"),
            ("turn_status", "idle"),
            ("session_ended", "exit"),
            ("session_started", ""),
            ("turn_status", "working"),
            ("turn_status", "idle"),
            ("session_ended", "exit"),
        ]
        events = [f for f in frames if f["type"] == "session_event"]
        main_lines = [
            e
            for e in timeline()
            if e["what"] == "line" and e["rec"].startswith(("user", "assistant"))
        ]
        assert len([e for e in events if e["event"]["type"] in ("user", "assistant")]) == len(
            main_lines
        )
        uuids = [e["event"].get("uuid") for e in events if e["event"].get("uuid")]
        assert len(uuids) == len(set(uuids))  # every line once
    finally:
        proc.stop()
        replay.close()
        client.close()


@pytest.mark.parametrize(
    ("folder", "prompts"),
    [("print-tools", 2), ("print-approval", 3), ("interactive-tmux", 3)],
)
def test_real_transcripts_give_one_working_then_idle_per_prompt(
    server: RedisServer, namespace: str, claude_dir: Path, folder: str, prompts: int
) -> None:
    """The CLI's own transcripts, written line by line: each prompt one working then idle."""
    keys = Keys(namespace)
    src = next((DATA / folder).glob("*-*-*-*-*.jsonl"))
    sid = src.stem
    dest = claude_dir / "projects" / "-home-dev-proj" / src.name
    client = server.client()
    proc = CollectorProc(redis_url=server.url, namespace=namespace, claude_dir=claude_dir)
    try:
        proc.start()
        for sub in sorted((src.parent / sid / "subagents").glob("*.jsonl")):
            write_transcript_live(sub, dest.parent / sid / "subagents" / sub.name)
        write_transcript_live(src, dest)

        def states() -> list[str]:
            return [
                f["state"] for f in _session_frames(client, keys, sid) if f["type"] == "turn_status"
            ]

        def drained() -> bool:
            raw = client.hget(keys.offsets("testhost"), f"projects/-home-dev-proj/{src.name}")
            assert raw is None or isinstance(raw, bytes)
            parsed = backfill.parse_offset(raw.decode() if raw else "")
            return parsed is not None and parsed[0] == dest.stat().st_size

        poll(drained, timeout_s=15)  # every line is in: the turn states are final
        assert states() == ["working", "idle"] * prompts
        frames = _session_frames(client, keys, sid)
        uuids = [
            f["event"]["uuid"]
            for f in frames
            if f["type"] == "session_event" and f["event"].get("uuid")
        ]
        assert len(uuids) == len(set(uuids))
    finally:
        proc.stop()
        client.close()
