"""Run a real collector (``python -m collector``) as a subprocess, for end-to-end tests.

    proc = CollectorProc(redis_url=server.url, namespace=ns, claude_dir=claude_dir)
    proc.start()
    ...                      # write transcripts under claude_dir/projects/<enc>/<sid>.jsonl
    proc.terminate()         # SIGTERM; returns the exit code (0 expected)
    proc.kill()              # SIGKILL, as in a crash

"Ready" means its heartbeat (with this pid) is in Redis: the process runs and reaches
Redis; its first scan of the claude dir may still be going, so wait for data, not time.
Use it as a context manager (or call :meth:`stop`) so the process never outlives the test.
Extra settings go in ``env`` (``{"RELAYBUS_BACKFILL_EVENTS": "0"}``); the metrics port is
off unless you set ``RELAYBUS_COLLECTOR_METRICS_PORT``. Its stderr (JSON log lines) is
kept in ``log_path`` for assertions and post-mortems.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import redis

from shared.keys import Keys

REPO = Path(__file__).resolve().parents[2]


class CollectorProc:
    def __init__(
        self,
        *,
        redis_url: str,
        namespace: str,
        claude_dir: Path,
        host_id: str = "testhost",
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.redis_url = redis_url
        self.namespace = namespace
        self.claude_dir = claude_dir
        self.host_id = host_id
        self.extra_env = dict(env or {})
        self.log_path = log_path or claude_dir.parent / f"collector-{host_id}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYBUS_")}
        env.update(
            {
                "RELAYBUS_REDIS_URL": self.redis_url,
                "RELAYBUS_NAMESPACE": self.namespace,
                "RELAYBUS_CLAUDE_DIR": str(self.claude_dir),
                "RELAYBUS_HOST_ID": self.host_id,
                "RELAYBUS_COLLECTOR_METRICS_PORT": "0",
                "RELAYBUS_REDIS_SOCKET_TIMEOUT_S": "2",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.extra_env)
        return env

    def start(self, *, wait_ready_s: float = 30.0) -> CollectorProc:
        """Start the process; wait until its heartbeat key exists (when ``wait_ready_s`` > 0)."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed below
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "collector"],
                cwd=self.claude_dir.parent,
                env=self.env(),
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        finally:
            log.close()
        if wait_ready_s > 0:
            self.wait_ready(wait_ready_s)
        return self

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Wait for the heartbeat of this process (its pid) to appear in Redis."""
        assert self.proc is not None
        key = Keys(self.namespace).host(self.host_id)
        client = redis.Redis.from_url(self.redis_url, socket_timeout=2)
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"collector exited with {self.proc.returncode}: {self.log()}")
                try:
                    raw = client.get(key)
                except redis.RedisError:
                    raw = None
                if raw is not None and f'"pid":{self.proc.pid}'.encode() in raw:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"collector not ready after {timeout_s}s: {self.log()}")
                time.sleep(0.05)
        finally:
            client.close()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self, timeout_s: float = 15.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)

    def kill(self) -> None:
        """SIGKILL and reap, as in a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit within 10 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.terminate(10)
        except subprocess.TimeoutExpired:
            self.kill()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return ""

    def __enter__(self) -> CollectorProc:
        if self.proc is None:
            self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
