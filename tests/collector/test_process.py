"""The collector as a real process: crashes, Redis outages, data loss, signals, live processes."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import redis

from relaybus.shared.store.keys import Keys
from tests.support.collector_proc import CollectorProc
from tests.support.collector_records import (
    append,
    assistant_line,
    frames_of,
    session_texts,
    transcript,
    user_line,
)
from tests.support.servers import RedisServer, free_port
from tests.support.wait import poll


def proc_for(srv: RedisServer, namespace: str, claude_dir: Path, **env: str) -> CollectorProc:
    return CollectorProc(redis_url=srv.url, namespace=namespace, claude_dir=claude_dir, env=env)


@contextmanager
def collector_on(
    srv: RedisServer, namespace: str, claude_dir: Path, **env: str
) -> Iterator[tuple[redis.Redis, CollectorProc]]:
    """A client of ``srv`` and a (not yet started) collector on it; both closed on exit."""
    client = srv.client()
    proc = proc_for(srv, namespace, claude_dir, **env)
    try:
        yield client, proc
    finally:
        proc.stop()
        client.close()


def user_texts(client: redis.Redis, keys: Keys, sid: str) -> list[str]:
    return [t for t in session_texts(client, keys, sid) if t.startswith("line-")]


def stored_offset(client: redis.Redis, keys: Keys, claude_dir: Path, path: Path) -> int:
    """The file offset the collector (host ``testhost``) committed for ``path``; -1 before any."""
    value = client.hget(keys.offsets("testhost"), path.relative_to(claude_dir).as_posix())
    assert value is None or isinstance(value, bytes)
    return int(value.split(b":")[0]) if value else -1


def assert_log_contiguous(client: redis.Redis, keys: Keys) -> list[dict[str, Any]]:
    log = frames_of(client, keys.log)
    assert [f["seqId"] for f in log] == list(range(1, len(log) + 1))
    assert int(client.get(keys.seq) or 0) == len(log)
    return log


def test_sigkill_at_random_points_loses_and_duplicates_nothing(
    each_server: RedisServer, namespace: str, keys: Keys, claude_dir: Path
) -> None:
    """A writer appends while the collector is SIGKILLed and restarted: each line once, in order."""
    server = each_server
    client = server.client()
    path = transcript(claude_dir, "crash")
    # The writer writes as long as the kills take (longer on a loaded machine): a session
    # stream trimmed at the default 2,000 entries would hide the first lines from the check.
    proc = proc_for(
        server,
        namespace,
        claude_dir,
        RELAYBUS_BATCH_MAX_LINES="7",
        RELAYBUS_SESSION_MAXLEN="1000000",
    )
    written = [0]
    stop_writing = threading.Event()

    def writer() -> None:
        i = 1
        while not stop_writing.is_set() or i < 300:
            append(path, user_line("crash", f"line-{i}"))
            if i % 5 == 0:
                append(path, assistant_line("crash", f"reply-{i}"))
            i += 1
            written[0] = i
            time.sleep(0.003)

    t = threading.Thread(target=writer)
    try:
        proc.start()
        append(path, user_line("crash", "line-0"))
        poll(lambda: user_texts(client, keys, "crash"))
        t.start()
        rng = random.Random(7)
        for cycle in range(8):
            # Half the kills land while it works, the others during start-up or catch-up.
            if cycle % 2 == 0:
                proc.wait_ready()
            time.sleep(rng.uniform(0.0, 0.3))
            proc.kill()
            proc.start(wait_ready_s=0)
        stop_writing.set()
        t.join(60)
        proc.wait_ready()
        total = written[0]
        poll(lambda: len(user_texts(client, keys, "crash")) >= total, timeout_s=60)
        assert user_texts(client, keys, "crash") == [f"line-{i}" for i in range(total)]
        events = frames_of(client, keys.session_events("crash"))
        assert [f["sessionSeq"] for f in events] == list(range(1, len(events) + 1))
        assert_log_contiguous(client, keys)
        starts = proc.log_path.read_text().count("collector testhost starting")
        assert starts >= 5  # it really was killed while at work, not only during start-up
    finally:
        stop_writing.set()
        if t.is_alive():
            t.join(60)
        proc.stop()
        client.close()


def test_redis_outage_then_catch_up(
    private_server: Any, namespace: str, keys: Keys, claude_dir: Path
) -> None:
    """With Redis down the collector keeps running; restarted on the same port, all lines arrive
    once. Each loop logs the outage once: a warning when it starts, its retries at DEBUG, an
    info line with its length when it ends."""
    srv: RedisServer = private_server(appendonly=True)
    path = transcript(claude_dir, "out")
    with collector_on(srv, namespace, claude_dir, RELAYBUS_LOG_LEVEL="DEBUG") as (client, proc):
        proc.start()
        append(path, user_line("out", "line-0"))
        poll(lambda: user_texts(client, keys, "out"))
        srv.stop()
        for i in range(1, 30):
            append(path, user_line("out", f"line-{i}"))
        # the collector meets the outage (reads, fails, backs off) and says so
        poll(lambda: "redis unavailable" in proc.log_path.read_text(), timeout_s=60)
        retried = ("redis still unavailable", "command stream still unavailable")
        poll(lambda: all(proc.log_path.read_text().count(r) >= 2 for r in retried), timeout_s=60)
        assert proc.alive()
        srv.start()
        ended = ("redis available again after", "command stream available again after")
        poll(lambda: all(e in proc.log_path.read_text() for e in ended), timeout_s=60)
        poll(lambda: len(user_texts(client, keys, "out")) >= 30, timeout_s=60)
        # caught up: its stored offset is the file's end, so nothing more is coming
        size = path.stat().st_size
        poll(lambda: stored_offset(client, keys, claude_dir, path) == size, timeout_s=60)
        assert user_texts(client, keys, "out") == [f"line-{i}" for i in range(30)]
        assert_log_contiguous(client, keys)
        text = proc.log_path.read_text()
        assert text.count("redis unavailable") == text.count("command stream unavailable") == 1
        assert all(text.count(e) == 1 for e in ended), text


def test_flushall_gets_a_new_epoch_and_recent_history(
    private_server: Any, namespace: str, keys: Keys, claude_dir: Path
) -> None:
    """After FLUSHALL the collector makes a new epoch, republishes recent history, then goes on."""
    srv: RedisServer = private_server()
    path = transcript(claude_dir, "fl")
    with collector_on(srv, namespace, claude_dir, RELAYBUS_BACKFILL_EVENTS="5") as (client, proc):
        proc.start()
        # The heartbeat comes before the start-up scan: a file it found with 20 lines would
        # be backfilled (last 5). One line first, seen published, means the scan is done.
        append(path, user_line("fl", "line-0"))
        poll(lambda: user_texts(client, keys, "fl"))
        append(path, b"".join(user_line("fl", f"line-{i}") for i in range(1, 20)))
        poll(lambda: len(user_texts(client, keys, "fl")) == 20)
        old_epoch = client.get(keys.epoch)
        client.flushall()
        poll(lambda: client.get(keys.epoch) not in (None, old_epoch), timeout_s=30)
        poll(lambda: user_texts(client, keys, "fl") == [f"line-{i}" for i in range(15, 20)])
        append(path, user_line("fl", "line-20"))
        poll(lambda: user_texts(client, keys, "fl")[-1:] == ["line-20"])
        assert user_texts(client, keys, "fl") == [f"line-{i}" for i in range(15, 21)]
        assert_log_contiguous(client, keys)


def test_sigterm_exits_zero_quickly_and_clears_the_heartbeat(
    server: RedisServer, namespace: str, keys: Keys, claude_dir: Path
) -> None:
    """SIGTERM: exit code 0 within a few seconds, heartbeat removed; it carried host and version."""
    with collector_on(server, namespace, claude_dir) as (client, proc):
        proc.start()
        beat = orjson.loads(client.get(keys.host("testhost")) or b"{}")
        assert beat["host"] == "testhost" and beat["pid"] == proc.pid and beat["version"]
        assert 0 < client.ttl(keys.host("testhost")) <= 15
        t0 = time.monotonic()
        assert proc.terminate(timeout_s=10) == 0
        assert time.monotonic() - t0 < 8
        assert client.exists(keys.host("testhost")) == 0


def test_file_created_while_down_is_published_on_start(
    server: RedisServer, namespace: str, keys: Keys, claude_dir: Path
) -> None:
    """A transcript written while no collector ran is published when one starts."""
    with collector_on(server, namespace, claude_dir) as (client, proc):
        proc.start()
        assert proc.terminate() == 0
        path = transcript(claude_dir, "late")
        append(path, user_line("late", "line-0") + user_line("late", "line-1"))
        proc.start()
        poll(lambda: user_texts(client, keys, "late") == ["line-0", "line-1"])
        append(path, user_line("late", "line-2"))
        poll(lambda: len(user_texts(client, keys, "late")) == 3)


def test_turns_follow_a_real_live_process_file(
    server: RedisServer, namespace: str, keys: Keys, claude_dir: Path
) -> None:
    """sessions/<pid>.json of a running process drives turn_status; its death ends the session."""
    client = server.client()
    proc = proc_for(server, namespace, claude_dir)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    pf = claude_dir / "sessions" / f"{sleeper.pid}.json"

    def state() -> bytes | None:
        value = client.hget(keys.session("live1"), "state")
        return value if isinstance(value, bytes) else None

    try:
        proc.start()
        pf.write_bytes(
            orjson.dumps({"pid": sleeper.pid, "sessionId": "live1", "cwd": "/w", "status": "busy"})
        )
        poll(lambda: state() == b"working")
        pf.write_bytes(
            orjson.dumps(
                {
                    "pid": sleeper.pid,
                    "sessionId": "live1",
                    "cwd": "/w",
                    "status": "waiting",
                    "waitingFor": "edit",
                }
            )
        )
        poll(lambda: state() == b"waiting")
        assert client.hget(keys.session("live1"), "waitingFor") == b"edit"
        sleeper.kill()
        sleeper.wait(10)
        poll(lambda: client.hget(keys.session("live1"), "ended") == b"1")
        kinds = [f["type"] for f in frames_of(client, keys.log)]
        assert kinds[0] == "session_started" and kinds[-1] == "session_ended"
    finally:
        sleeper.kill()
        proc.stop()
        client.close()


def test_metrics_endpoint_serves_collector_metrics(
    server: RedisServer, namespace: str, keys: Keys, claude_dir: Path
) -> None:
    """With a metrics port set, /metrics exposes the collector's counters."""
    port = free_port()
    metrics_env = {"RELAYBUS_COLLECTOR_METRICS_PORT": str(port)}
    with collector_on(server, namespace, claude_dir, **metrics_env) as (client, proc):
        proc.start()
        append(transcript(claude_dir, "m1"), user_line("m1", "line-0"))
        poll(lambda: user_texts(client, keys, "m1"))

        def scraped() -> str | None:
            body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            return body if "relaybus_collector_lines_published_total 1.0" in body else None

        body = poll(scraped)
        assert "relaybus_collector_append_latency_seconds_bucket" in body


