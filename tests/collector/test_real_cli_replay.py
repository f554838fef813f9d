"""The real CLI 2.1.332's live-file timeline, replayed with its timing into a real collector."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import redis

from shared.keys import Keys
from tests.support.cli_replay import Replay, timeline
from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import frames_of, poll
from tests.support.servers import RedisServer


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
            lambda: client.hget(keys.session(replay.sid), "live") == b"0"
            and time.monotonic(),
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
            ("session_started", ""), ("turn_status", "working"), ("turn_status", "idle"),
            ("session_ended", "exit"),
            ("session_started", ""), ("turn_status", "working"), ("turn_status", "idle"),
            ("session_ended", "exit"),
        ]
        events = [f for f in frames if f["type"] == "session_event"]
        main_lines = [
            e for e in timeline()
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
