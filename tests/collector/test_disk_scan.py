"""The safety-net rescan on real files and a real server: it looks again only at files that
changed since their cursor last looked, and still finds every change the watcher missed."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from relaybus.collector.disk_scan import QUIET_EVERY
from tests.conftest import make_settings
from tests.support.collector_records import append, transcript, user_line
from tests.support.collector_rig import Rig
from tests.support.servers import RedisServer


@pytest.fixture
async def rig(server: RedisServer, namespace: str, claude_dir: Path) -> AsyncIterator[Rig]:
    r = Rig.build(make_settings(server.url, namespace, claude_dir))
    yield r
    await r.close()


def texts(frames: list[dict[str, Any]]) -> list[str]:
    out = []
    for f in frames:
        for b in f["event"]["blocks"]:
            if b.get("kind") == "text":
                out.append(b["text"])
    return out


async def test_rescan_syncs_only_what_changed_and_misses_nothing(
    rig: Rig, claude_dir: Path
) -> None:
    sids = [str(uuid.uuid4()) for _ in range(6)]
    paths = []
    for i, sid in enumerate(sids):
        p = transcript(claude_dir, sid, project=f"-home-dev-p{i % 2}")
        p.write_bytes(user_line(sid, f"first {i}"))
        paths.append(p)
    (claude_dir / "projects" / "-home-dev-p0" / "notes.txt").write_text("not a transcript")
    await rig.engine.start()
    assert len(rig.engine.files) == 6

    synced = _count_syncs(rig)
    await rig.engine.sync_all()
    assert synced == []  # nothing changed: no file was opened, read or sent again

    # What a missed watch event would leave: an append, a same-size replacement (new
    # inode), a truncation to a shorter line, a deletion, a new file.
    append(paths[0], user_line(sids[0], "appended"))
    tmp = paths[1].with_suffix(".tmp")
    tmp.write_bytes(user_line(sids[1], "other 1"))  # as long as "first 1"'s line
    assert tmp.stat().st_size == paths[1].stat().st_size
    os.replace(tmp, paths[1])
    paths[2].write_bytes(user_line(sids[2], "t"))
    paths[3].unlink()
    new_sid = str(uuid.uuid4())
    new = transcript(claude_dir, new_sid, project="-home-dev-p1")
    new.write_bytes(user_line(new_sid, "brand new"))

    await rig.engine.sync_all()
    assert sorted(synced) == sorted([paths[0], paths[1], paths[2], paths[3], new])
    assert texts(await rig.events(sids[0])) == ["first 0", "appended"]
    assert texts(await rig.events(sids[1]))[-1] == "other 1"
    assert texts(await rig.events(sids[2]))[-1] == "t"
    assert texts(await rig.events(new_sid)) == ["brand new"]
    assert paths[3].relative_to(claude_dir).as_posix() not in rig.engine.files
    assert len(rig.engine.files) == 6

    synced.clear()
    await rig.engine.sync_all()
    assert synced == []


async def test_a_collector_starting_on_part_of_a_first_line_publishes_it_once_whole(
    rig: Rig, claude_dir: Path
) -> None:
    """Its backfill window once grew forever on a file with no complete line (the start
    hung in a worker thread)."""
    sid = str(uuid.uuid4())
    path = transcript(claude_dir, sid)
    line = user_line(sid, "whole at last")
    path.write_bytes(line[:30])
    await asyncio.wait_for(rig.engine.start(), 10)
    await rig.engine.sync_all()
    assert await rig.events(sid) == []
    append(path, line[30:])
    await rig.engine.sync_all()
    await rig.engine.sync_all()
    assert texts(await rig.events(sid)) == ["whole at last"]


async def test_routine_rescans_compare_quiet_files_in_turn_and_a_full_one_at_once(
    rig: Rig, claude_dir: Path
) -> None:
    sids = [str(uuid.uuid4()) for _ in range(31)]
    paths = [transcript(claude_dir, sid) for sid in sids]
    for sid, p in zip(sids, paths, strict=True):
        p.write_bytes(user_line(sid, "first"))
    await rig.engine.start()
    synced = _count_syncs(rig)
    await rig.engine.sync_all(every_file=False)
    assert synced == []

    rig.engine.filesync.open_files.close_idle(time.monotonic() + 3600)  # all quiet now
    lately, quiet = paths[0], paths[1:]
    append(lately, user_line(sids[0], "read"))
    await rig.engine.sync_path(lately)  # what a watch event does: its descriptor stays open
    # Changes the watcher missed:
    append(lately, user_line(sids[0], "missed on a file read lately"))
    for sid, p in zip(sids[1:], quiet, strict=True):
        append(p, user_line(sid, "missed on a quiet file"))
    synced.clear()

    await rig.engine.sync_all(every_file=False)
    assert lately in synced  # read lately: compared on every routine rescan
    assert texts(await rig.events(sids[0]))[-1] == "missed on a file read lately"
    assert len(synced) < 1 + len(quiet)  # only the quiet files whose turn it was
    for _ in range(QUIET_EVERY - 1):
        await rig.engine.sync_all(every_file=False)
    assert sorted(p for p in synced if p != lately) == sorted(quiet)  # each once, in turn
    for sid in sids[1:]:
        assert texts(await rig.events(sid))[-1] == "missed on a quiet file"

    rig.engine.filesync.open_files.close_idle(time.monotonic() + 3600)
    append(quiet[0], user_line(sids[1], "missed, then the queue overflowed"))
    synced.clear()
    await rig.engine.sync_all()  # a full rescan: every file compared
    assert synced == [quiet[0]]
    assert texts(await rig.events(sids[1]))[-1] == "missed, then the queue overflowed"


def _count_syncs(rig: Rig) -> list[Path]:
    """The paths the engine hands to ``sync_path`` from now on."""
    synced: list[Path] = []
    real = rig.engine.filesync.sync_path

    async def counting(path: Path, **kw: Any) -> bool:
        synced.append(path)
        return await real(path, **kw)

    rig.engine.filesync.sync_path = counting  # type: ignore[method-assign]
    return synced
