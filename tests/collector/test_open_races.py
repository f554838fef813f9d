"""A transcript swapped for a FIFO between the collector's check and its open (issue 22.7).

The swap is made deterministic by wrapping the check (``backfill.last_line_end``, which
every new file passes first) so that it renames a real FIFO over the transcript right after
it looked at it; what reads the file next must not block on it. A watchdog frees a reader
stuck in the FIFO after a while (so a failing run ends) and records that one was.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relaybus.collector import backfill
from relaybus.collector.approvals import preview
from relaybus.collector.tailer import Identity
from tests.support.collector_records import append, transcript, user_line
from tests.support.collector_rig import RigFactory

#: How long a reader may sit in the FIFO before the watchdog frees it (a failed run).
STUCK_S = 10.0


class FifoTrap:
    """Renames a FIFO over ``path`` on :meth:`swap`; frees a reader stuck in it at the end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.swapped = False
        self.reader_blocked = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def swap(self) -> None:
        fifo = self.path.with_name(f".{uuid.uuid4().hex}.fifo")
        os.mkfifo(fifo)
        os.replace(fifo, self.path)
        self.swapped = True
        self._thread.start()

    def _watch(self) -> None:
        deadline = time.monotonic() + STUCK_S
        while not self._done.wait(0.05):
            if time.monotonic() < deadline:
                continue
            try:  # succeeds only while a reader has the FIFO open: it was stuck there
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                continue
            self.reader_blocked = True
            os.close(fd)  # the reader sees end of file and goes on

    def close(self) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()


@pytest.fixture
def victim(claude_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FifoTrap]:
    """A transcript that becomes a FIFO right after the collector first checked it."""
    trap = FifoTrap(transcript(claude_dir, str(uuid.uuid4()), project="-victim"))
    real = backfill.last_line_end

    def check_then_swap(path: Path, size: int, *identity: Identity | None) -> int:
        end = real(path, size, *identity)
        if path == trap.path and not trap.swapped:
            trap.swap()
        return end

    monkeypatch.setattr(backfill, "last_line_end", check_then_swap)
    yield trap
    trap.close()


def texts(frames: list[dict[str, Any]]) -> list[str]:
    return [f["event"]["blocks"][0]["text"] for f in frames]


async def _sync_and_check_others(
    rig_factory: RigFactory, claude_dir: Path, trap: FifoTrap, recent: bool
) -> None:
    sid = str(uuid.uuid4())
    other = transcript(claude_dir, sid, project="-other")
    append(other, user_line(sid, "other first"))
    lines = b"".join(user_line(trap.path.stem, f"victim {i}") for i in range(50))
    trap.path.write_bytes(lines)
    if not recent:
        old = time.time() - 48 * 3600
        os.utime(trap.path, (old, old))
    rig = rig_factory()
    await rig.engine.start()
    await asyncio.wait_for(rig.engine.sync_all(initial=True), STUCK_S * 3)
    assert trap.swapped
    assert not trap.reader_blocked, "the collector blocked opening the FIFO"
    assert texts(await rig.events(sid)) == ["other first"]
    append(other, user_line(sid, "other second"))
    await rig.engine.sync_all()
    assert texts(await rig.events(sid)) == ["other first", "other second"]
    assert texts(await rig.events(trap.path.stem)) == []


async def test_fifo_swapped_in_before_the_backfill_scan_never_blocks(
    make_rig: RigFactory, claude_dir: Path, victim: FifoTrap
) -> None:
    """A recent transcript turned FIFO after its check: backfill's tail scan refuses it, others publish."""
    await _sync_and_check_others(make_rig, claude_dir, victim, recent=True)


async def test_fifo_swapped_in_before_an_old_session_is_listed_never_blocks(
    make_rig: RigFactory, claude_dir: Path, victim: FifoTrap
) -> None:
    """An old transcript turned FIFO after its check: listing its tail refuses it, others publish."""
    await _sync_and_check_others(make_rig, claude_dir, victim, recent=False)


def test_an_approvals_transcript_read_never_blocks_on_a_fifo(tmp_path: Path) -> None:
    """The transcript a permission request names, turned FIFO: re-matching its call reads nothing."""
    trap = FifoTrap(tmp_path / "t.jsonl")
    trap.path.write_bytes(b"")
    trap.swap()
    result: list[tuple[str, bool] | None] = []
    reader = threading.Thread(
        target=lambda: result.append(preview.call_after(trap.path, 0, "Bash", {}, set())),
        daemon=True,
    )
    reader.start()
    reader.join(STUCK_S * 3)
    trap.close()
    assert not trap.reader_blocked, "the read blocked opening the FIFO"
    assert result == [None]
