"""``relaybus up`` as a subprocess with an isolated HOME/state dir, for end-to-end tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.servers import free_port

REPO = Path(__file__).resolve().parents[2]


def child_pids(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def gone(pid: int, timeout_s: float = 30.0) -> bool:
    """Wait until ``pid`` no longer runs (exited, or a zombie)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


class UpProc:
    """``relaybus up`` on a free loopback port (no metrics or approval listener); its stdout
    (the banner) kept in a file. Plain http, unless ``root_port`` is given: then HTTPS with
    up's own root, whose page is served on that port."""

    def __init__(
        self,
        tmp: Path,
        claude_dir: Path,
        env: dict[str, str] | None = None,
        port: int | None = None,
        root_port: int | None = None,
    ) -> None:
        self.tmp = tmp
        self.home = tmp / "home"
        self.state = tmp / "state"
        self.port = port or free_port()
        self.out = tmp / "up.out"
        self.err = tmp / "up.err"
        self.home.mkdir(parents=True, exist_ok=True)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYBUS_")}
        self.env.update(
            {"HOME": str(self.home), "XDG_STATE_HOME": str(self.state), "PYTHONUNBUFFERED": "1"}
        )
        self.env.update(env or {})
        self.args = [
            sys.executable, "-m", "relaybus.cli", "up",
            "--claude-dir", str(claude_dir),
            "--gateway-host", "127.0.0.1",
            "--gateway-port", str(self.port),
            "--collector-metrics-port", "0",
            "--approval-port", "0",
            "--redis-socket-timeout-s", "2",
        ]  # fmt: skip
        if root_port is None:  # plain http unless a test asks for HTTPS (test_up_https.py)
            self.args += ["--tls-auto", "false"]
        else:
            self.args += ["--tls-root-port", str(root_port)]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def state_dir(self) -> Path:
        return self.state / "relaybus"

    def start(self) -> UpProc:
        with self.out.open("wb") as out, self.err.open("wb") as err:
            # cwd: a directory without a .env file
            self.proc = subprocess.Popen(
                self.args, cwd=self.tmp, env=self.env, stdout=out, stderr=err
            )
        return self

    def wait_banner(self, timeout_s: float = 90.0) -> dict[str, str]:
        """Wait for the start-up banner; its ``label: value`` lines."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self.out.read_text()
            if "Stop with Ctrl-C" in text:
                return dict(re.findall(r"^\s+([A-Za-z ]+):\s+(\S.*)$", text, re.M))
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"no banner (exit {self.proc.poll()}): {self.log()}")

    def log(self) -> str:
        return self.err.read_text(errors="replace")[-4000:]

    def terminate(self, timeout_s: float = 60.0, signum: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        self.proc.send_signal(signum)
        return self.proc.wait(timeout_s)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
