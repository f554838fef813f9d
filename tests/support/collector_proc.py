"""Run a real collector (``python -m relaybus.collector``) as a subprocess, for end-to-end tests.

    proc = CollectorProc(redis_url=server.url, namespace=ns, claude_dir=claude_dir)
    proc.start()
    ...                      # write transcripts under claude_dir/projects/<enc>/<sid>.jsonl
    proc.terminate()         # SIGTERM; returns the exit code (0 expected)
    proc.kill()              # SIGKILL, as in a crash

"Ready" means its heartbeat (with this pid) is in Redis: the process runs and reaches
Redis; its first scan of the claude dir may still be going, so wait for data, not time.
Use it as a context manager (or call :meth:`stop`) so the process never outlives the test.
Extra settings go in ``env`` (``{"RELAYBUS_BACKFILL_EVENTS": "0"}``); the metrics port is
off unless you set ``RELAYBUS_COLLECTOR_METRICS_PORT``, and so is the approval
endpoint unless you set ``RELAYBUS_APPROVAL_PORT``. Its stderr (JSON log lines) is
kept in ``log_path`` for assertions and post-mortems.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import TracebackType

import redis

from relaybus.shared.store.keys import Keys
from tests.support.procs import ManagedProcess

REPO = Path(__file__).resolve().parents[2]


class CollectorProc(ManagedProcess):
    name = "collector"
    log_path: Path  # always set: the default is next to claude_dir

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
        super().__init__(log_path or claude_dir.parent / f"collector-{host_id}.log")
        self.redis_url = redis_url
        self.namespace = namespace
        self.claude_dir = claude_dir
        self.host_id = host_id
        self.extra_env = dict(env or {})

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYBUS_")}
        env.update(
            {
                "RELAYBUS_REDIS_URL": self.redis_url,
                "RELAYBUS_NAMESPACE": self.namespace,
                "RELAYBUS_CLAUDE_DIR": str(self.claude_dir),
                "RELAYBUS_HOST_ID": self.host_id,
                "RELAYBUS_COLLECTOR_METRICS_PORT": "0",
                "RELAYBUS_APPROVAL_PORT": "0",
                "RELAYBUS_REDIS_SOCKET_TIMEOUT_S": "2",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.extra_env)
        return env

    def start(self, *, wait_ready_s: float = 30.0) -> CollectorProc:
        """Start the process; wait until its heartbeat key exists (when ``wait_ready_s`` > 0)."""
        self.spawn(
            [sys.executable, "-m", "relaybus.collector"], cwd=self.claude_dir.parent, env=self.env()
        )
        if wait_ready_s > 0:
            self.wait_ready(wait_ready_s)
        return self

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Wait for the heartbeat of this process (its pid) to appear in Redis."""
        key = Keys(self.namespace).host(self.host_id)
        client: redis.Redis | redis.RedisCluster
        if self.extra_env.get("RELAYBUS_REDIS_CLUSTER") == "1":
            client = redis.RedisCluster.from_url(self.redis_url, socket_timeout=2)
        else:
            client = redis.Redis.from_url(self.redis_url, socket_timeout=2)

        def beating() -> bool:
            try:
                raw = client.get(key)
            except redis.RedisError:
                return False
            return raw is not None and f'"pid":{self.pid}'.encode() in raw

        try:
            self.wait_until(beating, timeout_s)
        finally:
            client.close()

    def __enter__(self) -> CollectorProc:
        if self.proc is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
