"""A real Sentinel deployment on loopback: a primary, a replica, three Sentinels.

    rig = SentinelRig(tmp_path / "ha", down_after_ms=1000)
    rig.start()               # returns once every Sentinel sees the replica and its peers
    rig.sentinels             # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3" (RELAYBUS_REDIS_SENTINELS)
    rig.primary.stop()        # SIGKILL
    rig.wait_promoted(rig.replica.port)
    rig.stop()

Every process is ``redis-server`` from PATH (a Sentinel is ``redis-server <conf> --sentinel``).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.support.procs import stop_process
from tests.support.servers import RedisServer, free_port, server_binaries

SERVICE = "relaybus"
REDIS = server_binaries()["redis"]


@dataclass
class SentinelProc:
    """One ``redis-server --sentinel`` process; its config file is its own (Sentinel rewrites it)."""

    workdir: Path
    primary_port: int
    down_after_ms: int
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "sentinel.conf"
        conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self.workdir}\n"
            f"logfile {self.workdir / 'sentinel.log'}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary_port} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} {self.down_after_ms}\n"
            f"sentinel failover-timeout {SERVICE} {self.down_after_ms * 4}\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
        )
        self.proc = subprocess.Popen(
            [REDIS, str(conf), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=2, decode_responses=True)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, 5)
            self.proc = None


class SentinelRig:
    def __init__(self, workdir: Path, *, down_after_ms: int = 1000) -> None:
        self.primary = RedisServer("redis", REDIS, workdir / "primary")
        self.replica = RedisServer("redis", REDIS, workdir / "replica")
        self.watchers = [
            SentinelProc(workdir / f"sentinel{i}", self.primary.port, down_after_ms)
            for i in range(3)
        ]

    @property
    def sentinels(self) -> str:
        return ",".join(f"127.0.0.1:{s.port}" for s in self.watchers)

    def start(self, timeout_s: float = 60.0) -> None:
        """Primary, replica and Sentinels up and aware of each other. Sentinels announce
        themselves every 2 s; on a loaded machine meeting took more than 30 s once."""
        self.primary.start()
        self.replica.start()
        with self.replica.client() as c:
            c.replicaof("127.0.0.1", self.primary.port)
        self._until(lambda: self._link_up(self.replica.port), timeout_s, "replica never synced")
        for s in self.watchers:
            s.start()
        self._until(self._quorum, timeout_s, "sentinels never met each other and the replica")

    def stop(self) -> None:
        for s in self.watchers:
            s.stop()
        self.replica.stop()
        self.primary.stop()

    def named_primary(self) -> int | None:
        """The port every Sentinel names as the primary, or None while they disagree."""
        ports = set()
        for s in self.watchers:
            try:
                with s.client() as c:
                    addr = c.sentinel_get_master_addr_by_name(SERVICE)
            except redis.RedisError:
                return None
            ports.add(int(addr[1]) if addr else None)
        return ports.pop() if len(ports) == 1 else None

    def wait_promoted(self, port: int, timeout_s: float = 30.0) -> float:
        """Wait until every Sentinel names ``port`` and it is a writable primary; seconds taken."""
        t0 = time.monotonic()

        def promoted() -> bool:
            if self.named_primary() != port:
                return False
            with redis.Redis(port=port, socket_timeout=2) as c:
                return bool(c.info("replication")["role"] == "master")

        self._until(promoted, timeout_s, f"port {port} never became the primary")
        return time.monotonic() - t0

    def _quorum(self) -> bool:
        for s in self.watchers:
            try:
                with s.client() as c:
                    state = c.sentinel_master(SERVICE)
            except redis.RedisError:
                return False
            if int(state["num-other-sentinels"]) < 2 or int(state["num-slaves"]) < 1:
                return False
        return True

    @staticmethod
    def _link_up(port: int) -> bool:
        with redis.Redis(port=port, socket_timeout=2) as c:
            return bool(c.info("replication").get("master_link_status") == "up")

    @staticmethod
    def _until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline:
                raise TimeoutError(what)
            time.sleep(0.05)
