"""Wake-ups: both watch backends (inotify, watchfiles) report transcript appends and
live-process files and follow the directory tree; rescans on demand."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from pathlib import Path

import pytest

from relaybus.collector.wake import Rescan, Wake
from relaybus.collector.watch_tree import watched_dirs
from relaybus.collector.watcher import rescan, watch
from tests.support.collector_records import append, transcript, user_line


def test_wake_sorts_changes_by_kind(claude_dir: Path) -> None:
    """Transcripts are queued by path, a sessions/*.json change flags processes, the rest is noise."""
    wake = Wake(claude_dir)
    t = claude_dir / "projects" / "-x" / "s.jsonl"
    wake.add({t, claude_dir / "projects" / "-x" / "agent-1.meta.json"})
    assert wake.event.is_set()
    assert wake.take() == ({t}, False, Rescan.NONE)
    assert not wake.event.is_set()
    wake.add({claude_dir / "sessions" / "123.json"})
    assert wake.take() == (set(), True, Rescan.NONE)
    wake.add({claude_dir / "todos" / "x.json"})
    assert not wake.event.is_set()


MAX_QUEUED = Path("/proc/sys/fs/inotify/max_queued_events")
BACKENDS = pytest.mark.parametrize("backend", ["inotify", "watchfiles"])


@BACKENDS
async def test_watch_reports_appends_and_process_files(claude_dir: Path, backend: str) -> None:
    """An append to a transcript in a new project folder and a process file both wake the engine."""
    wake = Wake(claude_dir)
    stop = asyncio.Event()
    task = asyncio.create_task(
        watch(
            wake,
            [claude_dir / "projects", claude_dir / "sessions"],
            stop,
            step_ms=1,
            backend=backend,
        )
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


async def test_rescan_asks_for_a_routine_sync_until_stopped(claude_dir: Path) -> None:
    """The safety-net rescan sets its flag periodically and ends when stop is set."""
    wake = Wake(claude_dir)
    stop = asyncio.Event()
    task = asyncio.create_task(rescan(wake, stop, interval_s=0.05))
    await asyncio.wait_for(wake.event.wait(), 10)
    assert wake.take()[2] is Rescan.ROUTINE
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


@BACKENDS
async def test_watch_follows_new_dirs_at_once_and_never_symlinked_ones(
    claude_dir: Path, tmp_path: Path, backend: str
) -> None:
    """A project and sub-agent dir made while running are watched; a symlinked tree never is."""
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (claude_dir / "projects" / "-linked").symlink_to(outside, target_is_directory=True)
    first = transcript(claude_dir, "w4", project="-first")
    wake = Wake(claude_dir)
    stop = asyncio.Event()
    task = asyncio.create_task(
        watch(wake, [claude_dir / "projects"], stop, step_ms=1, backend=backend)
    )
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


async def _reported(wake: Wake, path: Path, write: str, sid: str) -> None:
    """Append to ``path`` until the watch reports it (the watch may still be settling)."""
    async with asyncio.timeout(30):
        while True:
            append(path, user_line(sid, write))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.event.wait(), 0.5)
            if path in wake.take()[0]:
                return


@BACKENDS
async def test_a_project_dir_removed_and_made_again_is_watched_again(
    claude_dir: Path, backend: str
) -> None:
    """Removing a watched directory drops its watch; the one made in its place (a new inode)
    is watched again, and a rescan covers what was written before that."""
    wake = Wake(claude_dir)
    stop = asyncio.Event()
    task = asyncio.create_task(
        watch(wake, [claude_dir / "projects"], stop, step_ms=1, backend=backend)
    )
    try:
        path = transcript(claude_dir, "r1", project="-again")
        await _reported(wake, path, "before", "r1")
        shutil.rmtree(path.parent)
        path = transcript(claude_dir, "r1", project="-again")
        async with asyncio.timeout(30):  # the new directory is noticed: a rescan is asked
            while not wake.take()[2]:
                await wake.event.wait()
        wake.take()
        append(path, user_line("r1", "after"))  # once: the new directory is watched now
        async with asyncio.timeout(10):
            while path not in wake.take()[0]:
                await wake.event.wait()
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def test_inotify_queue_overflow_asks_for_a_rescan(claude_dir: Path) -> None:
    """More events than the kernel queues while the loop is busy: the overflow is not a
    silent loss, the engine is asked to look at everything again."""
    limit = int(MAX_QUEUED.read_text())  # noqa: ASYNC240 - a /proc file, read at once
    wake = Wake(claude_dir)
    stop = asyncio.Event()
    task = asyncio.create_task(
        watch(wake, [claude_dir / "projects"], stop, step_ms=1, backend="inotify")
    )
    try:
        path = transcript(claude_dir, "q1", project="-flood")
        await _reported(wake, path, "up", "q1")
        other = path.with_name("q2.jsonl")
        with path.open("a") as a, other.open("a") as b:  # no await: the loop reads nothing
            for i in range(limit // 2 + 100):  # alternating: equal events in a row coalesce
                for f in (a, b):
                    f.write(f"{i}\n")
                    f.flush()
        async with asyncio.timeout(30):
            while not wake.take()[2]:
                await wake.event.wait()
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def test_auto_watches_with_inotify_on_linux(
    claude_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``auto`` takes inotify where the kernel has it (here: the tests run on Linux)."""
    caplog.set_level(logging.INFO, logger="relaybus.collector")
    wake = Wake(claude_dir)
    stop = asyncio.Event()
    task = asyncio.create_task(watch(wake, [claude_dir / "projects"], stop, step_ms=1))
    try:
        await _reported(wake, transcript(claude_dir, "a1", project="-auto"), "x", "a1")
        assert any("with inotify" in r.getMessage() for r in caplog.records), caplog.text
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
