"""Live-process files parse tolerantly; backfill helpers find line ends and offset values."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from relaybus.collector import backfill, procfiles


def test_process_file_parses_known_fields_and_tolerates_the_rest() -> None:
    """pid/sessionId/cwd/status/waitingFor are read; extra fields and a string pid are fine."""
    raw = orjson.dumps(
        {
            "pid": "77",
            "sessionId": "s",
            "cwd": "/w",
            "status": "waiting",
            "waitingFor": "x",
            "new": 1,
        }
    )
    info = procfiles.parse(raw)
    assert info == procfiles.LiveProcess(77, "s", "/w", "waiting", "x", None)


def test_unusable_process_files_are_ignored() -> None:
    """Not JSON, not an object, no session id, a bad pid: ignored, never an error."""
    for raw in [
        b"{",
        b"[]",
        b'{"pid": 1}',
        b'{"pid": true, "sessionId": "s"}',
        b'{"pid": -3, "sessionId": "s"}',
    ]:
        assert procfiles.parse(raw) is None, raw


def test_scan_keeps_only_live_pids(tmp_path: Path) -> None:
    """scan() returns sessions whose pid is alive, keyed by session id."""
    (tmp_path / "a.json").write_bytes(orjson.dumps({"pid": os.getpid(), "sessionId": "alive"}))
    (tmp_path / "b.json").write_bytes(orjson.dumps({"pid": 2**22 + 12345, "sessionId": "dead"}))
    (tmp_path / "c.txt").write_text("ignored")
    assert set(procfiles.scan(tmp_path)) == {"alive"}
    assert procfiles.scan(tmp_path / "missing") == {}


def _live_file(sessions: Path, pid: int, sid: str) -> Path:
    path = sessions / f"{pid}.json"
    path.write_bytes(orjson.dumps({"pid": pid, "sessionId": sid}))
    return path


def test_scan_ignores_a_sessions_dir_others_can_write(tmp_path: Path) -> None:
    """A group- or other-writable or symlinked sessions dir is ignored whole."""
    sessions = tmp_path / "sessions"
    sessions.mkdir(mode=0o755)
    _live_file(sessions, os.getpid(), "mine")
    assert set(procfiles.scan(sessions)) == {"mine"}
    for mode in (0o775, 0o757, 0o1777):
        sessions.chmod(mode)
        assert procfiles.scan(sessions) == {}, oct(mode)
        assert procfiles.read_live(sessions, os.getpid()) is None
    sessions.chmod(0o700)
    assert set(procfiles.scan(sessions)) == {"mine"}
    assert procfiles.read_live(sessions, os.getpid()) is not None
    link = tmp_path / "linked"
    link.symlink_to(sessions, target_is_directory=True)
    assert procfiles.scan(link) == {}


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root")
def test_scan_ignores_a_live_file_of_another_user(tmp_path: Path) -> None:
    """A live-process file owned by another uid is never read."""
    sessions = tmp_path / "sessions"
    sessions.mkdir(mode=0o755)
    _live_file(sessions, os.getpid(), "mine")
    os.chown(_live_file(sessions, 1, "theirs"), 4242, -1)
    assert set(procfiles.scan(sessions)) == {"mine"}
    assert procfiles.read_live(sessions, 1) is None


def test_last_line_end_ignores_a_partial_tail(tmp_path: Path) -> None:
    """The registration offset is the end of the last complete line, never the file size."""
    f = tmp_path / "t.jsonl"
    f.write_bytes(b"a\n" + b"b" * (backfill.SCAN_CHUNK * 2) + b"\npartial")
    size = f.stat().st_size
    assert backfill.last_line_end(f, size) == size - len(b"partial")
    f.write_bytes(b"no newline at all")
    assert backfill.last_line_end(f, f.stat().st_size) == 0


def test_offset_values_round_trip() -> None:
    """Committed values are offset:dev:ino; anything else is unreadable (treated as absent)."""
    assert backfill.parse_offset(backfill.offset_value(10, 2, 3)) == (10, 2, 3)
    for bad in ["", "10", "a:b:c", "-1:2:3"]:
        assert backfill.parse_offset(bad) is None


def test_history_window() -> None:
    """A file gets history only within the age window and when events are wanted."""
    assert backfill.wants_history(1000.0, 1000.0 + 3600, max_age_hours=24, events=200)
    assert not backfill.wants_history(0.0, 25 * 3600.0, max_age_hours=24, events=200)
    assert not backfill.wants_history(1000.0, 1000.0, max_age_hours=24, events=0)


def test_a_foreign_zombie_is_not_alive_but_our_own_child_is_until_reaped() -> None:
    """An orphaned claude that exited but is not reaped yet counts as gone; our own exited
    child counts until our driver reaps it (its run ends first)."""
    code = (
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen(['true'])\n"  # exits at once; this parent never reaps it
        "print(child.pid, flush=True)\n"
        "time.sleep(30)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    own = subprocess.Popen(["true"])
    try:
        assert parent.stdout is not None
        foreign = int(parent.stdout.readline())
        deadline = time.monotonic() + 10
        while (procfiles._stat(foreign) or ("?",))[0] != "Z" or (
            procfiles._stat(own.pid) or ("?",)
        )[0] != "Z":
            assert time.monotonic() < deadline, "the children never became zombies"
            time.sleep(0.01)
        assert procfiles.pid_alive(foreign) is False
        assert procfiles.pid_alive(own.pid) is True
        assert procfiles.pid_alive(os.getpid()) is True
    finally:
        parent.kill()
        parent.communicate()
        own.wait()
