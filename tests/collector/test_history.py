"""Old transcripts: listed without their history, which is published on demand, exactly once."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from relaybus.collector.history import HistoryRequests
from relaybus.shared.aio import now_ms
from relaybus.shared.wire import commands as c
from relaybus.shared.wire.commands import Command
from tests.support.collector_records import (
    append,
    assistant_line,
    progress_line,
    transcript,
    user_line,
)
from tests.support.collector_rig import RigFactory

FILE_KEY = "projects/-home-dev-project/s1.jsonl"


def _old(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    old = time.time() - 48 * 3600
    os.utime(path, (old, old))


def _texts(frames: list[dict[str, Any]]) -> list[str]:
    return [f["event"]["blocks"][0]["text"] for f in frames if f["event"]["blocks"]]


def _cmd(sid: str) -> Command:
    return Command("cmd-" + sid, c.LOAD_HISTORY, sid, "gw", now_ms() + 10_000)


async def test_old_session_is_listed_without_history(
    make_rig: RigFactory, claude_dir: Path
) -> None:
    """An old transcript is listed (cwd, title, last activity, historyLoaded=0) and publishes nothing."""
    path = transcript(claude_dir, "s1")
    _old(
        path, b"".join(user_line("s1", f"q{i}") + assistant_line("s1", f"a{i}") for i in range(300))
    )
    rig = make_rig(backfill_max_age_hours=24, replay_depth=5)
    await rig.engine.start()
    assert await rig.events("s1") == []
    h = await rig.client.hgetall(rig.keys.session("s1"))
    assert h[b"historyLoaded"] == b"0"
    assert h[b"cwd"] == b"/home/dev/project"
    assert isinstance(h[b"historyEnd"], bytes)
    assert h[b"historyEnd"].split(b":")[0] == str(path.stat().st_size).encode()
    assert b"live" not in h and b"state" not in h
    assert b"q0" in (h.get(b"title"), h.get(b"firstPrompt"))  # the head is read, not only the tail
    assert await rig.client.zscore(rig.keys.sessions, "s1") is not None


async def test_bookkeeping_only_old_file_is_not_listed(
    make_rig: RigFactory, claude_dir: Path
) -> None:
    """An old transcript with nothing to show is registered but never listed."""
    path = transcript(claude_dir, "s1")
    _old(path, progress_line("s1") * 3)
    rig = make_rig(backfill_max_age_hours=24)
    await rig.engine.start()
    assert await rig.client.hget(rig.keys.offsets("testhost"), FILE_KEY) is not None
    assert not await rig.client.exists(rig.keys.session("s1"))


async def test_load_history_publishes_the_last_lines_once(
    make_rig: RigFactory, claude_dir: Path
) -> None:
    """load_history publishes the last replay_depth events once; a second request publishes nothing."""
    path = transcript(claude_dir, "s1")
    _old(path, b"".join(user_line("s1", f"q{i}") + progress_line("s1") for i in range(10)))
    rig = make_rig(backfill_max_age_hours=24, replay_depth=4)
    await rig.engine.start()
    requests = HistoryRequests(rig.engine.inbox)
    first = asyncio.create_task(requests.handle(_cmd("s1")))
    second = asyncio.create_task(requests.handle(_cmd("s1")))
    await asyncio.sleep(0)
    await rig.engine.apply_inbox()
    r1, r2 = await first, await second
    assert (r1.ok, r1.data, r2.ok, r2.data) == (True, {"published": 4}, True, {"published": 0})
    assert _texts(await rig.events("s1")) == ["q6", "q7", "q8", "q9"]
    assert [f["sessionSeq"] for f in await rig.events("s1")] == [1, 2, 3, 4]
    append(path, user_line("s1", "new"))
    await rig.engine.sync_path(path)
    assert _texts(await rig.events("s1")) == ["q6", "q7", "q8", "q9", "new"]


async def test_resumed_after_a_restart_publishes_the_history_first(
    make_rig: RigFactory, claude_dir: Path
) -> None:
    """A session registered by an earlier collector run gets its history before its first new line."""
    path = transcript(claude_dir, "s1")
    _old(path, b"".join(user_line("s1", f"q{i}") for i in range(6)))
    first = make_rig(backfill_max_age_hours=24, replay_depth=3)
    await first.engine.start()
    await first.close()
    rig = make_rig(backfill_max_age_hours=24, replay_depth=3)
    await rig.engine.start()
    append(path, user_line("s1", "again"))
    await rig.engine.sync_path(path)
    assert _texts(await rig.events("s1")) == ["q3", "q4", "q5", "again"]
    assert await rig.client.hget(rig.keys.session("s1"), "historyLoaded") == b"1"