def test_sigterm_while_redis_is_down_still_exits_zero(
    private_server: Any, namespace: str, keys: Keys, claude_dir: Path
) -> None:
    """A collector holding through an outage still stops promptly and cleanly on SIGTERM."""
    srv: RedisServer = private_server()
    proc = proc_for(srv, namespace, claude_dir)
    try:
        proc.start()
        srv.stop()
        append(transcript(claude_dir, "down"), user_line("down", "line-0"))
        poll(lambda: "redis unavailable" in proc.log_path.read_text())
        t0 = time.monotonic()
        assert proc.terminate(timeout_s=15) == 0
        assert time.monotonic() - t0 < 10
    finally:
        proc.stop()


def test_redis_killed_mid_catch_up_loses_and_duplicates_nothing(
    private_server: Any, namespace: str, keys: Keys, claude_dir: Path
) -> None:
    """Redis SIGKILLed while a backlog is being appended in small batches: each line once."""
    srv: RedisServer = private_server(appendonly=True)
    client = srv.client()
    path = transcript(claude_dir, "mid")
    proc = proc_for(
        srv, namespace, claude_dir, RELAYBUS_BATCH_MAX_LINES="5", RELAYBUS_SESSION_MAXLEN="10000"
    )
    total = 3000
    try:
        proc.start()
        append(path, user_line("mid", "line-0"))
        poll(lambda: user_texts(client, keys, "mid"))
        append(path, b"".join(user_line("mid", f"line-{i}") for i in range(1, total)))
        poll(lambda: client.xlen(keys.session_events("mid")) > 50)
        srv.stop()
        time.sleep(0.5)
        srv.start()
        poll(lambda: len(user_texts(client, keys, "mid")) >= total, timeout_s=90)
        time.sleep(0.5)
        assert user_texts(client, keys, "mid") == [f"line-{i}" for i in range(total)]
        assert_log_contiguous(client, keys)
    finally:
        proc.stop()
        client.close()


