"""Hostile names and files under the claude dir, against a real collector process.

Each test plants what a local attacker (or a confused tool) could put there — a name that
splices Redis keys or reads as a CLI option, a FIFO, a symlink to a secret — and checks
that the collector neither stalls nor publishes what it must not.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
import redis

from relaybus.shared.store.keys import Keys
from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import (
    Entries,
    append,
    frames_of,
    session_texts,
    transcript,
    user_line,
)
from tests.support.servers import RedisServer
from tests.support.wait import poll

SECRET = b"AKIA-relaybus-test-secret-do-not-publish\n"


@pytest.fixture
def running(
    server: RedisServer, namespace: str, claude_dir: Path
) -> Iterator[tuple[redis.Redis, CollectorProc]]:
    """A started collector on ``claude_dir`` and a client of its Redis."""
    client = server.client()
    proc = CollectorProc(redis_url=server.url, namespace=namespace, claude_dir=claude_dir)
    try:
        proc.start()
        yield client, proc
    finally:
        proc.stop()
        client.close()


def _published(client: redis.Redis, keys: Keys, sid: str, text: str) -> bool:
    return text in session_texts(client, keys, sid)


def _log_bytes(client: redis.Redis, keys: Keys) -> bytes:
    return b"".join(f[b"f"] for _id, f in cast(Entries, client.xrange(keys.log)))


def test_colliding_and_option_like_names_are_ignored(
    running: tuple[redis.Redis, CollectorProc], keys: Keys, claude_dir: Path
) -> None:
    """`<sid>:events.jsonl` and `--dangerously-skip-permissions.jsonl` publish nothing and stop nothing."""
    client, proc = running
    good = str(uuid.uuid4())
    path = transcript(claude_dir, good)
    append(path, user_line(good, "first"))
    poll(lambda: _published(client, keys, good, "first"))
    for name in (f"{good}:events", "--dangerously-skip-permissions", "a:x"):
        bad = path.parent / f"{name}.jsonl"
        append(bad, user_line(name, "planted"))
    append(path, user_line(good, "second"))
    poll(lambda: _published(client, keys, good, "second"))
    assert client.type(keys.session_events(good)) == b"stream"
    assert client.type(keys.session(good)) == b"hash"
    assert not client.exists(keys.session("--dangerously-skip-permissions"))
    assert b"planted" not in _log_bytes(client, keys)
    assert proc.alive()


def test_fifo_in_the_sessions_dir_does_not_freeze_the_collector(
    running: tuple[redis.Redis, CollectorProc], keys: Keys, claude_dir: Path
) -> None:
    """A FIFO named like a live-process file: the collector never blocks opening it."""
    client, proc = running
    sid = str(uuid.uuid4())
    path = transcript(claude_dir, sid)
    append(path, user_line(sid, "before"))
    poll(lambda: _published(client, keys, sid, "before"))
    os.mkfifo(claude_dir / "sessions" / "4242.json")
    os.mkfifo(path.parent / f"{uuid.uuid4()}.jsonl")
    append(path, user_line(sid, "after"))
    poll(lambda: _published(client, keys, sid, "after"), timeout_s=15)
    # Still alive a few ticks later: the process scan (every second) met the FIFO and went on.
    append(path, user_line(sid, "later"))
    poll(lambda: _published(client, keys, sid, "later"), timeout_s=15)
    assert proc.alive()


def test_symlinks_out_of_the_claude_dir_are_not_read(
    server: RedisServer, namespace: str, keys: Keys, claude_dir: Path, tmp_path: Path
) -> None:
    """A transcript symlinked to a secret, and a project dir symlinked elsewhere: nothing published."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "credentials"
    secret.write_bytes(SECRET * 3)
    linked_sid = str(uuid.uuid4())
    (outside / f"{linked_sid}.jsonl").write_bytes(SECRET)
    (claude_dir / "projects" / "-linked").symlink_to(outside, target_is_directory=True)
    sid = str(uuid.uuid4())
    path = transcript(claude_dir, sid)
    (path.parent / f"{uuid.uuid4()}.jsonl").symlink_to(secret)
    append(path, user_line(sid, "before start"))
    client = server.client()
    # Planted before the start: the first scan meets every file before it reads new lines.
    with CollectorProc(redis_url=server.url, namespace=namespace, claude_dir=claude_dir) as proc:
        append(path, user_line(sid, "marker"))
        poll(lambda: _published(client, keys, sid, "marker"))
        append(secret, SECRET)  # the targets change too: still never read
        append(outside / f"{linked_sid}.jsonl", SECRET)
        append(path, user_line(sid, "marker-2"))
        poll(lambda: _published(client, keys, sid, "marker-2"))
        assert proc.alive()
    assert b"relaybus-test-secret" not in _log_bytes(client, keys)
    assert not client.exists(keys.session(linked_sid))
    assert {f.get("sessionId") for f in frames_of(client, keys.log)} == {sid}
    client.close()


