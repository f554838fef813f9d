"""Old transcripts are listed with their real start, and not at all once older than the TTL
(docs/architecture.md: "An old session is listed only while its last activity is within
session_ttl_s")."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime
from pathlib import Path

from relaybus.collector.history import HistoryRequests
from relaybus.shared.aio import now_ms
from relaybus.shared.wire import commands as c
from relaybus.shared.wire.commands import Command
from tests.support.collector_records import assistant_line, transcript, user_line
from tests.support.collector_rig import RigFactory

DAY_S = 86400.0


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _old_transcript(claude_dir: Path, sid: str, started: float, lines: int = 200) -> Path:
    """A transcript whose lines run from ``started`` for an hour, last changed then."""
    path = transcript(claude_dir, sid)
    step = 3600 / lines
    path.write_bytes(
        b"".join(
            user_line(sid, f"q{i}", timestamp=_stamp(started + i * step))
            + assistant_line(sid, f"a{i}", timestamp=_stamp(started + i * step + 1))
            for i in range(lines)
        )
    )
    end = started + 3600
    os.utime(path, (end, end))
    return path


async def test_old_session_is_listed_with_its_first_timestamp(
    make_rig: RigFactory, claude_dir: Path
) -> None:
    """A 3-day-old transcript is listed with startedAt = its first line's time, not 0, and
    keeps it after its history loads."""
    started = time.time() - 3 * DAY_S
    _old_transcript(claude_dir, "s1", started)
    rig = make_rig(backfill_max_age_hours=24, replay_depth=5)
    await rig.engine.start()
    h = await rig.client.hgetall(rig.keys.session("s1"))
    assert h[b"historyLoaded"] == b"0"
    assert int(h[b"startedAt"]) == int(started * 1000)
    requests = HistoryRequests(rig.engine.inbox)
    loading = asyncio.create_task(
        requests.handle(Command("cmd-s1", c.LOAD_HISTORY, "s1", "gw", now_ms() + 10_000))
    )
    await asyncio.sleep(0)
    await rig.engine.apply_inbox()
    assert (await loading).data == {"published": 5}
    h = await rig.client.hgetall(rig.keys.session("s1"))
    assert (h[b"historyLoaded"], int(h[b"startedAt"])) == (b"1", int(started * 1000))


async def test_session_older_than_the_ttl_is_not_listed(
    make_rig: RigFactory, claude_dir: Path
) -> None:
    """A transcript last active 10 days ago (TTL 7 days) is registered but not listed."""
    _old_transcript(claude_dir, "s1", time.time() - 10 * DAY_S)
    _old_transcript(claude_dir, "s2", time.time() - 2 * DAY_S)
    rig = make_rig(backfill_max_age_hours=24, session_ttl_days=7)
    await rig.engine.start()
    assert not await rig.client.exists(rig.keys.session("s1"))
    assert await rig.client.zscore(rig.keys.sessions, "s1") is None
    assert await rig.client.zscore(rig.keys.sessions, "s2") is not None