def stored_more_than(client: redis.Redis, keys: Keys, n: int) -> Callable[[], bool]:
    return lambda: len(user_texts(client, keys, "kill")) > n


def kill_append_connection(client: Any) -> int:
    """CLIENT KILL the collector's append connection: the one whose last command is the
    append script (a paused one shows the command Redis holds)."""
    return sum(
        client.client_kill_filter(_id=c["id"])
        for c in client.client_list()
        if c["cmd"] == "evalsha"
    )


def test_append_connection_killed_while_lines_stream_loses_and_duplicates_nothing(
    private_server: Any, namespace: str, keys: Keys, claude_dir: Path
) -> None:
    """The collector's own append connection is dropped (CLIENT KILL) again and again while
    a session writes line after line, idle or with a batch in flight (its reply lost after
    it ran): each line once, in order, and the log has no gap."""
    srv: RedisServer = private_server()
    path = transcript(claude_dir, "kill")
    total = 300
    with collector_on(srv, namespace, claude_dir) as (client, proc):
        proc.start()
        append(path, user_line("kill", "line-0"))
        poll(lambda: user_texts(client, keys, "kill"))
        kills = 0
        for i in range(1, total):
            in_flight = i % 30 == 0  # held by a pause: the batch is sent, never run
            if in_flight:
                client.client_pause(5000, all=False)
            append(path, user_line("kill", f"line-{i}"))
            if i % 15 == 0:
                if in_flight:
                    time.sleep(0.1)  # the collector has sent the batch; Redis holds it
                else:  # the line went in, so the append connection is up (a busy machine lags)
                    poll(stored_more_than(client, keys, i), timeout_s=20)
                kills += kill_append_connection(client)
            if in_flight:
                client.client_unpause()
            time.sleep(0.002)
        poll(lambda: len(user_texts(client, keys, "kill")) >= total, timeout_s=60)
        size = path.stat().st_size
        poll(lambda: stored_offset(client, keys, claude_dir, path) == size, timeout_s=60)
        assert user_texts(client, keys, "kill") == [f"line-{i}" for i in range(total)]
        assert_log_contiguous(client, keys)
        assert kills >= 10
        assert "redis unavailable" in proc.log_path.read_text()  # the in-flight ones failed
