"""up's state file: written 0600, read back, stale and foreign files recognised."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from relaybus import upstate
from relaybus.upstate import UpState


def test_state_round_trips_with_mode_0600(tmp_path: Path) -> None:
    """What is written is read back, camelCase startedAt on disk, mode 0600."""
    state = UpState(
        pid=os.getpid(),
        url="https://10.0.0.2:8080/#token=t",
        root_url="http://10.0.0.2:8081/",
        root_cert=str(tmp_path / "root.crt"),
        tls=True,
        redis="127.0.0.1:7000",
        ports={"gateway": 8080, "root": 8081},
    )
    written = upstate.write(state, tmp_path)
    assert written.stat().st_mode & 0o777 == 0o600
    assert '"startedAt"' in written.read_text()
    assert upstate.read(tmp_path) == state
    assert upstate.alive(state)


def test_a_reused_pid_is_not_the_up_that_wrote_the_file(tmp_path: Path) -> None:
    """A live process with the file's pid but another start is not that `up` (its pid was
    reused); the same pid and start is; a file without a start (older versions) keeps the
    pid-only check."""
    with subprocess.Popen(["sleep", "60"]) as other:
        try:
            start = upstate.process_start(other.pid)
            assert start is not None and start == upstate.process_start(other.pid)
            own = upstate.process_start(os.getpid())
            assert own is not None and own < start  # this test process started first
            for recorded, live in ((start, True), (own, False), (None, True)):
                state = UpState(pid=other.pid, url="https://x/", pid_start=recorded)
                upstate.write(state, tmp_path)
                read = upstate.read(tmp_path)
                assert read == state and ('"pidStart"' in upstate.path(tmp_path).read_text()) == (
                    recorded is not None
                )
                assert upstate.alive(read) is live, (recorded, start)
        finally:
            other.kill()
    assert upstate.process_start(other.pid) is None


def test_stale_malformed_and_foreign_files(tmp_path: Path) -> None:
    """A dead pid is not alive; garbage reads as None; remove() leaves another up's file."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    state = UpState(pid=int(dead.stdout), url="http://127.0.0.1:1/")
    upstate.write(state, tmp_path)
    assert not upstate.alive(state)
    upstate.remove(tmp_path)  # not ours: kept
    assert upstate.read(tmp_path) == state
    upstate.remove(tmp_path, pid=state.pid)
    assert upstate.read(tmp_path) is None
    upstate.path(tmp_path).write_text('{"pid": "x"}')
    assert upstate.read(tmp_path) is None
    for hostile in ("[" * 60_000, "x" * 100_000):
        upstate.path(tmp_path).write_text(hostile)
        assert upstate.read(tmp_path) is None


def test_relaybus_url_without_a_running_up_is_one_line_and_exit_1(tmp_path: Path) -> None:
    """No state file, or one whose process is gone: `relaybus url` says so in one line."""
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path)}
    cmd = [sys.executable, "-m", "relaybus.cli", "url"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "no relaybus up is running" in out.stderr
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    (tmp_path / "relaybus").mkdir()
    upstate.write(UpState(pid=int(dead.stdout), url="https://x/"), tmp_path / "relaybus")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 1 and "no relaybus up is running" in out.stderr
