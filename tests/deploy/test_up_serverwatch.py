"""`relaybus up` when its embedded server dies: started again (3 times in 10 minutes), then
`up` stops with one line and exit 1 instead of retrying forever."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx

from tests.support.deploy_up import UpProc, child_pids
from tests.support.wait import poll


def _live_server(up: UpProc, not_pid: int | None = None) -> int | None:
    """The pid of up's running (not zombie) server other than ``not_pid``, or None."""
    assert up.proc is not None
    for pid in child_pids(up.proc.pid):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if pid != not_pid and state != "Z":
            return pid
    return None


def _ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_dead_server_is_restarted_then_up_gives_up(tmp_path: Path, claude_dir: Path) -> None:
    """Killed three times, the server is back each time and the gateway ready again; the
    fourth death in 10 minutes ends `up` with exit 1 and one line naming server.log."""
    up = UpProc(tmp_path, claude_dir, env={"RELAYBUS_LOG_LEVEL": "ERROR"})
    try:
        up.start().wait_banner()
        server = poll(lambda: _live_server(up), timeout_s=30)
        for _ in range(3):
            os.kill(server, signal.SIGKILL)
            server = poll(lambda old=server: _live_server(up, old), timeout_s=60)  # type: ignore[misc]
            poll(lambda: _ready(up.port), timeout_s=60)
        os.kill(server, signal.SIGKILL)
        assert up.proc is not None
        code = up.proc.wait(90)
    finally:
        up.kill()
    err = up.log().strip().splitlines()
    assert code == 1, err
    log = up.state_dir / "server" / "server.log"
    assert err[-1] == (
        f"relaybus up: the embedded server exited (code -9) 4 times within 10 minutes; see {log}"
    ), err
    assert "Traceback" not in "\n".join(err)
