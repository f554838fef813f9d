"""Wake-ups: watchfiles reports transcript appends and live-process files; rescans on demand."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from collector.watcher import Wake, rescan, watch, watched_dirs
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


async def test_watch_never_follows_a_symlinked_directory(claude_dir: Path, tmp_path: Path) -> None:
    """projects/-x -> elsewhere: nothing there is watched (recursive watchfiles would follow it)."""
    outside = tmp_path / "outside"
    (outside / "deep" / "er").mkdir(parents=True)
    (claude_dir / "projects" / "-linked").symlink_to(outside, target_is_directory=True)
    real = transcript(claude_dir, "w2", project="-real")
    assert watched_dirs([claude_dir / "projects"]) == {claude_dir / "projects", real.parent}
    wake = Wake(claude_dir)
    stop = asyncio.Event()
    task = asyncio.create_task(watch(wake, [claude_dir / "projects"], stop, step_ms=1))
    seen: set[Path] = set()

    async def until_reported(path: Path, line: str) -> None:
        async with asyncio.timeout(30):
            while path not in seen:
                append(outside / "deep" / "x.jsonl", user_line("o", "outside"))
                append(path, user_line("w2", line))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.event.wait(), 0.5)
                seen.update(wake.take()[0])

    try:
        await until_reported(real, "first")
        seen.discard(real)
        await until_reported(real, "second")  # the outside write before it was never reported
        assert all("-linked" not in str(p) for p in seen), seen
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
