"""Wake-ups: watchfiles reports transcript appends and live-process files; rescans on demand."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from collector.watcher import Wake, rescan, watch
from tests.support.collector_records import append, transcript, user_line


def test_wake_sorts_changes_by_kind(claude_dir: Path) -> None:
    """Transcripts are queued by path, a sessions/*.json change flags processes, the rest is noise."""
    wake = Wake(claude_dir)
    t = claude_dir / "projects" / "-x" / "s.jsonl"
    wake.add({t, claude_dir / "projects" / "-x" / "agent-1.meta.json"})
    assert wake.event.is_set()
    assert wake.take() == ({t}, False, False)
    assert not wake.event.is_set()
    wake.add({claude_dir / "sessions" / "123.json"})
    assert wake.take() == (set(), True, False)
    wake.add({claude_dir / "todos" / "x.json"})
    assert not wake.event.is_set()


async def test_watch_reports_appends_and_process_files(claude_dir: Path) -> None:
    """An append to a transcript in a new project folder and a process file both wake the engine."""
    wake = Wake(claude_dir)
    stop = asyncio.Event()
    task = asyncio.create_task(
        watch(wake, [claude_dir / "projects", claude_dir / "sessions"], stop, step_ms=1)
    )
    try:
        path = transcript(claude_dir, "w1", project="-new-project")
        seen: set[Path] = set()
        processes = False
        async with asyncio.timeout(30):
            while path not in seen or not processes:
                append(path, user_line("w1", "hello"))
                (claude_dir / "sessions" / "42.json").write_text('{"pid": 42}')
                # The watch may not be established yet: write again until it reports.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.event.wait(), 0.5)
                paths, procs, _ = wake.take()
                seen |= paths
                processes = processes or procs
        assert path in seen and processes
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def test_rescan_asks_for_a_full_sync_until_stopped(claude_dir: Path) -> None:
    """The safety-net rescan sets its flag periodically and ends when stop is set."""
    wake = Wake(claude_dir)
    stop = asyncio.Event()
    task = asyncio.create_task(rescan(wake, stop, interval_s=0.05))
    await asyncio.wait_for(wake.event.wait(), 10)
    assert wake.take()[2] is True
    stop.set()
    await asyncio.wait_for(task, 10)
