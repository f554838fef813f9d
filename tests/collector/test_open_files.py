"""Transcripts kept open between reads: a held descriptor never hides a truncation, a
replacement or a rename, is closed when its file goes, and their number stays bounded."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from relaybus.collector.open_files import MAX_OPEN
from tests.conftest import make_settings
from tests.support.collector_records import append, assistant_line, transcript, user_line
from tests.support.collector_rig import Rig
from tests.support.servers import RedisServer


@pytest.fixture
async def rig(server: RedisServer, namespace: str, claude_dir: Path) -> AsyncIterator[Rig]:
    r = Rig.build(make_settings(server.url, namespace, claude_dir))
    await r.engine.start()
    yield r
    await r.close()


def texts(frames: list[dict[str, Any]]) -> list[str]:
    return [
        f["event"]["blocks"][0].get("text", "") if f["event"]["blocks"] else f["event"]["type"]
        for f in frames
    ]


def open_inodes() -> set[tuple[int, int]]:
    """(dev, inode) of every file this process has open (deleted ones too)."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            st = os.stat(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        out.add((st.st_dev, st.st_ino))
    return out


def inode(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


def open_transcripts(rig: Rig) -> int:
    return sum(1 for e in rig.engine.files.values() if e.tail.is_open)


async def test_a_file_replaced_while_held_open_is_read_anew_and_its_old_descriptor_closed(
    rig: Rig, claude_dir: Path
) -> None:
    """Unlinked and made again (a new inode, the old one still open here): the new file's
    lines are published after the reset event, and the old inode is no longer open."""
    path = transcript(claude_dir, "s1")
    path.write_bytes(user_line("s1", "q1"))
    await rig.engine.sync_path(path)
    old = inode(path)
    assert old in open_inodes()
    path.unlink()
    path.write_bytes(user_line("s1", "other") + assistant_line("s1", "a2"))
    assert inode(path) != old  # the held descriptor keeps the old inode number taken
    await rig.engine.sync_path(path)
    frames = await rig.events("s1")
    assert [f["event"].get("subtype") for f in frames[1:2]] == ["relaybus_transcript_reset"]
    assert texts(frames)[2:] == ["other", "a2"]
    assert old not in open_inodes()
    assert inode(path) in open_inodes()
    append(path, user_line("s1", "q3"))
    await rig.engine.sync_path(path)
    assert texts(await rig.events("s1"))[-1] == "q3"


async def test_a_held_file_truncated_in_place_is_read_from_its_start(
    rig: Rig, claude_dir: Path
) -> None:
    """Same inode, shorter than the committed offset: the held descriptor reads it anew."""
    path = transcript(claude_dir, "s1")
    path.write_bytes(user_line("s1", "q1") + assistant_line("s1", "a1"))
    await rig.engine.sync_path(path)
    os.truncate(path, 0)
    append(path, user_line("s1", "n1"))
    await rig.engine.sync_path(path)
    frames = await rig.events("s1")
    assert frames[2]["event"].get("subtype") == "relaybus_transcript_reset"
    assert texts(frames)[3:] == ["n1"]


async def test_a_held_file_renamed_away_is_dropped_and_closed(rig: Rig, claude_dir: Path) -> None:
    path = transcript(claude_dir, "s1")
    path.write_bytes(user_line("s1", "q1"))
    await rig.engine.sync_path(path)
    old = inode(path)
    moved = claude_dir / "elsewhere.txt"
    os.rename(path, moved)
    await rig.engine.sync_path(path)
    assert not rig.engine.files
    assert old not in open_inodes()


async def test_open_transcripts_are_bounded_and_closed_when_idle(
    rig: Rig, claude_dir: Path
) -> None:
    """More sessions than :data:`MAX_OPEN`: at most that many files stay open; the engine's
    tick closes those idle for longer than ``idle_s``; a closed one is read again on demand."""
    paths = []
    for i in range(MAX_OPEN + 6):
        path = transcript(claude_dir, f"s{i}")
        path.write_bytes(user_line(f"s{i}", f"q{i}"))
        await rig.engine.sync_path(path)
        paths.append(path)
    assert len(rig.engine.files) == MAX_OPEN + 6
    assert open_transcripts(rig) == MAX_OPEN
    assert inode(paths[0]) not in open_inodes()  # the least recently read went first
    assert inode(paths[-1]) in open_inodes()
    rig.engine.filesync.open_files.idle_s = 0.0
    await rig.engine.tick()
    assert open_transcripts(rig) == 0
    assert not any(inode(p) in open_inodes() for p in paths)
    append(paths[0], assistant_line("s0", "a0"))
    await rig.engine.sync_path(paths[0])
    assert texts(await rig.events("s0"))[-1] == "a0"
    assert open_transcripts(rig) == 1