def _inotify_watched_inodes(pid: int) -> set[int]:
    """The inodes the process holds inotify watches on (``inotify wd:… ino:<hex>`` lines)."""
    inodes: set[int] = set()
    fdinfo = Path(f"/proc/{pid}/fdinfo")
    for fd in os.listdir(fdinfo):
        try:
            lines = (fdinfo / fd).read_text().splitlines()
        except OSError:  # closed meanwhile
            continue
        for line in lines:
            if line.startswith("inotify wd:"):
                field = next(f for f in line.split() if f.startswith("ino:"))
                inodes.add(int(field[4:], 16))
    return inodes


def test_a_symlinked_project_dir_is_never_watched(
    server: RedisServer, namespace: str, keys: Keys, claude_dir: Path, tmp_path: Path
) -> None:
    """projects/evil -> a big tree: not one inotify watch there, and transcripts keep publishing."""
    big = tmp_path / "big"
    for i in range(200):
        (big / f"d{i}" / "e").mkdir(parents=True)
    (claude_dir / "projects" / "evil").symlink_to(big, target_is_directory=True)
    big_inodes = {os.stat(d).st_ino for d, _dirs, _files in os.walk(big)}
    sid = str(uuid.uuid4())
    path = transcript(claude_dir, sid)
    append(path, user_line(sid, "before start"))
    client = server.client()
    with CollectorProc(redis_url=server.url, namespace=namespace, claude_dir=claude_dir) as proc:
        append(path, user_line(sid, "marker"))
        poll(lambda: _published(client, keys, sid, "marker"))
        later = str(uuid.uuid4())  # a project dir made while running is watched at once
        later_path = transcript(claude_dir, later, project="-made-while-running")
        append(later_path, user_line(later, "later"))
        poll(lambda: _published(client, keys, later, "later"))
        append(big / "d1" / f"{uuid.uuid4()}.jsonl", user_line(sid, "behind the link"))
        append(later_path, user_line(later, "later-2"))
        poll(lambda: _published(client, keys, later, "later-2"))
        real = {
            os.stat(d).st_ino for d in (path.parent, later_path.parent, claude_dir / "projects")
        }

        def watching_the_real_dirs() -> set[int] | None:
            w = _inotify_watched_inodes(proc.pid)
            return w if w >= real else None

        watched = poll(watching_the_real_dirs)
        assert not watched & big_inodes, f"{len(watched & big_inodes)} watches behind the symlink"
        assert len(watched) < 20, watched
        assert proc.alive()
    assert b"behind the link" not in _log_bytes(client, keys)
    client.close()


def test_a_file_whose_appends_fail_is_set_aside_not_the_engine(
    running: tuple[redis.Redis, CollectorProc], keys: Keys, claude_dir: Path
) -> None:
    """Redis refuses one session's appends (WRONGTYPE): the other sessions keep publishing."""
    client, proc = running
    bad, good = str(uuid.uuid4()), str(uuid.uuid4())
    client.set(keys.session_events(bad), "not a stream")
    append(transcript(claude_dir, bad), user_line(bad, "refused"))
    path = transcript(claude_dir, good)
    for i in range(3):
        append(path, user_line(good, f"good-{i}"))
        poll(lambda: _published(client, keys, good, f"good-{i}"), timeout_s=15)  # noqa: B023  # polled before the loop moves on
    poll(lambda: "set aside until it changes" in proc.log_path.read_text())
    assert client.get(keys.session_events(bad)) == b"not a stream"
    assert proc.alive()


def test_a_huge_append_does_not_hold_up_other_sessions(
    running: tuple[redis.Redis, CollectorProc], keys: Keys, claude_dir: Path
) -> None:
    """100k lines land in one file at once: another session's line is published long before they are."""
    client, _proc = running
    big, small = "a" + uuid.uuid4().hex, "b" + uuid.uuid4().hex  # the big file sorts first
    big_path, small_path = transcript(claude_dir, big), transcript(claude_dir, small)
    append(big_path, user_line(big, "big-0"))
    append(small_path, user_line(small, "small-0"))
    poll(
        lambda: (
            _published(client, keys, big, "big-0") and _published(client, keys, small, "small-0")
        )
    )
    line = user_line(big, "x" * 40)
    append(big_path, line * 100_000)
    append(small_path, user_line(small, "small-1"))
    poll(lambda: _published(client, keys, small, "small-1"), timeout_s=60)
    committed = client.hget(keys.offsets("testhost"), big_path.relative_to(claude_dir).as_posix())
    assert isinstance(committed, bytes)
    done = int(committed.split(b":")[0])
    assert done < big_path.stat().st_size - 50_000 * len(line)  # not even half of it yet
