"""Wake-ups: watchfiles reports transcript appends and live-process files; rescans on demand."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

from relaybus.collector.watcher import Wake, rescan, watch, watched_dirs
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


def test_watched_dirs_are_the_real_layout_directories_only(
    claude_dir: Path, tmp_path: Path
) -> None:
    """Projects, sessions, sub-agent dirs: watched; symlinked and deeper directories: not."""
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    projects = claude_dir / "projects"
    real = transcript(claude_dir, "w3", project="-real").parent
    (real / "w3" / "subagents").mkdir(parents=True)
    (real / "w3" / "tool-results" / "deeper").mkdir(parents=True)
    (projects / "-linked").symlink_to(outside, target_is_directory=True)
    (real / "evil").symlink_to(outside, target_is_directory=True)
    (real / "w3" / "subagents" / "more").mkdir()
    expected = {projects, claude_dir / "sessions", real, real / "w3", real / "w3" / "subagents"}
    assert set(watched_dirs(claude_dir, [projects, claude_dir / "sessions"])) == expected
    assert set(watched_dirs(claude_dir, [claude_dir])) == expected | {claude_dir}
    linked_root = watched_dirs(claude_dir, [projects / "-linked"])
    assert set(linked_root) == {projects / "-linked"}  # watched, never entered


async def test_watch_follows_new_dirs_at_once_and_never_symlinked_ones(
    claude_dir: Path, tmp_path: Path
) -> None:
    """A project and sub-agent dir made while running are watched; a symlinked tree never is."""
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (claude_dir / "projects" / "-linked").symlink_to(outside, target_is_directory=True)
    first = transcript(claude_dir, "w4", project="-first")
    wake = Wake(claude_dir)
    stop = asyncio.Event()
    task = asyncio.create_task(watch(wake, [claude_dir / "projects"], stop, step_ms=1))
    seen: set[Path] = set()
    rescans = 0

    def outside_writes() -> None:
        append(outside / "deep" / "x.jsonl", user_line("o", "outside"))
        append(outside / "y.jsonl", user_line("o", "outside"))

    async def until_reported(path: Path, line: str, *, once: bool) -> float:
        """Append (every round, or once) until ``path`` is reported; the seconds it took."""
        nonlocal rescans
        start = time.monotonic()
        written = False
        async with asyncio.timeout(30):
            while path not in seen:
                if not (once and written):
                    outside_writes()
                    append(path, user_line("w4", line))
                    written = True
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.event.wait(), 0.5)
                paths, _procs, rescan_wanted = wake.take()
                seen.update(paths)
                rescans += rescan_wanted
        return time.monotonic() - start

    try:
        await until_reported(first, "first", once=False)  # the watch is up
        agent = claude_dir / "projects" / "-made-later" / "w5" / "subagents" / "agent-a1.jsonl"
        agent.parent.mkdir(parents=True)
        # Written once, maybe before its directory's watch exists: reported, or a rescan asked.
        append(agent, user_line("w5", "one"))
        async with asyncio.timeout(30):
            while agent not in seen and not rescans:
                await asyncio.wait_for(wake.event.wait(), 30)
                paths, _procs, rescan_wanted = wake.take()
                seen.update(paths)
                rescans += rescan_wanted
        seen.discard(agent)
        took = await until_reported(agent, "two", once=True)  # written once: watched now
        assert took < 5, took
        assert all("-linked" not in str(p) and outside not in p.parents for p in seen), seen
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
